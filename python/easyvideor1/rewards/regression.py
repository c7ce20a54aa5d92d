"""Regression (estimation) answers: mean relative accuracy (MRA).

accuracy = (1/10) * sum over i = 0..9 of [ |p - g| / |g| < 1 - theta_i ],
theta_i = (50 + 5 i) / 100, i.e. thresholds 0.50, 0.55, ..., 0.95.
The test is evaluated exactly as ``|p - g| * 100 < (50 - 5 i) * |g|`` on fractions, so no
threshold drifts through float rounding. When g == 0 the relative error is undefined:
accuracy is 1 iff p == 0, else 0.
valid = the answer holds exactly one number (same parser as ``numerical``).
"""

from __future__ import annotations

from typing import Any

from easyvideor1.rewards.extract import extract_for, extraction_details, format_score
from easyvideor1.rewards.numbers import parse_number
from easyvideor1.rewards.numerical import ground_truth_number
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

THRESHOLD_COUNT = 10


def mean_relative_accuracy(pred, truth) -> float:
    """MRA of ``pred`` against ``truth`` (Fractions or ints; see the module docstring)."""
    if truth == 0:
        return 1.0 if pred == 0 else 0.0
    scaled_error = abs(pred - truth) * 100
    magnitude = abs(truth)
    hits = sum(1 for i in range(THRESHOLD_COUNT) if scaled_error < (50 - 5 * i) * magnitude)
    return hits / THRESHOLD_COUNT


@register_scorer(
    "regression",
    aliases=("reg", "estimation"),
    description="mean relative accuracy over thresholds 0.50..0.95",
)
def score_regression(req: ScoreRequest, options: dict[str, Any]) -> Score:
    truth = ground_truth_number(req.ground_truth, "regression")
    extraction = extract_for(req.response, options)
    parsed = parse_number(extraction.text)
    details = extraction_details(extraction)
    details.update(pred=None if parsed.value is None else float(parsed.value), gt=float(truth))
    if parsed.value is None:
        details["reason"] = parsed.reason
        return Score(0.0, format_score(extraction, False), details)
    accuracy = mean_relative_accuracy(parsed.value, truth)
    details["relative_error"] = None if truth == 0 else float(abs(parsed.value - truth) / abs(truth))
    return Score(accuracy, format_score(extraction, True), details)
