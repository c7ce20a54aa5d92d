"""The ``code`` scorer: real sandboxed runs of good, wrong and hostile solutions."""

from __future__ import annotations

import json
import socket
import time
import uuid
from pathlib import Path

import pytest

from easyvideor1.config.schema import RewardConfig
from easyvideor1.rewards import ScoreRequest, score
from easyvideor1.rewards.code_python import parse_tests, score_code, values_equal
from easyvideor1.rewards.extract import GroundTruthError

ADD_STDIN = json.dumps({"tests": [{"input": "1 2\n", "output": "3"}, {"input": "5 7", "output": "12\n"},
                                  {"input": "-4 4", "output": "0"}], "entry": "stdin"})
ADD_CALL = json.dumps({"tests": [{"call": "add(1, 2)", "expected": "3"}, {"call": "add(0.1, 0.2)", "expected": 0.3},
                                 {"call": "pair(1)", "expected": [1, 2]}]})
GOOD_STDIN = "a, b = map(int, input().split())\nprint(a + b)   \n"
GOOD_CALL = "def add(a, b):\n    return a + b\n\ndef pair(x):\n    return (x, x + 1)\n"
OPTS = {"answer_tag_policy": "last", "timeout_s": 30.0, "test_timeout_s": 2.0}


def run(response: str, gt: str = ADD_STDIN, **options):
    return score_code(ScoreRequest(response, gt, "code"), {**OPTS, **options})


def test_stdin_solution_in_tagged_fence_scores_full():
    result = run(f"<think>easy</think><answer>```python\n{GOOD_STDIN}```</answer>")
    assert (result.accuracy, result.format) == (1.0, 1.0)
    assert result.details["passed"] == 3 and result.details["sandbox"]["mode"] == "bwrap"


def test_partial_credit_and_failure_reasons():
    result = run("<answer>print(3)</answer>")
    assert result.accuracy == pytest.approx(1 / 3) and result.format == 1.0
    assert result.details["reason"].startswith("test 1: wrong output")


def test_call_style_and_bare_list():
    assert run(f"<answer>{GOOD_CALL}</answer>", ADD_CALL).accuracy == 1.0
    wrong = run("<answer>def add(a, b):\n    return a - b\ndef pair(x):\n    return [x, x + 1]</answer>", ADD_CALL)
    assert wrong.accuracy == pytest.approx(1 / 3)  # lists equal tuples; subtraction is wrong
    bare = json.dumps([{"input": "2 2", "output": "4"}])
    assert run(f"<answer>{GOOD_STDIN}</answer>", bare).accuracy == 1.0


def test_code_outside_the_tag_earns_accuracy_not_format():
    fenced = run(f"Here it is:\n```python\n{GOOD_STDIN}```\n<answer>see above</answer>")
    assert (fenced.accuracy, fenced.format) == (1.0, 0.5)
    untagged = run(f"```py\n{GOOD_STDIN}```")
    assert (untagged.accuracy, untagged.format) == (1.0, 0.0)


def test_syntax_error_is_invalid():
    result = run("<answer>def broken(:\n    pass</answer>")
    assert (result.accuracy, result.format) == (0.0, 0.5)
    assert result.details["reason"].startswith("syntax error")


def test_per_test_timeout_keeps_other_tests():
    slow = "a, b = map(int, input().split())\nif a == 5:\n    while True: pass\nprint(a + b)\n"
    result = run(f"<answer>{slow}</answer>", test_timeout_s=1.0)
    assert result.accuracy == pytest.approx(2 / 3)
    assert result.details["tests"][1]["reason"] == "time limit exceeded"


def test_whole_run_wall_limit_reports_finished_tests():
    slow = "import time\na, b = map(int, input().split())\ntime.sleep(0.9)\nprint(a + b)\n"
    gt = json.dumps([{"input": "1 1", "output": "2"}] * 8)
    result = run(f"<answer>{slow}</answer>", gt, timeout_s=3.0, test_timeout_s=2.0)
    assert 0 < result.details["passed"] < 8
    assert "wall time" in result.details["reason"]


