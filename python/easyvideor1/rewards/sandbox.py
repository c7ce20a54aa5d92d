"""Run untrusted code in a separate, locked-down process: :func:`run_sandboxed`.

Two isolation modes; the strongest that works here is chosen once per process
(``EVR1_SANDBOX=auto|bwrap|unshare`` forces one):

``bwrap`` (bubblewrap, preferred)
    New user, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``), no
    further user namespaces inside (``--disable-userns``), new session, killed with its
    parent. The file system is an empty root with read-only ``/usr`` (plus the ``/lib*``,
    ``/bin`` links and the interpreter's prefix when it lives elsewhere), a fresh
    ``/proc``, a minimal read-only ``/dev`` (null, zero, urandom, ...) with an 8 MiB
    ``/dev/shm``, a size-capped tmpfs at ``/tmp`` (the work dir; with /dev/shm the only
    writable places; the root itself is remounted read-only) and the inputs read-only at
    ``/sandbox/in`` (a copy under the host's /tmp, deleted after the run). ``/root``, ``/work``,
    ``/home``, ``/etc`` and every other host path do not exist inside. The only network
    is the sandbox's own loopback. bwrap itself never runs as root (as root it is started
    as ``nobody``, uid 65534), so RLIMIT_NPROC binds (the kernel exempts uid 0 from it).
``unshare`` (fallback when bwrap or unprivileged user namespaces are unavailable)
    Needs root and util-linux ``unshare``/``setpriv``: new mount, PID, network, IPC and
    UTS namespaces (``unshare --mount --pid --fork --kill-child --net --ipc --uts``), killed
    with its parent. Inside, still root and before any untrusted code, the launcher makes
    every mount private and builds the same file system as the bwrap mode on a tmpfs: the
    same read-only binds (mounted nosuid), a fresh ``/proc``, a read-only ``/dev`` of
    null/zero/full/random/urandom with an 8 MiB ``/dev/shm``, a size-capped tmpfs ``/tmp``
    as the work dir and the inputs read-only at ``/sandbox/in``; it remounts that root
    read-only, ``pivot_root``s into it and detaches the old root (no host path is left in
    the namespace), and ``setpriv`` then drops to a per-run unprivileged uid with no
    groups, no capabilities (bounding and inheritable sets cleared) and ``no_new_privs``;
    a seccomp filter refuses new user namespaces to the program (x86_64 and aarch64 only;
    elsewhere the mode is unavailable). Any failed step stops the run before the program starts (the probe then fails).

Neither works -> :class:`SandboxUnavailable`; code is never run unconfined or half-confined.
The probe is a real run of a program that checks the confinement from inside (not root,
no capabilities, no host files, only a loopback interface, a read-only root, no new user
namespaces).

In both modes the program gets RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC,
RLIMIT_NOFILE, no core dumps, a wall-clock limit (the whole process tree is killed when it
passes), a minimal environment, capped stdout/stderr, and returns the new or changed files
of its work dir (capped).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.workpool.proc import CappedBuffer, kill_group, read_until, remaining, spawn_in_group

NOBODY = 65534
_LAUNCHER = (Path(__file__).with_name("sandbox_launcher.py")).read_text()
_IN_DIR = "/sandbox/in"
_WORKDIR = "/tmp"
_UNSHARE_UID_BASE = int(os.environ.get("EVR1_SANDBOX_UID_BASE", "200000"))
_UIDS_PER_PROCESS = 64  # per-run uids: a block per host pid, so that worker processes rarely share one

# Run by the probe inside the sandbox: exits non-zero unless the confinement is in place.
_PROBE_HIDDEN = ("/etc", "/root", "/home", "/var", "/work", "/opt", "/srv")
_PROBE_CHECK = """
import os, socket
HIDDEN = %r
problems = []
if os.getuid() == 0 or os.geteuid() == 0:
    problems.append("runs as root")
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
if int(status["CapEff"].strip(), 16) or int(status["CapPrm"].strip(), 16):
    problems.append("has capabilities")
for path in HIDDEN + ["/proc/1/root/etc"]:
    if os.path.exists(path):
        problems.append("host path visible: " + path)
names = sorted(name for _, name in socket.if_nameindex())
if names != ["lo"]:
    problems.append("network interfaces: " + ",".join(names))
import ctypes
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0:  # CLONE_NEWUSER
    problems.append("can create user namespaces")
try:
    open("/probe-write", "w")
    problems.append("root file system writable")
except OSError:
    pass
open("probe-ok", "w").write("ok")
if problems:
    raise SystemExit("confinement check failed: " + "; ".join(problems))
