"""Single-object tracking: mean box IoU over the ground-truth timestamps.

accuracy = (1/|K|) * sum over k in K of IoU(P[k], G[k]), K = the ground truth's timestamps;
a timestamp the prediction lacks (or gives a malformed box for) counts 0; predicted
timestamps outside K are ignored. Timestamps match after rounding to 0.01 s.
Format of both: JSON ``{"<t>": [x1, y1, x2, y2], ...}`` (seconds as keys), the same wrapped
as ``{"boxes": {"<t>": box, ...}}`` (the reference project's form, keys integer seconds), or
a list ``[{"time": t, "bbox_2d": [...]}, ...]``.
valid = a JSON object whose every key is a timestamp and every value a valid box.
"""

from __future__ import annotations

from typing import Any

from easyvideor1.rewards.extract import (
    GroundTruthError,
    extract_for,
    extraction_details,
    format_score,
    strip_answer_tags,
)
from easyvideor1.rewards.geometry import Box, GeometryError, as_box, box_iou, time_key
from easyvideor1.rewards.parsing import parse_jsonish
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

_TIME_FIELDS = ("time", "t", "timestamp")


def boxes_by_time(value: Any) -> tuple[dict[int, Box | None], list[str]]:
    """``({hundredths: box or None}, problems)``; a malformed entry maps to None."""
    if isinstance(value, dict) and "boxes" in value:
        # {"boxes": {...}}: "boxes" is never a timestamp, so the wrapper is unambiguous.
        value = value["boxes"]
    if isinstance(value, list):
        value = _pairs_to_dict(value)
    if not isinstance(value, dict):
        raise GeometryError(f'expected {{"<t>": [x1, y1, x2, y2], ...}}, got {type(value).__name__}')
    track: dict[int, Box | None] = {}
    problems: list[str] = []
    for key, box in value.items():
        try:
            at = time_key(key)
        except GeometryError as exc:
            problems.append(str(exc))
            continue
        if at in track:
            problems.append(f"timestamp {key!r} given twice (after rounding to 0.01 s)")
        try:
            track[at] = as_box(box)
        except GeometryError as exc:
            track[at] = None
            problems.append(f"at {key!r}: {exc}")
    return track, problems


def _pairs_to_dict(items: list[Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for item in items:
        field = next((f for f in _TIME_FIELDS if isinstance(item, dict) and f in item), None)
        if field is None:
            raise GeometryError('a list of boxes needs {"time": t, "bbox_2d": [...]} items')
        out[item[field]] = {k: v for k, v in item.items() if k != field}
    return out


def ground_truth_track(value: Any, problem_type: str, ground_truth: str) -> dict[int, Box]:
    """Strictly validated ground-truth boxes by time (raises :class:`GroundTruthError`)."""
    try:
        track, problems = boxes_by_time(value)
    except GeometryError as exc:
        raise GroundTruthError(problem_type, ground_truth, str(exc)) from None
    if problems or not track:
        raise GroundTruthError(problem_type, ground_truth, "; ".join(problems) or "no boxes")
    return {k: v for k, v in track.items() if v is not None}


def mean_track_iou(pred: dict[int, Box | None], truth: dict[int, Box]) -> float:
    """Mean IoU over the ground-truth keys, missing or malformed predictions counting 0."""
    total = 0.0
    for at, box in truth.items():
        guess = pred.get(at)
        if guess is not None:
            total += box_iou(guess, box)
    return total / len(truth)


@register_scorer(
    "tracking",
    aliases=("track", "object tracking", "sot", "single object tracking"),
    description="mean box IoU over the ground-truth timestamps",
)
def score_tracking(req: ScoreRequest, options: dict[str, Any]) -> Score:
    truth_text = strip_answer_tags(req.ground_truth)
    try:
        truth_value = parse_jsonish(truth_text)
    except ValueError as exc:
        raise GroundTruthError("tracking", req.ground_truth, str(exc)) from None
    truth = ground_truth_track(truth_value, "tracking", req.ground_truth)
    extraction = extract_for(req.response, options)
    details = extraction_details(extraction)
    details["gt_count"] = len(truth)
    try:
        pred, problems = boxes_by_time(parse_jsonish(extraction.text))
    except (GeometryError, ValueError) as exc:
        details.update(box_iou=0.0, matched=0, reason=details.get("reason") or str(exc))
        return Score(0.0, format_score(extraction, False), details)
    iou = mean_track_iou(pred, truth)
    matched = sum(1 for at in truth if pred.get(at) is not None)
    details.update(box_iou=iou, matched=matched, pred_count=len(pred))
    if problems:
        details["reason"] = "; ".join(problems[:5])
    valid = not problems and bool(pred)
    return Score(iou, format_score(extraction, valid), details)
