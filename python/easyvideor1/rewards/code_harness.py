"""Test harness the ``code`` scorer runs INSIDE the sandbox (standard library only).

The work dir holds ``solution.py`` (untrusted), this file as ``harness.py`` and
``tests.json`` (inputs and calls only: expected outputs never enter the sandbox, so the
solution has nothing to read or forge; the host compares). The harness checks that the
solution compiles, then runs each test in its own process with its own timeout:

- stdin test: ``python3 solution.py`` with the input on stdin; stdout goes to a file
  (bounded by RLIMIT_FSIZE), is normalised by :func:`normalize_output` and reported as a
  SHA-256 plus a short head;
- call test: ``python3 harness.py --call I EXPR`` executes the solution as module ``solution``
  and evaluates call I; ``repr`` of the value is reported (capped).

It prints JSON lines on stdout, flushed as it goes so that a run cut short by the wall
limit still reports the tests it finished: first ``{"syntax_error": ...}``, then one
``{"index": I, "status": ..., ...}`` per test.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

HEAD_CHARS = 200
REPR_CHARS = 65536


def normalize_output(text):
    """Trailing whitespace of every line and trailing empty lines removed, CRLF -> LF."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _call_mode(index, call):
    result_path = f".result_{index}.json"
    namespace = {"__name__": "solution"}
    try:
        with open("solution.py") as handle:
            source = handle.read()
        exec(compile(source, "solution.py", "exec"), namespace)
        text = repr(eval(compile(call, f"<test {index}>", "eval"), namespace))
        report = {"repr": text[:REPR_CHARS], "truncated": len(text) > REPR_CHARS}
    except BaseException as exc:  # noqa: B036 - SystemExit from the solution is a failed test too
        report = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    with open(result_path, "w") as handle:
        json.dump(report, handle)


def _read(path, limit):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


def _run_test(index, test, timeout_s, output_cap):
    result = {"status": "ok"}
    stdin_path, out_path, err_path = f".in_{index}", f".out_{index}", f".err_{index}"
    with open(stdin_path, "w") as handle:
        handle.write(test.get("input", "") if test["kind"] == "stdin" else "")
    if test["kind"] == "stdin":
        argv = [sys.executable, "solution.py"]
    else:
        argv = [sys.executable, "harness.py", "--call", str(index), test["call"]]
    start = time.monotonic()
    try:
        with open(stdin_path, "rb") as fin, open(out_path, "wb") as fout, open(err_path, "wb") as ferr:
            proc = subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=ferr, start_new_session=True)
    except OSError as exc:
        return {"status": "error", "error": f"could not start the test process: {exc}"}
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        result["status"] = "timeout"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the test's own children go with it
        except OSError:
            pass
        proc.wait()
    result["time_s"] = round(time.monotonic() - start, 3)
    result["exit"] = proc.returncode
    stderr = _read(err_path, 1 << 16).decode("utf-8", "replace")
    result["stderr_tail"] = stderr[-400:]
    if test["kind"] == "stdin":
        raw = _read(out_path, output_cap + 1)
        text = normalize_output(raw[:output_cap].decode("utf-8", "replace"))
        result["stdout_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        result["stdout_head"] = text[:HEAD_CHARS]
        result["stdout_truncated"] = len(raw) > output_cap
    else:
        try:
            with open(f".result_{index}.json") as handle:
                result.update(json.load(handle))
        except (OSError, ValueError):
            result.setdefault("error", "the call produced no result")
    if result["status"] == "ok" and proc.returncode != 0:
        result["status"] = "error"
    for path in (stdin_path, out_path, err_path, f".result_{index}.json"):
        try:
            os.unlink(path)
        except OSError:
            pass
    return result


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--call":
        _call_mode(int(sys.argv[2]), sys.argv[3])
        return
    with open("tests.json") as handle:
        spec = json.load(handle)
    syntax_error = None
    try:
        with open("solution.py", "rb") as handle:
            compile(handle.read(), "solution.py", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
        syntax_error = f"{type(exc).__name__}: {exc}"[:500]
    _emit({"syntax_error": syntax_error})
    if syntax_error is None:
        for index, test in enumerate(spec["tests"]):
            result = _run_test(index, test, spec["timeout_s"], spec["output_cap"])
            result["index"] = index
            _emit(result)


def _emit(record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
