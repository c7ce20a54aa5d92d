"""The first process inside the sandbox (trusted code, run by :mod:`sandbox`).

It is passed to the sandbox's interpreter as ``python3 -I -S -c <this file> <spec JSON>``,
so it uses only the standard library and must not import easyvideor1. Steps:

0. ``unshare`` mode only (``spec["confine"]``; this process is then root and pid 1 of fresh
   mount, PID, network, IPC and UTS namespaces): build a minimal root on a tmpfs (read-only
   binds of ``/usr``, the ``/lib*`` dirs and the interpreter's prefix, a fresh ``/proc``, a
   minimal ``/dev`` with an 8 MiB ``/dev/shm``, the inputs read-only at ``/sandbox/in``, a
   size-capped tmpfs ``/tmp`` owned by the run's uid), remount it read-only, ``pivot_root``
   into it and detach the old root, then re-exec this file through ``setpriv`` as the
   run's unprivileged uid (no groups, no capabilities, ``no_new_privs``). Any failure
   exits 126 before the program exists: the mode is never run half-confined. The program
   later also gets a seccomp filter that refuses new user namespaces (what bwrap's
   ``--disable-userns`` does; inside one a process would hold capabilities again);
1. copy the input files from ``spec["in_dir"]`` into the writable work dir;
2. fork; the child starts a new session, applies the resource limits and execs the
   program (limits are set *inside* the user namespace so that RLIMIT_NPROC counts only
   this sandbox's processes);
3. wait for it, then report ``{"exit", "signal", "files", "files_truncated", "error"}`` as
   JSON on ``spec["report_fd"]``, where ``files`` are the new or changed regular files of
   the work dir (base64, capped by ``files_cap`` bytes and ``files_max`` entries).
"""

import base64
import json
import os
import platform
import resource
import sys

_LIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "as": resource.RLIMIT_AS,
    "fsize": resource.RLIMIT_FSIZE,
    "nproc": resource.RLIMIT_NPROC,
    "nofile": resource.RLIMIT_NOFILE,
    "core": resource.RLIMIT_CORE,
}


# --- step 0: the unshare mode's private root (runs as root, before any untrusted code) ---

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_DEVICES = ("null", "zero", "full", "random", "urandom")


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def check(what, result):
        if result != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    def mount(source, target, fstype, flags, data=None):
        check(f"mount {target}", libc.mount(
            None if source is None else source.encode(), target.encode(),
            None if fstype is None else fstype.encode(), ctypes.c_ulong(flags),
            None if data is None else data.encode()))

    def umount(target):
        check(f"umount {target}", libc.umount2(target.encode(), _MNT_DETACH))

    def pivot_root():
        check("pivot_root", libc.syscall(ctypes.c_long(_PIVOT_ROOT[platform.machine()]), b".", b"."))

    return mount, umount, pivot_root


def _ro_bind(mount, source, target):
    mount(source, target, None, _MS_BIND)
    # Keep the flags the source mount has (a remount may not clear locked ones), add ro.
    have = os.statvfs(source).f_flag
    extra = 0
    for st_bit, ms_bit in ((os.ST_NOEXEC, _MS_NOEXEC), (os.ST_NOATIME, 1024), (os.ST_NODIRATIME, 2048),
                           (os.ST_RELATIME, 1 << 21)):
        if have & st_bit:
            extra |= ms_bit
    mount(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | extra)


# seccomp: (audit arch, unshare, clone, clone3) per architecture
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 272, 56, 435), "aarch64": (0xC00000B7, 97, 220, 435)}
_CLONE_NEWUSER = 0x10000000