@pytest.mark.parametrize("name, solution, reason_part", [
    ("fork bomb", "import os\nwhile True:\n    os.fork()\n", "exit code"),
    ("memory bomb", "x = bytearray(8 * 1024 ** 3)\n", "MemoryError"),
    ("infinite loop", "while True:\n    pass\n", "time limit exceeded"),
    ("disk filler", "open('f', 'wb').write(b'x' * (64 << 20))\nprint(3)\n", "exit code"),
    ("exits early", "import sys\nsys.exit(0)\n", "wrong output"),
])
def test_hostile_solutions_score_zero_with_reason(name, solution, reason_part):
    gt = json.dumps([{"input": "", "output": "3"}])
    result = run(f"<answer>{solution}</answer>", gt, test_timeout_s=1.5)
    assert result.accuracy == 0.0, name
    assert reason_part in result.details["reason"], (name, result.details)
    assert run(f"<answer>{GOOD_STDIN}</answer>").accuracy == 1.0  # the next run is unaffected


def test_network_and_host_secret_are_out_of_reach():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    secret = uuid.uuid4().hex
    secret_path = Path("/root") / f"evr1-code-secret-{secret}"
    secret_path.write_text(secret)
    try:
        solution = (
            "import socket\n"
            f"socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=1)\n"
            "print(3)\n"
        )
        gt = json.dumps([{"input": "", "output": "3"}])
        result = run(f"<answer>{solution}</answer>", gt)
        assert result.accuracy == 0.0 and "exit code 1" in result.details["reason"]
        with pytest.raises(TimeoutError):
            server.accept()
        leak = run(f"<answer>print(open({str(secret_path)!r}).read())</answer>",
                   json.dumps([{"input": "", "output": secret}]))
        assert leak.accuracy == 0.0 and "FileNotFoundError" in leak.details["reason"]
    finally:
        server.close()
        secret_path.unlink()


def test_expected_outputs_never_enter_the_sandbox():
    spy = "import os\nprint(open('tests.json').read())\n"
    gt = json.dumps([{"input": "", "output": "SECRET-EXPECTED-VALUE"}])
    result = run(f"<answer>{spy}</answer>", gt)
    assert result.accuracy == 0.0


def test_values_equal_rules():
    assert values_equal("3", "3") and values_equal(3, "3")
    assert values_equal("[1, 2]", "(1, 2)") and values_equal(0.3, "0.30000000000000004")
    assert not values_equal("True", "1") and not values_equal("3", "'3'")
    assert values_equal("abc", "'abc'")  # plain-text expected vs a string value
    assert values_equal({"a": [1]}, "{'a': (1,)}")
    assert not values_equal("3", "4")


@pytest.mark.parametrize("gt", ["not json", "[]", '{"tests": "x"}', '[{"foo": 1}]', '[{"call": "f(", "expected": 1}]',
                                '{"tests": [{"input": "1", "output": "1"}], "entry": "repl"}'])
def test_malformed_ground_truth_raises(gt):
    with pytest.raises(GroundTruthError):
        parse_tests(gt)


def test_through_the_dispatcher():
    config = RewardConfig(scorer_options={"code": {"test_timeout_s": 2.0}})
    start = time.monotonic()
    good = score(ScoreRequest(f"<answer>{GOOD_STDIN}</answer>", ADD_STDIN, "Python"), config)
    assert (good.overall, good.problem_type, good.error) == (1.0, "code", None)
    bad = score(ScoreRequest("<answer>print(1)</answer>", "{broken", "programming"), config)
    assert bad.error and "GroundTruthError" in bad.error
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("answer", ["\ud800print(3)", "print(3)\x00", "\x00" * 10])
def test_undecodable_code_scores_zero_with_reason(answer):
    result = run(f"<answer>{answer}</answer>", json.dumps([{"input": "", "output": "3"}]))
    assert (result.accuracy, result.format) == (0.0, 0.5)
    assert result.details["reason"].startswith("syntax error")