"""


class SandboxUnavailable(EasyVideoR1Error):
    """No isolation mechanism works on this machine; untrusted code will not be run."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. ``max_processes`` counts every process and thread of the run (in
    ``unshare`` mode the launcher is not counted, so one more can exist)."""

    wall_time_s: float = 10.0
    cpu_time_s: int = 10
    memory_bytes: int = 512 << 20  # RLIMIT_AS (address space) of each process
    file_size_bytes: int = 16 << 20  # RLIMIT_FSIZE: largest file a process may write
    tmpfs_bytes: int = 64 << 20  # total size of the writable /tmp (the work dir)
    max_processes: int = 32
    max_open_files: int = 64
    output_bytes: int = 1 << 20  # kept of stdout and of stderr each; the rest is dropped
    files_out_bytes: int = 4 << 20
    files_out_max: int = 64


@dataclass(frozen=True)
class SandboxResult:
    """``returncode``: exit status, ``-N`` when killed by signal N, ``None`` when the wall
    limit killed the run before it reported. ``reason`` says why a run did not succeed."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    reason: str | None
    files_out: dict[str, bytes] = field(default_factory=dict)
    mode: str = ""
    wall_s: float = 0.0
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


_MODE_LOCK = threading.Lock()
_MODES: dict[str, str] = {}
_UID_LOCK = threading.Lock()
_UIDS_IN_USE: set[int] = set()
_RUN_IDS = itertools.count()


def sandbox_python() -> str:
    """The interpreter used inside: the system python3 (whose files are all under /usr)
    when present, else the venv's base interpreter (its prefix is bound read-only)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(os.path.join(sys.base_prefix, "bin", "python3"))


def sandbox_mode(*, refresh: bool = False) -> str:
    """``"bwrap"`` or ``"unshare"`` (see the module docstring); raises SandboxUnavailable.

    The answer is probed once (a real sandboxed run) and cached; ``refresh`` probes again."""
    wanted = os.environ.get("EVR1_SANDBOX", "auto").strip().lower() or "auto"
    if wanted not in ("auto", "bwrap", "unshare"):
        raise SandboxUnavailable(f"EVR1_SANDBOX must be auto, bwrap or unshare, got {wanted!r}")
    with _MODE_LOCK:
        if refresh:
            _MODES.clear()
        if wanted in _MODES:
            return _MODES[wanted]
        _sweep_stale()
        problems = []
        for mode in ("bwrap", "unshare") if wanted == "auto" else (wanted,):
            why = _probe(mode)
            if why is None:
                _MODES[wanted] = mode
                return mode
            problems.append(f"{mode}: {why}")
        raise SandboxUnavailable("cannot isolate untrusted code, refusing to run it (" + "; ".join(problems)
                                 + "). Install bubblewrap with unprivileged user namespaces, or run as root "
                                 "with util-linux unshare/setpriv.")


def _tmp_base() -> str | None:
    # Under /tmp rather than $TMPDIR: bwrap runs as nobody and must reach the inputs.
    return os.environ.get("EVR1_SANDBOX_TMP") or ("/tmp" if os.access("/tmp", os.W_OK) else None)


def _sweep_stale() -> None:
    """Remove run dirs left by processes that died mid-run (their ``finally`` never ran)."""
    base = _tmp_base() or tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if name.startswith("evr1-sbx-") and len(parts) > 2 and parts[2].isdigit():
            if not os.path.exists(f"/proc/{parts[2]}"):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def _probe(mode: str) -> str | None:
    tools = ["bwrap"] if mode == "bwrap" else ["unshare", "setpriv"]
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found"
    if mode == "unshare" and os.geteuid() != 0:
        return "needs root to drop to an unprivileged uid"
    try:
        binds = _runtime_mounts(sandbox_python())[0]  # an interpreter prefix under /opt is allowed
        hidden = [path for path in _PROBE_HIDDEN if not any((bind + "/").startswith(path + "/") for bind in binds)]
        result = _run(mode, [sandbox_python(), "probe.py"], b"", SandboxLimits(wall_time_s=20),
                      {"probe.py": (_PROBE_CHECK % hidden).encode()}, {})
    except OSError as exc:
        return str(exc)
    if result.returncode != 0:
        return f"probe failed ({result.reason}): {result.stderr.decode(errors='replace').strip()[-300:]}"
    if result.files_out != {"probe-ok": b"ok"}:
        return f"probe failed: the work dir did not round-trip ({sorted(result.files_out)})"
    return None


def run_sandboxed(
    program: str | Sequence[str],
    *,
    stdin: bytes | str = b"",
    limits: SandboxLimits | None = None,
    files: Mapping[str, bytes | str] | None = None,
    env: Mapping[str, str] | None = None,
) -> SandboxResult:
    """Run ``program`` isolated and return what it did; never raises for what the code does.

    ``program`` is Python source (run as ``main.py`` in the work dir) or an argv whose
    first element ``python``/``python3`` means the sandbox interpreter. ``files`` are
    written into the work dir first (relative paths). Raises :class:`SandboxUnavailable`
    when no isolation works and ``ValueError`` for a bad file name.
    """
    limits = limits or SandboxLimits()
    files = dict(files or {})
    if isinstance(program, str):
        files["main.py"] = program
        argv = [sandbox_python(), "main.py"]
    else:
        argv = [str(arg) for arg in program]
        if not argv:
            raise ValueError("empty argv")
        if argv[0] in ("python", "python3"):
            argv[0] = sandbox_python()
    for name in files:
        parts = Path(name).parts
        if not parts or Path(name).is_absolute() or ".." in parts:
            raise ValueError(f"sandbox file names must be relative without '..', got {name!r}")
    # surrogatepass: a lone surrogate (possible in decoded JSON) reaches the program as
    # invalid UTF-8 for it to reject, instead of failing here.
    data = {name: value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
            for name, value in files.items()}
    stdin_bytes = stdin.encode("utf-8", "surrogatepass") if isinstance(stdin, str) else bytes(stdin)
    return _run(sandbox_mode(), argv, stdin_bytes,
                limits, data, dict(env or {}))


def _bwrap_argv(python: str, in_dir: str, limits: SandboxLimits) -> list[str]:
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "sandbox"]
    binds, links = _runtime_mounts(python)
    for top in binds:
        argv += ["--ro-bind", top, top]
    for link, target in links.items():
        argv += ["--symlink", target, link]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(8 << 20), "--tmpfs", "/dev/shm",
             "--size", str(limits.tmpfs_bytes), "--tmpfs", _WORKDIR,
             "--ro-bind", in_dir, _IN_DIR, "--chdir", _WORKDIR, "--clearenv",
             # bwrap's root and /dev are unbounded tmpfs: only /tmp and /dev/shm stay writable.
             "--remount-ro", "/dev", "--remount-ro", "/", "--"]
    return argv


def _runtime_mounts(python: str) -> tuple[list[str], dict[str, str]]:
    """What both modes show of the host, read-only: ``/usr``, the real ``/lib*``/``/bin`` dirs
    (or their links) and the interpreter's prefix when it is outside ``/usr``."""
    binds, links = ["/usr"], {}
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            links[top] = os.readlink(top)
        elif os.path.isdir(top):
            binds.append(top)
    if not python.startswith("/usr/"):
        binds.append(os.path.dirname(os.path.dirname(python)))
    return binds, links


