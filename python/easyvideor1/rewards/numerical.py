"""Numerical answers (counting, measurements): tolerance-based equality.

accuracy = 1 if |p - g| <= max(abs_tol, rel_tol * |g|) else 0, computed exactly on
fractions. Defaults: ``abs_tol = 1e-6``, ``rel_tol = 1e-6`` (options ``abs_tol``/``rel_tol``
override them). So ``4`` equals ``4.0`` and ``0.5`` equals ``1/2``.
valid = the answer holds exactly one number (see :mod:`easyvideor1.rewards.numbers` for the
accepted forms: units ignored, ``50%`` reads as 50, commas, fractions, number words).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from easyvideor1.rewards.extract import (
    GroundTruthError,
    extract_for,
    extraction_details,
    format_score,
    strip_answer_tags,
)
from easyvideor1.rewards.numbers import parse_number
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

DEFAULT_ABS_TOL = 1e-6
DEFAULT_REL_TOL = 1e-6


def ground_truth_number(ground_truth: str, problem_type: str) -> Fraction:
    """Parse a numeric ground truth (tags stripped) or raise :class:`GroundTruthError`."""
    parsed = parse_number(strip_answer_tags(ground_truth))
    if parsed.value is None:
        raise GroundTruthError(problem_type, ground_truth, parsed.reason or "not a number")
    return parsed.value


def _tolerance(options: dict[str, Any], key: str, default: float) -> Fraction:
    value = options.get(key, default)
    try:
        tol = Fraction(str(value))
    except (TypeError, ValueError):
        raise ValueError(f"numerical option {key} must be a number >= 0, got {value!r}") from None
    if tol < 0:
        raise ValueError(f"numerical option {key} must be >= 0, got {value!r}")
    return tol


@register_scorer(
    "numerical",
    aliases=("number", "numeric", "counting", "count"),
    description="number equal to the ground truth within abs/rel tolerance",
)
def score_numerical(req: ScoreRequest, options: dict[str, Any]) -> Score:
    truth = ground_truth_number(req.ground_truth, "numerical")
    abs_tol = _tolerance(options, "abs_tol", DEFAULT_ABS_TOL)
    rel_tol = _tolerance(options, "rel_tol", DEFAULT_REL_TOL)
    extraction = extract_for(req.response, options)
    parsed = parse_number(extraction.text)
    details = extraction_details(extraction)
    details.update(pred=_plain(parsed.value), gt=_plain(truth))
    if parsed.value is None:
        details["reason"] = parsed.reason
        return Score(0.0, format_score(extraction, False), details)
    close = abs(parsed.value - truth) <= max(abs_tol, rel_tol * abs(truth))
    return Score(1.0 if close else 0.0, format_score(extraction, True), details)


def _plain(value: Fraction | None) -> float | int | None:
    """JSON-friendly form of a parsed number for details."""
    if value is None:
        return None
    return value.numerator if value.denominator == 1 else float(value)
