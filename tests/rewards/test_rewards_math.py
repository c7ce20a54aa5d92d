"""Math scorer: math_verify equivalence, thread safety and the size pre-checks (the time limit
is the scoring pool's: tests/security/test_scoring_starvation.py)."""

from __future__ import annotations

import threading
import time

import pytest

from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.math_answer import score_math
from easyvideor1.rewards.math_guard import ExpressionTooLarge, check_expression
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


HOSTILE = ["$10^{10^{8}}$", "$(1+x)^{20000}$", "$((10!)!)!$", "$10!!$", "$9^{9^{9}}$", "10**10**8", "10^(10^8)",
           "$(a+b+c+d)^{60}$", "$(2x)^{10^{8}}$", "$\\binom{10^{8}}{5\\cdot 10^{7}}$", "$2^{2^{2^{2^{2}}}}$",
           "$\\sqrt{10^{10^{9}}}$", "\\left(1+x\\right)^{20000}"]


@pytest.mark.parametrize("answer", HOSTILE)
def test_explosive_answers_score_zero_at_once(answer):
    started = time.perf_counter()
    got = mth(f"<answer>{answer}</answer>", "7")
    assert time.perf_counter() - started < 5.0  # refused before the CAS: no evaluation at all
    assert (got.accuracy, got.format) == (0.0, 0.5)
    assert got.details["reason"].startswith("expression too large to evaluate: "), got.details


@pytest.mark.parametrize(
    ("answer", "truth"),
    [("$2^{2024}-1$", "$2^{2024}-1$"), ("$(x+1)^{20}$", "$(1+x)^{20}$"), ("$\\binom{100}{50}$", "$\\binom{100}{50}$"),
     ("$20!$", "$20!$"), ("$e^{x^2}$", "$e^{x^2}$"), ("$10^{-30}$", "$10^{-30}$"), ("$x^{20000}$", "$x^{20000}$")],
)
def test_large_but_legitimate_answers_still_score(answer, truth):
    check_expression(answer)
    assert mth(f"<answer>{answer}</answer>", truth).accuracy == 1.0


def test_guard_limits_are_options():
    got = mth("<answer>$2^{2024}$</answer>", "7", max_digits=100)
    assert got.accuracy == 0.0 and "limit 100" in got.details["reason"]
    with pytest.raises(ExpressionTooLarge, match="expands to about"):
        check_expression("(1+x)^{50}", max_terms=20)
    with pytest.raises(ExpressionTooLarge, match="a number with 101 digits"):
        check_expression("1" * 101, max_digits=100)


def test_explosive_ground_truth_is_a_ground_truth_error():
    with pytest.raises(GroundTruthError, match="expression too large to evaluate"):
        mth("<answer>1</answer>", "10^{10^{8}}")


def test_scoring_starts_no_thread():
    # A thread cannot be killed: the scorer runs on its caller's thread, the pool bounds its time.
    mth("<answer>1</answer>", "1")
    before = threading.active_count()
    for _ in range(3):
        mth("<answer>\\frac{3}{6}</answer>", "0.5")
    assert threading.active_count() == before
