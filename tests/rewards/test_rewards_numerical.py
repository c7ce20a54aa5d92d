"""Number parsing, the numerical scorer (tolerances) and the regression scorer (MRA)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from easyvideor1.rewards.extract import GroundTruthError
from easyvideor1.rewards.numbers import parse_number
from easyvideor1.rewards.numerical import score_numerical
from easyvideor1.rewards.regression import mean_relative_accuracy, score_regression
from easyvideor1.rewards.types import ScoreRequest

OPTS = {"answer_tag_policy": "last"}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4", 4), ("4.0", 4), ("-3", -3), ("−3", -3), ("+2", 2), (".5", Fraction(1, 2)),
        ("5.", 5), ("1,000", 1000), ("12,345,678", 12345678), ("3/4", Fraction(3, 4)),
        ("-3/4", Fraction(-3, 4)), ("1 1/2", Fraction(3, 2)), ("\\frac{3}{4}", Fraction(3, 4)),
        ("\\dfrac{1}{8}", Fraction(1, 8)), ("1.5e3", 1500), ("2E-2", Fraction(1, 50)),
        ("3 cm", 3), ("3cm", 3), ("50%", 50), ("about 7 apples", 7), ("$12$", 12),
        ("**42**", 42), ("\\boxed{9}", 9), ("There are 5 cubes, 5 in total.", 5),
        ("three", 3), ("Twenty-one", 21), ("twenty one", 21), ("zero", 0), ("ninety-nine", 99),
        ("a hundred", 100), ("three hundred and five", 305), ("two thousand", 2000),
        ("two thousand three hundred forty", 2340), ("minus four", -4), ("There are seven.", 7),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text).value == Fraction(value)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"), (None, "no answer"), ("none", "no number"), ("2 or 3", "ambiguous"),
        ("five seven", "unreadable"), ("1e999", "finite"), ("1/0", "finite"), ("a cup", "no number"),
        ("twenty thirty", "unreadable"),
    ],
)
def test_parse_number_rejects(text, why):
    parsed = parse_number(text)
    assert parsed.value is None
    assert why in parsed.reason or (why == "no number" and parsed.reason)


def num(response, truth, **opts):
    return score_numerical(ScoreRequest(response, truth, "numerical"), {**OPTS, **opts})


@pytest.mark.parametrize(
    ("answer", "truth"),
    [("4", "4.0"), ("4.0", "4"), ("three", "3"), ("1,000", "1000"), ("0.25", "1/4"),
     ("3 cm", "3"), ("50%", "50"), ("-2", "-2"), ("1e3", "1000"), ("twenty-one", "21")],
)
def test_numerical_equal(answer, truth):
    got = num(f"<answer>{answer}</answer>", truth)
    assert (got.accuracy, got.format) == (1.0, 1.0), got.details


def test_numerical_percent_is_not_a_fraction():
    assert num("<answer>50%</answer>", "0.5").accuracy == 0.0


def test_numerical_tolerances():
    assert num("<answer>1.0000005</answer>", "1").accuracy == 1.0  # within abs_tol 1e-6
    assert num("<answer>1.00001</answer>", "1").accuracy == 0.0
    assert num("<answer>1000000.5</answer>", "1000000").accuracy == 1.0  # within rel_tol 1e-6
    assert num("<answer>103</answer>", "100", rel_tol=0.05).accuracy == 1.0
    assert num("<answer>3.4</answer>", "3", abs_tol=0.5).accuracy == 1.0
    with pytest.raises(ValueError, match="rel_tol"):
        num("<answer>1</answer>", "1", rel_tol=-1)


def test_numerical_invalid_and_untagged():
    got = num("<answer>several</answer>", "3")
    assert (got.accuracy, got.format) == (0.0, 0.5) and got.details["reason"]
    got = num("I count 3", "3")
    assert (got.accuracy, got.format) == (1.0, 0.0)
    assert num("<answer>2 or 3</answer>", "3").accuracy == 0.0


@pytest.mark.parametrize("truth", ["many", "", "<answer></answer>", "1 or 2"])
def test_numerical_bad_ground_truth(truth):
    with pytest.raises(GroundTruthError, match="numerical"):
        num("<answer>1</answer>", truth)


def test_mra_exact_thresholds():
    # relative error exactly 0.05 is *not* below 1 - 0.95: 9 of 10 thresholds hit
    assert mean_relative_accuracy(Fraction(105), Fraction(100)) == 0.9
    assert mean_relative_accuracy(Fraction(100), Fraction(100)) == 1.0
    assert mean_relative_accuracy(Fraction(149), Fraction(100)) == 0.1
    assert mean_relative_accuracy(Fraction(150), Fraction(100)) == 0.0
    assert mean_relative_accuracy(Fraction(-80), Fraction(-100)) == 0.6
    # 0.1 + 0.2 style inputs: exact fractions avoid float drift at the boundary
    assert mean_relative_accuracy(Fraction("0.3"), Fraction("0.1") + Fraction("0.2")) == 1.0
    assert mean_relative_accuracy(Fraction("1.1"), Fraction(1)) == 0.8


def test_mra_zero_ground_truth():
    assert mean_relative_accuracy(Fraction(0), Fraction(0)) == 1.0
    assert mean_relative_accuracy(Fraction(1, 1000), Fraction(0)) == 0.0


def test_digits_take_precedence_over_number_words():
    assert parse_number("3 and four").value == 3


def test_regression_scorer():
    # relative error 0.1 is below 1 - theta for theta = 0.50 .. 0.85: 8 of 10 thresholds
    got = score_regression(ScoreRequest("<answer>11</answer>", "10", "regression"), OPTS)
    assert got.accuracy == pytest.approx(0.8) and got.format == 1.0
    assert got.details["relative_error"] == pytest.approx(0.1)
    got = score_regression(ScoreRequest("<answer>big</answer>", "10", "regression"), OPTS)
    assert (got.accuracy, got.format) == (0.0, 0.5)
    with pytest.raises(GroundTruthError, match="regression"):
        score_regression(ScoreRequest("<answer>1</answer>", "n/a", "regression"), OPTS)
