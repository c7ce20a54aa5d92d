"""``code``: run the response's Python against the ground truth's tests in the sandbox.

Ground truth (JSON), one of::

    {"tests": [{"input": "1 2\\n", "output": "3"}], "entry": "stdin"}   # stdin/stdout
    {"tests": [{"call": "add(1, 2)", "expected": "3"}]}                   # call/assert style
    [{"input": "...", "output": "..."}, ...]                              # bare list of tests

A stdin test passes when the program exits 0 within the per-test time limit and its
stdout equals ``output`` after normalisation (trailing whitespace of each line and trailing
empty lines removed, CRLF -> LF). A call test passes when evaluating ``call`` after running
the solution (as module ``solution``) returns a value equal to ``expected``: both sides are
read as Python literals (``expected`` may also be a JSON value); lists equal tuples, numbers
compare with a relative tolerance of 1e-6, bools only equal bools; a side that is not a
literal is compared as stripped text.

``accuracy = passed / total``. All tests run in ONE sandbox (:mod:`code_harness`), each in
its own process with its own time limit; expected outputs never enter the sandbox. Format
per :mod:`code_extract`: valid = the code compiles.

Options: ``test_timeout_s`` (4), ``timeout_s`` (whole run, from the reward config),
``memory_mb`` (512), ``max_processes`` (32), ``output_cap_bytes`` (1 MiB per test).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easyvideor1.rewards.code_extract import extract_code
from easyvideor1.rewards.code_harness import normalize_output
from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.sandbox import SandboxLimits, run_sandboxed
from easyvideor1.rewards.types import Score, ScoreRequest

_HARNESS = Path(__file__).with_name("code_harness.py").read_text()
MAX_TESTS = 1000
_SHOWN_TESTS = 10


@dataclass(frozen=True)
class TestCase:
    kind: str  # stdin | call
    input: str = ""
    call: str = ""
    expected: Any = None


def parse_tests(ground_truth: str) -> list[TestCase]:
    """The tests of a ``code`` ground truth; raises GroundTruthError when malformed."""
    def bad(why: str) -> GroundTruthError:
        return GroundTruthError("code", ground_truth, why)

    try:
        data = json.loads(ground_truth)
    except (TypeError, ValueError) as exc:
        raise bad(f"not JSON ({exc})") from None
    entry = "auto"
    if isinstance(data, dict):
        entry = str(data.get("entry", "auto")).lower()
        data = data.get("tests")
    if entry not in ("auto", "stdin", "call", "function"):
        raise bad(f"entry must be 'stdin' or 'call', got {entry!r}")
    if not isinstance(data, list) or not data:
        raise bad('expected {"tests": [...]} or a list of tests, with at least one test')
    if len(data) > MAX_TESTS:
        raise bad(f"{len(data)} tests; at most {MAX_TESTS}")
    tests = []
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise bad(f"test {index} is not an object")
        if "call" in item and entry != "stdin":
            if not isinstance(item["call"], str) or "expected" not in item:
                raise bad(f"test {index}: a call test needs a string 'call' and an 'expected'")
            try:
                compile(item["call"], "<call>", "eval")
            except SyntaxError as exc:
                raise bad(f"test {index}: call {item['call']!r} is not an expression ({exc.msg})") from None
            tests.append(TestCase("call", call=item["call"], expected=item["expected"]))
        elif "output" in item and entry not in ("call", "function"):
            given, expected = item.get("input", ""), item["output"]
            if not isinstance(given, str) or not isinstance(expected, str | int | float):
                raise bad(f"test {index}: 'input' must be a string and 'output' a string or number")
            tests.append(TestCase("stdin", input=given, expected=str(expected)))
        else:
            raise bad(f"test {index} needs 'input'/'output' (stdin) or 'call'/'expected' (call)")
    return tests


def _literal(value: Any) -> tuple[bool, Any]:
    if not isinstance(value, str):
        return True, value
    try:
        return True, ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, value.strip()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, set | frozenset) and isinstance(b, set | frozenset):
        return a == b
    return type(a) is type(b) and a == b


def values_equal(expected: Any, actual_repr: str) -> bool:
    """Does the repr a call produced match ``expected`` (see the module docstring)?"""
    ok_expected, want = _literal(expected)
    ok_actual, got = _literal(actual_repr)
    if ok_expected and ok_actual:
        try:
            return _same(want, got)
        except (TypeError, ValueError, RecursionError):
            return False
    if ok_actual and isinstance(got, str):  # expected was plain text, the value a string
        return got.strip() == str(want).strip()
    return str(want).strip() == (got if isinstance(got, str) else actual_repr).strip()


def _judge(test: TestCase, result: dict[str, Any] | None) -> tuple[bool, str | None]:
    if result is None:
        return False, "not run"
    status = result.get("status")
    if status == "timeout":
        return False, "time limit exceeded"
    if test.kind == "call" and result.get("error"):
        return False, str(result["error"])[:300]
    if status != "ok":
        tail = str(result.get("stderr_tail") or result.get("error") or "").strip().splitlines()
        return False, f"exit code {result.get('exit')}" + (f": {tail[-1][:200]}" if tail else "")
    if test.kind == "stdin":
        want = hashlib.sha256(normalize_output(str(test.expected)).encode()).hexdigest()
        if result.get("stdout_truncated") or result.get("stdout_sha256") != want:
            return False, "wrong output"
        return True, None
    if result.get("truncated") or "repr" not in result:
        return False, "result missing or too long"
    return (True, None) if values_equal(test.expected, str(result["repr"])) else (False, "wrong value")


def _parse_report(stdout: bytes) -> tuple[str | None, bool, dict[int, dict[str, Any]]]:
    syntax_error, syntax_seen, results = None, False, {}
    for line in stdout.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if "syntax_error" in record and not syntax_seen:
            syntax_seen, syntax_error = True, record["syntax_error"]
        elif isinstance(record.get("index"), int):
            results[record["index"]] = record
    return syntax_error, syntax_seen, results


@register_scorer("code", aliases=("python", "python-code", "programming", "python code", "coding"),
                 heavy=True, description="Python solution passes the ground-truth tests in a sandbox")
def score_code(req: ScoreRequest, options: dict[str, Any]) -> Score:
    tests = parse_tests(req.ground_truth)
    found = extract_code(req.response, "python", options.get("answer_tag_policy", "last"))
    details: dict[str, Any] = found.details()
    details.update(total=len(tests), passed=0)
    if found.code is None:
        return Score(0.0, found.format_score(False), details)
    test_timeout = float(options.get("test_timeout_s", 4.0))
    wall = min(float(options.get("timeout_s", 30.0)), len(tests) * (test_timeout + 0.5) + 5.0)
    output_cap = int(options.get("output_cap_bytes", 1 << 20))
    limits = SandboxLimits(
        wall_time_s=wall, cpu_time_s=max(1, math.ceil(wall)),
        memory_bytes=int(options.get("memory_mb", 512)) << 20,
        file_size_bytes=max(output_cap + 1, 1 << 20), max_processes=int(options.get("max_processes", 32)),
        output_bytes=len(tests) * 2048 + (1 << 16), files_out_bytes=0, files_out_max=0)
    spec = {"timeout_s": test_timeout, "output_cap": output_cap,
            "tests": [{"kind": t.kind, "input": t.input, "call": t.call} for t in tests]}
    run = run_sandboxed(["python3", "harness.py"], limits=limits,
                        files={"solution.py": found.code, "harness.py": _HARNESS, "tests.json": json.dumps(spec)})
    syntax_error, syntax_seen, results = _parse_report(run.stdout)
    details["sandbox"] = {"mode": run.mode, "wall_s": round(run.wall_s, 3), "reason": run.reason}
    if syntax_error:
        details["reason"] = f"syntax error: {syntax_error}"
        return Score(0.0, found.format_score(False), details)
    if not syntax_seen:
        details["reason"] = f"harness produced no report ({run.reason or 'no output'})"
        return Score(0.0, found.format_score(False), details)
    outcomes = [_judge(test, results.get(index)) for index, test in enumerate(tests)]
    passed = sum(ok for ok, _ in outcomes)
    details["passed"] = passed
    details["tests"] = [{"index": i, "passed": ok, **({"reason": why} if why else {}),
                         "time_s": (results.get(i) or {}).get("time_s")}
                        for i, (ok, why) in enumerate(outcomes[:_SHOWN_TESTS])]
    failures = [f"test {i}: {why}" for i, (ok, why) in enumerate(outcomes) if not ok]
    if failures:
        details["reason"] = failures[0] + (f" (+{len(failures) - 1} more)" if len(failures) > 1 else "")
        if run.timed_out:
            details["reason"] += f"; sandbox: {run.reason}"
    return Score(passed / len(tests), found.format_score(True), details)