def _unshare_argv() -> list[str]:
    # setpriv --pdeathsig: unshare dies with the spawning thread, --kill-child then takes the
    # namespace's pid 1 and with it every process of the run.
    return [_tool("setpriv"), "--pdeathsig=KILL", "--", _tool("unshare"), "--mount", "--pid", "--fork",
            "--kill-child", "--net", "--ipc", "--uts", "--"]


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise OSError(f"{name} not found")
    return os.path.realpath(found)


def _acquire_uid() -> int:
    base = _UNSHARE_UID_BASE + (os.getpid() % (1 << 22)) * _UIDS_PER_PROCESS
    with _UID_LOCK:
        slot = next(i for i in itertools.count() if base + i not in _UIDS_IN_USE)
        _UIDS_IN_USE.add(base + slot)
        return base + slot


def _run(mode: str, argv: list[str], stdin: bytes, limits: SandboxLimits, files: dict[str, bytes],
         env: dict[str, str]) -> SandboxResult:
    python = sandbox_python()
    host_dir = tempfile.mkdtemp(prefix=f"evr1-sbx-{os.getpid()}-{next(_RUN_IDS)}-", dir=_tmp_base())
    uid = _acquire_uid() if mode == "unshare" else None
    try:
        in_dir = os.path.join(host_dir, "in")
        os.mkdir(in_dir)
        for name, content in files.items():
            target = os.path.join(in_dir, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            Path(target).write_bytes(content)
        for root, _dirs, names in os.walk(host_dir):  # bwrap runs as nobody and must read these
            os.chmod(root, 0o755)
            for name in names:
                os.chmod(os.path.join(root, name), 0o644)
        workdir, confine = _WORKDIR, None
        if mode == "bwrap":
            # As root, bwrap is started as nobody (uid 0 is exempt from RLIMIT_NPROC); any
            # other user already is unprivileged and runs it as itself.
            spawn_user = NOBODY if os.geteuid() == 0 else None
            prefix = _bwrap_argv(python, in_dir, limits)
        else:
            root = os.path.join(host_dir, "root")  # an empty mount point, for the private tmpfs root
            os.mkdir(root, 0o700)
            binds, links = _runtime_mounts(python)
            setpriv = _tool("setpriv")
            if not any(setpriv.startswith(top.rstrip("/") + "/") for top in binds):
                raise OSError(f"setpriv ({setpriv}) is outside the runtime dirs the sandbox binds")
            confine = {"root": root, "binds": binds, "symlinks": links, "in_dir": in_dir, "uid": uid,
                       "tmpfs_bytes": int(limits.tmpfs_bytes), "setpriv": setpriv}
            prefix, spawn_user = _unshare_argv(), None
        report_r, report_w = os.pipe()
        spec = {
            "argv": argv, "workdir": workdir, "in_dir": _IN_DIR, "report_fd": report_w, "confine": confine,
            "files_cap": limits.files_out_bytes, "files_max": limits.files_out_max,
            # The launcher (and in bwrap mode its reaper, pid 1) share the uid: not counted.
            "limits": {"cpu": int(limits.cpu_time_s), "as": int(limits.memory_bytes),
                       "fsize": int(limits.file_size_bytes), "nproc": int(limits.max_processes) + (2 if mode == "bwrap" else 1),
                       "nofile": int(limits.max_open_files), "core": 0},
            "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
                    "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8",
                    **env},
        }
        full = prefix + [python, "-I", "-S", "-c", _LAUNCHER, json.dumps(spec)]
        return _execute(full, mode, stdin, limits, report_r, report_w, spawn_user)
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)
        if uid is not None:
            with _UID_LOCK:
                _UIDS_IN_USE.discard(uid)


