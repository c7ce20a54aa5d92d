"""Math scorer: math_verify equivalence, thread safety and the self-enforced timeout."""

from __future__ import annotations

import threading
import time

import pytest

from easyvideor1.rewards import math_answer
from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.math_answer import MathTimeout, call_with_timeout, score_math
from easyvideor1.rewards.types import ScoreRequest

OPTS = {"answer_tag_policy": "last", "timeout_s": 20.0}


def mth(response, truth, **opts):
    return score_math(ScoreRequest(response, truth, "math"), {**OPTS, **opts})


@pytest.mark.parametrize(
    ("answer", "truth"),
    [("0.5", "\\frac{1}{2}"), ("$\\frac{2}{4}$", "\\frac{1}{2}"), ("7", "7"), ("\\boxed{7}", "$7$"),
     ("x^2+2x+1", "(x+1)^2")],
)
def test_equivalent_answers(answer, truth):
    got = mth(f"<answer>{answer}</answer>", truth)
    assert (got.accuracy, got.format) == (1.0, 1.0), got.details


def test_wrong_and_unparsable():
    assert mth("<answer>8</answer>", "7").accuracy == 0.0
    got = mth("<answer>no idea</answer>", "7")
    assert (got.accuracy, got.format) == (0.0, 0.5) and got.details["reason"]
    assert mth("", "7").accuracy == 0.0


def test_fallback_extraction_has_no_format():
    got = mth("So the result is \\boxed{7}", "7")
    assert (got.accuracy, got.format) == (1.0, 0.0)


def test_bad_ground_truth():
    with pytest.raises(GroundTruthError, match="math"):
        mth("<answer>1</answer>", "")
    with pytest.raises(GroundTruthError, match="math"):
        mth("<answer>1</answer>", "no math here")


def test_works_from_a_worker_thread():
    results = []
    worker = threading.Thread(target=lambda: results.append(mth("<answer>\\frac{3}{6}</answer>", "0.5")))
    worker.start()
    worker.join(60)
    assert len(results) == 1 and results[0].accuracy == 1.0


def test_call_with_timeout():
    assert call_with_timeout(lambda: 3, 5) == 3
    with pytest.raises(ZeroDivisionError):
        call_with_timeout(lambda: 1 / 0, 5)
    started = time.perf_counter()
    with pytest.raises(MathTimeout, match="timeout"):
        call_with_timeout(lambda: time.sleep(5.0), 0.05)
    # The call returns at its timeout, not when the work ends (a wide margin for loaded machines).
    assert time.perf_counter() - started < 4.0


def test_slow_verification_scores_zero_with_timeout(monkeypatch):
    mth("<answer>1</answer>", "1")  # warm the ground-truth cache and the import
    monkeypatch.setattr(math_answer, "_verify", lambda gold, text: time.sleep(0.5))
    got = mth("<answer>1</answer>", "1", timeout_s=0.05)
    assert (got.accuracy, got.details["reason"]) == (0.0, "timeout")


def test_saturated_workers_fail_fast(monkeypatch):
    blocker = threading.Event()
    stuck = [threading.Thread(target=blocker.wait, daemon=True) for _ in range(math_answer.MAX_STUCK_WORKERS)]
    for thread in stuck:
        thread.start()
    monkeypatch.setattr(math_answer, "_stuck", stuck)
    try:
        with pytest.raises(MathTimeout, match="saturated"):
            call_with_timeout(lambda: 1, 5)
    finally:
        blocker.set()
    for thread in stuck:
        thread.join(5)
    assert call_with_timeout(lambda: 1, 5) == 1
