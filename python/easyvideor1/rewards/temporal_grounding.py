"""Temporal grounding (moment retrieval): tIoU of the predicted and true ``[start, end]``.

accuracy = tIoU = |P ∩ G| / |P ∪ G| (seconds; see :mod:`easyvideor1.rewards.geometry`).
The prediction is read from JSON (``[1.5, 3.0]``, ``{"start": 1.5, "end": 3.0}``,
``{"time": [...]}``) or from text with exactly two times joined by "to", "-", "–", "~",
"and" or ",": "1.5 to 3.0 seconds", "from 1.5s to 3s", "between 1.5 and 3.0", "1.5 - 3.0".
Times may be written ``mm:ss`` or ``hh:mm:ss`` (converted to seconds).
valid = a well-formed interval (two finite numbers, 0 <= start <= end). Malformed or
reversed (start > end) -> accuracy 0 and format 0.5 when tagged.
"""

from __future__ import annotations

import re
from typing import Any

from easyvideor1.rewards.extract import (
    GroundTruthError,
    extract_for,
    extraction_details,
    format_score,
    strip_answer_tags,
)
from easyvideor1.rewards.geometry import GeometryError, Interval, as_interval, interval_iou
from easyvideor1.rewards.parsing import answer_and_json
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

_TIME = r"(\d+(?::\d{1,2}){0,2}(?:\.\d+)?|\.\d+)"
_UNIT = r"(?:\s*(?:s|sec|secs|second|seconds)\b\.?)?"
_RANGE_RE = re.compile(
    rf"(?<![\w.]){_TIME}{_UNIT}\s*(?:to|-|–|—|~|and|,)\s*{_TIME}{_UNIT}(?![\w.])", re.IGNORECASE
)


def parse_interval(text: str | None) -> Interval:
    """The interval an answer names; :class:`GeometryError`/ValueError when there is none."""
    text, value = answer_and_json(text)
    if value is not None:
        return as_interval(value)
    ranges = _RANGE_RE.findall(text)
    if len(ranges) != 1:
        raise ValueError("no time range found" if not ranges else "several time ranges")
    start, end = ranges[0]
    return as_interval([_seconds(start), _seconds(end)])


def _seconds(token: str) -> float:
    parts = token.split(":")
    value = 0.0
    for part in parts:
        value = value * 60 + float(part)
    return value


def ground_truth_interval(ground_truth: str, problem_type: str) -> Interval:
    try:
        return parse_interval(strip_answer_tags(ground_truth))
    except ValueError as exc:
        raise GroundTruthError(problem_type, ground_truth, str(exc)) from None


@register_scorer(
    "temporal grounding",
    aliases=("tg", "video grounding", "moment retrieval", "temporal localization"),
    description="tIoU of the predicted [start, end] seconds",
)
def score_temporal_grounding(req: ScoreRequest, options: dict[str, Any]) -> Score:
    truth = ground_truth_interval(req.ground_truth, "temporal grounding")
    extraction = extract_for(req.response, options)
    details = extraction_details(extraction)
    details["gt"] = list(truth)
    try:
        pred = parse_interval(extraction.text)
    except (GeometryError, ValueError) as exc:
        details.update(pred=None, tiou=0.0, reason=details.get("reason") or str(exc))
        return Score(0.0, format_score(extraction, False), details)
    tiou = interval_iou(pred, truth)
    details.update(pred=list(pred), tiou=tiou)
    return Score(tiou, format_score(extraction, True), details)
