"""Spatio-temporal grounding: when (interval) and where (a box per timestamp).

accuracy = 0.5 * tIoU(P.time, G.time) + 0.5 * mean box IoU over the ground truth's
timestamps (the keys of G.boxes); a timestamp the prediction lacks counts 0, so one lucky
box among many earns little. Timestamps match after rounding to 0.01 s; predicted
timestamps outside the ground truth's are ignored. The weights are options
``time_weight`` (0.5) and ``box_weight`` (0.5).
Format of both: JSON ``{"time": [s, e], "boxes": {"<t>": [x1, y1, x2, y2], ...}}``.
valid = a JSON object with a valid ``time`` interval and a non-empty ``boxes`` object of
valid boxes;
the components are scored separately, so a malformed ``time`` still lets good boxes count.
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
from easyvideor1.rewards.geometry import GeometryError, as_interval, interval_iou
from easyvideor1.rewards.parsing import parse_jsonish
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.tracking import boxes_by_time, ground_truth_track, mean_track_iou
from easyvideor1.rewards.types import Score, ScoreRequest

NAME = "spatial-temporal grounding"


def _weights(options: dict[str, Any]) -> tuple[float, float]:
    time_weight = float(options.get("time_weight", 0.5))
    box_weight = float(options.get("box_weight", 0.5))
    if time_weight < 0 or box_weight < 0 or time_weight + box_weight <= 0:
        raise ValueError(f"{NAME} weights must be >= 0 with a positive sum, "
                         f"got time_weight={time_weight}, box_weight={box_weight}")
    total = time_weight + box_weight
    return time_weight / total, box_weight / total


def _ground_truth(ground_truth: str):
    try:
        value = parse_jsonish(strip_answer_tags(ground_truth))
        if not isinstance(value, dict) or "time" not in value or "boxes" not in value:
            raise ValueError('expected {"time": [s, e], "boxes": {"<t>": box, ...}}')
        interval = as_interval(value["time"])
    except ValueError as exc:
        raise GroundTruthError(NAME, ground_truth, str(exc)) from None
    return interval, ground_truth_track(value["boxes"], NAME, ground_truth)


@register_scorer(
    NAME,
    aliases=("stg", "spatio-temporal grounding", "spatiotemporal grounding",
             "spatial temporal grounding", "spatial_temporal_grounding"),
    description="0.5 tIoU + 0.5 mean box IoU over the ground-truth timestamps",
)
def score_spatiotemporal_grounding(req: ScoreRequest, options: dict[str, Any]) -> Score:
    time_weight, box_weight = _weights(options)
    truth_interval, truth_boxes = _ground_truth(req.ground_truth)
    extraction = extract_for(req.response, options)
    details = extraction_details(extraction)
    details.update(gt_time=list(truth_interval), gt_count=len(truth_boxes))
    try:
        value = parse_jsonish(extraction.text)
        if not isinstance(value, dict):
            raise ValueError('expected a JSON object {"time": [s, e], "boxes": {...}}')
    except ValueError as exc:
        details.update(tiou=0.0, box_iou=0.0, reason=details.get("reason") or str(exc))
        return Score(0.0, format_score(extraction, False), details)
    problems: list[str] = []
    tiou = 0.0
    try:
        pred_interval = as_interval(value.get("time"))
        tiou = interval_iou(pred_interval, truth_interval)
        details["pred_time"] = list(pred_interval)
    except GeometryError as exc:
        problems.append(f"time: {exc}")
    box_score = 0.0
    try:
        pred_boxes, box_problems = boxes_by_time(value.get("boxes"))
        problems.extend(f"boxes: {p}" for p in box_problems)
        if not pred_boxes:
            problems.append("boxes: no boxes given")
        box_score = mean_track_iou(pred_boxes, truth_boxes)
        details["matched"] = sum(1 for at in truth_boxes if pred_boxes.get(at) is not None)
    except GeometryError as exc:
        problems.append(f"boxes: {exc}")
    details.update(tiou=tiou, box_iou=box_score)
    if problems:
        details["reason"] = "; ".join(problems[:5])
    accuracy = time_weight * tiou + box_weight * box_score
    return Score(accuracy, format_score(extraction, not problems), details)
