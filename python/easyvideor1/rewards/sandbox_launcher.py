"""The first process inside the sandbox (trusted code, run by :mod:`sandbox`).

It is passed to the sandbox's interpreter as ``python3 -I -S -c <this file> <spec JSON>``,
so it uses only the standard library and must not import easyvideor1. Steps:

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