def _deny_user_namespaces():
    """Install a seccomp filter: unshare/clone with CLONE_NEWUSER fail with EPERM, clone3 with
    ENOSYS (libc then falls back to clone, whose flags a filter can see), syscalls of any
    other ABI (x32, 32-bit compat) kill the process. Needs no_new_privs (set by setpriv)."""
    import ctypes
    import struct

    arch, nr_unshare, nr_clone, nr_clone3 = _SECCOMP_ARCH[platform.machine()]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    kill, allow, errno = 0x80000000, 0x7FFF0000, 0x00050000
    program = [
        (ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill),  # the native ABI only
        (ld, 0, 0, 0), (jge, 0, 1, 0x40000000), (ret, 0, 0, errno | 1),  # x32 numbers
        (jeq, 0, 1, nr_clone3), (ret, 0, 0, errno | 38),
        (jeq, 1, 0, nr_unshare), (jeq, 0, 3, nr_clone),
        (ld, 0, 0, 16), (jset, 0, 1, _CLONE_NEWUSER), (ret, 0, 0, errno | 1),
        (ret, 0, 0, allow),
    ]
    raw = b"".join(struct.pack("=HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class FProg(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = FProg(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        errno_value = ctypes.get_errno()
        raise OSError(errno_value, f"seccomp filter: {os.strerror(errno_value)}")


def _confine(spec):
    """Build the private root, enter it and exec the unprivileged rest of this launcher."""
    conf = spec["confine"]
    if platform.machine() not in _SECCOMP_ARCH:
        raise OSError(f"unsupported architecture {platform.machine()} (pivot_root, seccomp filter)")
    mount, umount, pivot_root = _libc()
    import socket

    socket.sethostname("sandbox")
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing below propagates to the host
    root, uid = conf["root"], int(conf["uid"])
    mount("tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755")

    def inside(path):
        return os.path.join(root, path.lstrip("/"))

    for path in conf["binds"]:
        os.makedirs(inside(path), exist_ok=True)
        _ro_bind(mount, path, inside(path))
    for link, target in conf["symlinks"].items():
        os.symlink(target, inside(link))
    os.mkdir(inside("/proc"))
    mount("proc", inside("/proc"), "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    dev = inside("/dev")
    os.mkdir(dev)
    mount("tmpfs", dev, "tmpfs", _MS_NOSUID | _MS_NOEXEC, "size=64k,mode=0755")
    for name in _DEVICES:
        open(os.path.join(dev, name), "w").close()
        mount(f"/dev/{name}", os.path.join(dev, name), None, _MS_BIND)
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{number}", os.path.join(dev, name))
    os.symlink("/proc/self/fd", os.path.join(dev, "fd"))
    os.mkdir(os.path.join(dev, "shm"))
    mount("tmpfs", os.path.join(dev, "shm"), "tmpfs", _MS_NOSUID | _MS_NODEV,
          f"size={8 << 20},mode=0700,uid={uid},gid={uid}")
    mount(None, dev, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NOEXEC)
    os.mkdir(inside(spec["workdir"]))
    mount("tmpfs", inside(spec["workdir"]), "tmpfs", _MS_NOSUID | _MS_NODEV,
          f"size={int(conf['tmpfs_bytes'])},mode=0700,uid={uid},gid={uid}")
    os.makedirs(inside(spec["in_dir"]))
    _ro_bind(mount, conf["in_dir"], inside(spec["in_dir"]))
    mount(None, root, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    argv = open("/proc/self/cmdline", "rb").read().split(b"\0")[:-1]
    os.chdir(root)
    pivot_root()  # the old root ends up stacked on "."; detached, no host path is left
    umount(".")
    os.chdir("/")
    stage2 = dict(spec, confine=None, no_userns=True)
    python_argv = [arg.decode() for arg in argv[:argv.index(b"-c") + 2]] + [json.dumps(stage2)]
    setpriv = [conf["setpriv"], f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
               "--bounding-set=-all", "--no-new-privs", "--"]
    os.execve(setpriv[0], setpriv + python_argv, {"PATH": "/usr/bin:/bin"})


def _copy_inputs(src, dst):
    seen = {}
    for root, _dirs, names in os.walk(src):
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            target = os.path.join(dst, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(path, "rb") as handle:
                data = handle.read()
            with open(target, "wb") as handle:
                handle.write(data)
            os.chmod(target, os.stat(path).st_mode & 0o755)
            seen[rel] = data
    return seen


def _run_child(spec):
    os.setsid()
    os.chdir(spec["workdir"])
    for name, value in spec["limits"].items():
        # CPU gets a one-second grace between SIGXCPU (soft) and SIGKILL (hard).
        hard = value + 1 if name == "cpu" else value
        resource.setrlimit(_LIMITS[name], (value, hard))
    os.close(spec["report_fd"])
    if spec.get("no_userns"):
        _deny_user_namespaces()
    argv = spec["argv"]
    try:
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as exc:
        os.write(2, f"sandbox: cannot execute {argv[0]!r}: {exc}\n".encode())
    os._exit(127)


def _collect(workdir, inputs, cap, max_files):
    files, total, truncated = {}, 0, False
    for root, dirs, names in os.walk(workdir):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, workdir)
            if os.path.islink(path) or not os.path.isfile(path):
                continue  # links could point anywhere; only plain files come back
            size = os.path.getsize(path)
            if len(files) >= max_files or total + size > cap:
                truncated = True
                continue
            with open(path, "rb") as handle:
                data = handle.read(cap - total + 1)
            if inputs.get(rel) == data:
                continue
            files[rel] = base64.b64encode(data).decode("ascii")
            total += len(data)
    return files, truncated


def main():
    spec = json.loads(sys.argv[1])
    if spec.get("confine"):
        try:
            _confine(spec)  # does not return: execs the unprivileged stage
        except BaseException as exc:  # noqa: B036 - never run the program half-confined
            os.write(2, f"sandbox: confinement failed: {exc!r}\n".encode())
        os._exit(126)
    report = {"exit": None, "signal": None, "files": {}, "files_truncated": False, "error": None}
    inputs = _copy_inputs(spec["in_dir"], spec["workdir"]) if spec.get("in_dir") else {}
    pid = os.fork()
    if pid == 0:
        try:
            _run_child(spec)
        except BaseException as exc:  # noqa: B036 - the forked child must never return here
            os.write(2, f"sandbox: setup failed: {exc!r}\n".encode())
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        report["signal"] = os.WTERMSIG(status)
    else:
        report["exit"] = os.WEXITSTATUS(status)
    try:
        if spec["files_max"] > 0:
            report["files"], report["files_truncated"] = _collect(
                spec["workdir"], inputs, spec["files_cap"], spec["files_max"])
    except OSError as exc:
        report["error"] = f"collecting output files failed: {exc}"
    data = json.dumps(report).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(spec["report_fd"], view):]
    os.close(spec["report_fd"])


if __name__ == "__main__":
    main()