def _execute(argv: list[str], mode: str, stdin: bytes, limits: SandboxLimits, report_r: int,
             report_w: int, user: int | None) -> SandboxResult:
    start = time.monotonic()
    deadline = start + limits.wall_time_s
    try:
        proc = spawn_in_group(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(report_w,), cwd="/", env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            user=user, group=user, extra_groups=[] if user is not None else None)
    except BaseException:
        os.close(report_r)
        raise
    finally:
        os.close(report_w)
    out, err = CappedBuffer(limits.output_bytes), CappedBuffer(limits.output_bytes)
    report = CappedBuffer(limits.files_out_bytes * 2 + (1 << 20))
    timed_out = False
    try:
        timed_out = read_until({proc.stdout.fileno(): out, proc.stderr.fileno(): err, report_r: report},
                               deadline, stdin=(proc.stdin, stdin))
        if not timed_out:
            try:
                proc.wait(timeout=remaining(deadline))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        if timed_out or proc.poll() is None:
            # bwrap/unshare die with their group; the kernel then kills the whole PID namespace.
            kill_group(proc.pid)
        proc.wait()
        for handle in (proc.stdin, proc.stdout, proc.stderr):
            if not handle.closed:
                handle.close()
        os.close(report_r)
    truncated = out.truncated or err.truncated or report.truncated
    return _result(mode, out.data, err.data, bytes(report.data), proc.returncode, timed_out, truncated, limits,
                   time.monotonic() - start)


def _result(mode: str, out: bytearray, err: bytearray, report_raw: bytes, outer_rc: int, timed_out: bool,
            truncated: bool, limits: SandboxLimits, wall: float) -> SandboxResult:
    report: dict = {}
    if report_raw and not timed_out:
        try:
            report = json.loads(report_raw)
        except ValueError:
            report = {}
    files: dict[str, bytes] = {}
    for name, encoded in (report.get("files") or {}).items():
        files[str(name)] = base64.b64decode(encoded)
    truncated = truncated or bool(report.get("files_truncated"))
    if timed_out:
        returncode, reason = None, f"wall time limit exceeded ({limits.wall_time_s:g}s)"
    elif report.get("signal") is not None:
        sig = int(report["signal"])
        returncode = -sig
        reason = ("cpu time limit exceeded" if sig == signal.SIGXCPU
                  else f"killed by signal {signal.Signals(sig).name}" if sig in signal.valid_signals()
                  else f"killed by signal {sig}")
    elif report.get("exit") is not None:
        returncode = int(report["exit"])
        reason = None if returncode == 0 else _exit_reason(returncode, bytes(err))
    else:
        returncode = outer_rc
        reason = f"sandbox failed to start (exit {outer_rc}): {bytes(err).decode(errors='replace')[-300:]}"
    if report.get("error"):
        reason = f"{reason}; {report['error']}" if reason else str(report["error"])
    if truncated:
        reason = f"{reason}; output truncated" if reason else "output truncated"
    return SandboxResult(returncode, bytes(out), bytes(err), timed_out, reason, files, mode, wall, truncated)


def _exit_reason(code: int, stderr: bytes) -> str:
    tail = stderr[-4000:]
    if b"MemoryError" in tail:
        return f"exit code {code}: memory limit exceeded (MemoryError)"
    if b"Resource temporarily unavailable" in tail or b"BlockingIOError" in tail:
        return f"exit code {code}: process limit reached"
    if b"File too large" in tail or b"No space left" in tail:
        return f"exit code {code}: file size limit reached"
    return f"exit code {code}"
