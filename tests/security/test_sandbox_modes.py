"""Hostile programs against EVERY mode the code sandbox can select (issue 16, item 4).

Each test runs once per mode, the mode forced the way a service is configured
(``EVR1_SANDBOX=bwrap|unshare``; ``auto`` resolves to one of them). The attacks are real:
a TCP listener and an abstract unix socket on the host, secret files in the repo, in $HOME and
in the host's /tmp, secrets in the parent's environment, fork and memory bombs, endless loops,
output floods and detached background processes.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from easyvideor1.rewards import sandbox as sandbox_module
from easyvideor1.rewards.sandbox import SandboxLimits, SandboxUnavailable, run_sandboxed, sandbox_mode

REPO = Path(__file__).resolve().parents[2]
MODES = ("bwrap", "unshare")
FAST = SandboxLimits(wall_time_s=30, cpu_time_s=5)
# What the program may see at its root, in either mode (the /lib* set depends on the host).
ALLOWED_ROOT = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "proc", "dev", "tmp", "sandbox"}


@pytest.fixture(params=MODES)
def mode(request, monkeypatch):
    monkeypatch.setenv("EVR1_SANDBOX", request.param)
    # Every mode must be available where the suite runs (CI runs as root with bubblewrap
    # installed): a mode that cannot be had fails here, it is never skipped.
    assert sandbox_mode() == request.param
    return request.param


def _run(program: str, **kwargs) -> sandbox_module.SandboxResult:
    kwargs.setdefault("limits", FAST)
    return run_sandboxed(program, **kwargs)


def _assert_still_works(mode: str) -> None:
    result = _run("print(6 * 7)")
    assert result.ok and result.mode == mode, result
    assert result.stdout.strip() == b"42"


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def _wait_gone(marker: str, timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_auto_selects_one_of_the_tested_modes(monkeypatch):
    monkeypatch.setenv("EVR1_SANDBOX", "auto")
    assert sandbox_mode() in MODES


def test_unprivileged_and_minimal_root(mode):
    program = (
        "import os, json\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)\n"
        "print(json.dumps({'uid': os.getuid(), 'euid': os.geteuid(), 'groups': os.getgroups(),\n"
        "    'caps': [status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],\n"
        "    'nnp': status['NoNewPrivs'].strip(), 'root': sorted(os.listdir('/')), 'cwd': os.getcwd(),\n"
        "    'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}))\n"
    )
    result = _run(program)
    assert result.ok and result.mode == mode, result
    seen = json.loads(result.stdout)
    assert seen["uid"] != 0 and seen["euid"] != 0 and 0 not in seen["groups"]
    assert set(seen["root"]) <= ALLOWED_ROOT, seen["root"]
    assert seen["cwd"] == "/tmp"
    assert len(seen["pids"]) <= 4  # a private PID namespace: its init, the launcher, the program
    if mode == "unshare":
        assert seen["caps"] == ["0000000000000000"] * 5 and seen["nnp"] == "1"
    else:  # bwrap keeps no effective capabilities for an unprivileged uid
        assert seen["caps"][2] == "0000000000000000"


def test_no_new_user_namespaces_but_threads_and_subprocesses_work(mode):
    """Inside a new user namespace a process would hold every capability again."""
    program = (
        "import ctypes, os, subprocess, threading\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for flags in (0x10000000, 0x10020000):\n"  # CLONE_NEWUSER, + CLONE_NEWNS
        "    print('unshare', libc.unshare(flags), ctypes.get_errno() != 0)\n"
        "out = []\n"
        "t = threading.Thread(target=out.append, args=(1,)); t.start(); t.join()\n"
        "print('thread', out, 'subprocess', subprocess.run(['echo', 'hi'], capture_output=True).stdout)\n"
    )
    result = _run(program)
    assert result.ok and result.mode == mode, result
    lines = result.stdout.decode().splitlines()
    assert lines[:2] == ["unshare -1 True", "unshare -1 True"], lines
    assert lines[2] == "thread [1] subprocess b'hi\\n'"


def test_network_to_a_host_listener_is_unreachable(mode, tcp_listener):
    port, accepted = tcp_listener
    abstract = f"\0evr1-sbx-test-{uuid.uuid4().hex}"
    unix_server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_server.bind(abstract)
    unix_server.listen(4)
    unix_server.settimeout(0)
    program = (
        "import socket\n"
        "print('interfaces', sorted(n for _, n in socket.if_nameindex()))\n"
        "s = socket.socket(); s.settimeout(2)\n"
        f"try:\n    s.connect(('127.0.0.1', {port})); print('TCP CONNECTED')\n"
        "except OSError as e:\n    print('tcp blocked', e.errno)\n"
        "u = socket.socket(socket.AF_UNIX)\n"
        f"try:\n    u.connect({abstract!r}); print('UNIX CONNECTED')\n"
        "except OSError as e:\n    print('unix blocked', e.errno)\n"
        "try:\n    socket.getaddrinfo('example.com', 80); print('RESOLVED')\n"
        "except OSError as e:\n    print('no dns')\n"
    )
    try:
        result = _run(program)
        assert result.ok, result
        out = result.stdout.decode()
        assert "interfaces ['lo']" in out
        assert "tcp blocked" in out and "unix blocked" in out and "no dns" in out, out
        assert "CONNECTED" not in out and "RESOLVED" not in out
        time.sleep(0.3)
        assert accepted == []
        with pytest.raises(BlockingIOError):
            unix_server.accept()  # nothing ever connected
        with socket.create_connection(("127.0.0.1", port), timeout=2):  # the host reaches it
            pass
    finally:
        unix_server.close()


def test_no_reads_outside_the_work_dir_and_the_runtime(mode, tmp_path):
    secret, name = uuid.uuid4().hex, uuid.uuid4().hex  # the content is the secret, not the name
    home_secret = Path.home() / f".evr1-secret-{name}"
    tmp_secret = Path("/tmp") / f"evr1-secret-{name}"
    for path in (home_secret, tmp_secret):
        path.write_text(secret)
        path.chmod(0o644)  # world-readable: plain permissions would not stop a read
    targets = [
        "/etc/passwd", "/etc/hostname", "/proc/1/root/etc/passwd",
        str(REPO / "pyproject.toml"), str(REPO / "python/easyvideor1/rewards/sandbox.py"),
        str(Path(__file__).resolve()), str(REPO / ".venv/bin/python"),
        str(home_secret), str(Path.home()), str(tmp_secret), "/var/tmp", "/sys/class/net",
    ]
    program = (
        "import json, os\n"
        "seen = {}\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        seen[path] = os.listdir(path) if os.path.isdir(path) else open(path).read()\n"
        "    except OSError as e:\n"
        "        seen[path] = e.errno\n"
        "import email.mime.text\n"  # the runtime is readable
        "seen['runtime'] = len(open(os.__file__).read()) > 0\n"
        "try:\n    open(os.__file__, 'a'); seen['runtime_write'] = 'WROTE'\n"
        "except OSError as e:\n    seen['runtime_write'] = e.errno\n"
        "print(json.dumps(seen))\n"
    )
    try:
        result = _run(program)
    finally:
        home_secret.unlink()
        tmp_secret.unlink()
    assert result.ok and result.mode == mode, result
    assert secret.encode() not in result.stdout
    seen = json.loads(result.stdout)
    leaked = {path: value for path, value in seen.items() if path in targets and not isinstance(value, int)}
    assert leaked == {}, f"{mode}: read outside the sandbox: {sorted(leaked)}"
    assert seen["runtime"] is True and isinstance(seen["runtime_write"], int)


def test_no_writes_outside_the_work_dir(mode):
    marker = f"evr1-escape-{uuid.uuid4().hex}"
    host_paths = [Path("/tmp") / marker, Path("/dev/shm") / marker, Path("/var/tmp") / marker]
    inside = [str(p) for p in host_paths] + [f"/{marker}", f"/usr/{marker}", f"/dev/{marker}",
                                             f"/sandbox/in/{marker}", str(REPO / marker), f"/root/{marker}"]
    program = (
        "import os\n"
        f"for path in {inside!r}:\n"
        "    try:\n        open(path, 'w').write('x'); print('WROTE', path)\n"
        "    except OSError as e:\n        print('denied', path, e.errno)\n"
        f"os.makedirs('sub/deeper'); open('sub/deeper/{marker}', 'w').write('ok')\n"
    )
    result = _run(program)
    reached = [path for path in host_paths + [REPO / marker, Path("/") / marker, Path("/usr") / marker,
                                              Path("/root") / marker] if path.exists()]
    for path in reached:  # never leave litter on the host, even when the test fails
        path.unlink()
    assert reached == [], f"{mode}: writes reached the host"
    for folder in ("/tmp", "/dev/shm", "/var/tmp"):
        assert not [name for name in os.listdir(folder) if marker in name]
    assert result.ok and result.mode == mode, result
    wrote = {line.split()[1] for line in result.stdout.decode().splitlines() if line.startswith("WROTE")}
    # Only the sandbox's own /tmp (the work dir) and its own /dev/shm take writes.
    assert wrote <= {str(host_paths[0]), str(host_paths[1])}, wrote
    assert result.files_out[f"sub/deeper/{marker}"] == b"ok"
    assert result.files_out.get(marker) == (b"x" if str(host_paths[0]) in wrote else None)


def test_work_dir_and_file_sizes_are_capped(mode):
    big = _run("open('big', 'wb').write(b'x' * (4 << 20))", limits=SandboxLimits(file_size_bytes=1 << 20))
    assert big.returncode == 1 and "file size" in big.reason
    full = _run("for i in range(64): open(f'f{i}', 'wb').write(b'x' * (1 << 20))",
                limits=SandboxLimits(tmpfs_bytes=4 << 20))
    assert full.returncode == 1 and b"No space left" in full.stderr
    name = f"evr1-fill-{uuid.uuid4().hex}"
    shm = _run(f"open('/dev/shm/{name}', 'wb').write(b'x' * (64 << 20))",
               limits=SandboxLimits(file_size_bytes=128 << 20))
    host_copy = Path("/dev/shm") / name
    reached = host_copy.exists()
    host_copy.unlink(missing_ok=True)
    assert not reached, f"{mode}: the sandbox filled the host's /dev/shm"
    assert shm.returncode == 1 and b"No space left" in shm.stderr  # its own /dev/shm holds 8 MiB


def test_environment_is_empty_of_secrets(mode, monkeypatch):
    secret = uuid.uuid4().hex
    names = ["EVR1_REWARD_TOKEN", "EVR1_FRAME_CACHE_TOKEN", "EVR1_JUDGE_API_KEY", "AWS_ACCESS_KEY_ID",
             "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
             "OPENAI_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "EVR1_TEST_SECRET"]
    for name in names:
        monkeypatch.setenv(name, f"{name}-{secret}")
    program = (
        "import json, os\n"
        "raw = []\n"
        "for pid in sorted(p for p in os.listdir('/proc') if p.isdigit()) + ['self']:\n"
        "    try:\n        raw.append(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
        "    except OSError:\n        pass\n"
        "print(json.dumps({'env': dict(os.environ), 'raw': raw}))\n"
    )
    result = _run(program)
    assert result.ok and result.mode == mode, result
    assert secret.encode() not in result.stdout
    seen = json.loads(result.stdout)
    assert set(seen["env"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING",
                                "PWD", "LC_CTYPE"}, seen["env"]
    assert not [name for name in names if name in seen["env"]]


def test_fork_bomb_is_bounded(mode):
    counter = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(1000):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(3); os._exit(0)\n"
        "    n += 1\n"
        "print(n)\n"
    )
    result = _run(counter, limits=SandboxLimits(wall_time_s=15, max_processes=16))
    assert result.ok, result
    assert int(result.stdout) == 15  # 16 processes in all, the program included
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    start = time.monotonic()
    result = _run(bomb, limits=SandboxLimits(wall_time_s=2, max_processes=16))
    assert result.timed_out and "wall time" in result.reason
    assert time.monotonic() - start < 8
    _assert_still_works(mode)


def test_memory_is_bounded(mode):
    result = _run("x = bytearray(4 * 1024 ** 3)", limits=SandboxLimits(memory_bytes=256 << 20))
    assert result.returncode == 1 and "memory" in result.reason
    result = _run("a = []\nwhile True:\n    a.append(' ' * (1 << 20))",
                  limits=SandboxLimits(memory_bytes=256 << 20, wall_time_s=15))
    assert not result.ok and "memory" in result.reason
    _assert_still_works(mode)


@pytest.mark.parametrize("program", ["while True:\n    pass\n", "import time\ntime.sleep(1000)\n"])
def test_killed_at_the_wall_limit(mode, program):
    start = time.monotonic()
    result = _run(program, limits=SandboxLimits(wall_time_s=1.5, cpu_time_s=60))
    elapsed = time.monotonic() - start
    assert result.timed_out and result.returncode is None and "wall time" in result.reason
    assert 1.4 < elapsed < 5, elapsed
    cpu = _run("while True: pass", limits=SandboxLimits(wall_time_s=15, cpu_time_s=1))
    assert cpu.returncode == -24 and cpu.reason == "cpu time limit exceeded"


def test_output_is_capped(mode):
    loud = _run("import sys\nsys.stdout.write('x' * (3 << 20))\nsys.stderr.write('y' * (3 << 20))",
                limits=SandboxLimits(output_bytes=1000))
    assert loud.returncode == 0 and loud.truncated and "truncated" in loud.reason
    assert loud.stdout == b"x" * 1000 and loud.stderr == b"y" * 1000
    many = _run("for i in range(100): open(f'f{i}', 'w').write('z' * 1000)",
                limits=SandboxLimits(files_out_max=10, files_out_bytes=5000))
    assert many.truncated and len(many.files_out) <= 5


@pytest.mark.parametrize("ending", ["exit", "timeout"])
def test_no_orphan_processes_survive_the_run(mode, ending):
    marker = f"{uuid.uuid4().int % 1000 + 1000}.{uuid.uuid4().int % 10 ** 6}"
    program = (
        "import os, subprocess\n"
        # a detached grandchild in a session of its own: it outlives the program
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "import time; time.sleep(0.5)\n"
        + ("while True:\n    pass\n" if ending == "timeout" else "print('left it behind')\n")
    )
    result = _run(program, limits=SandboxLimits(wall_time_s=3 if ending == "timeout" else 20, cpu_time_s=30))
    assert result.mode == mode
    if ending == "timeout":
        assert result.timed_out
    else:
        assert result.ok and result.stdout == b"left it behind\n", result
    assert _wait_gone(f"sleep\0{marker}") == [], f"{mode}: the background process outlived its run"
    _assert_still_works(mode)


def test_unshare_mode_refuses_when_confinement_fails(monkeypatch):
    """A machine where the private root cannot be built refuses code instead of running it weaker."""
    monkeypatch.setenv("EVR1_SANDBOX", "unshare")
    real = sandbox_module._runtime_mounts
    missing = f"/nonexistent-{uuid.uuid4().hex}"
    monkeypatch.setattr(sandbox_module, "_runtime_mounts",
                        lambda python: (real(python)[0] + [missing], real(python)[1]))
    try:
        with pytest.raises(SandboxUnavailable, match="confinement failed"):
            sandbox_mode(refresh=True)
        with pytest.raises(SandboxUnavailable):
            run_sandboxed("print('ran anyway')")
        monkeypatch.setattr(sandbox_module.os, "geteuid", lambda: 1000)
        with pytest.raises(SandboxUnavailable, match="needs root"):
            sandbox_mode(refresh=True)
    finally:
        monkeypatch.undo()
        sandbox_mode(refresh=True)
