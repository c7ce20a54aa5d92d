"""Spatial grounding (referring expressions): IoU of the predicted and true boxes.

accuracy = IoU(P, G) with boxes ``[x1, y1, x2, y2]`` in pixels (see
:mod:`easyvideor1.rewards.geometry`).
Ground truth and prediction are read alike, from JSON: a list ``[x1, y1, x2, y2]``, a dict
with ``bbox_2d``, ``bbox``, ``box`` or ``boxes`` (the reference project's
``{"boxes": [x1, y1, x2, y2]}``), or a one-element list of those (Qwen-VL style
``[{"bbox_2d": [...], "label": "cat"}]``); failing JSON, from text holding exactly four
numbers ("(10, 20), (50, 60)").
valid = four finite numbers with x1 < x2 and y1 < y2; several boxes, degenerate or
malformed boxes -> accuracy 0 (format 0.5 when tagged).
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
from easyvideor1.rewards.geometry import Box, GeometryError, as_box, box_iou
from easyvideor1.rewards.parsing import answer_and_json
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

_COORD_RE = re.compile(r"(?<![\w.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def parse_box(text: str | None) -> Box:
    """The one box an answer names; :class:`GeometryError`/ValueError when there is none."""
    text, value = answer_and_json(text)
    if value is not None:
        return as_box(value)  # several boxes are refused there
    coords = _COORD_RE.findall(text)
    if len(coords) != 4:
        raise ValueError(f"expected a box of 4 numbers, found {len(coords)} numbers")
    return as_box([float(c) for c in coords])


@register_scorer(
    "spatial grounding",
    aliases=("sg", "grounding", "bbox", "referring", "referring expression", "visual grounding"),
    description="IoU of the predicted [x1, y1, x2, y2] box",
)
def score_spatial_grounding(req: ScoreRequest, options: dict[str, Any]) -> Score:
    try:
        truth = parse_box(strip_answer_tags(req.ground_truth))
    except ValueError as exc:
        raise GroundTruthError("spatial grounding", req.ground_truth, str(exc)) from None
    extraction = extract_for(req.response, options)
    details = extraction_details(extraction)
    details["gt"] = list(truth)
    try:
        pred = parse_box(extraction.text)
    except (GeometryError, ValueError) as exc:
        details.update(pred=None, iou=0.0, reason=details.get("reason") or str(exc))
        return Score(0.0, format_score(extraction, False), details)
    iou = box_iou(pred, truth)
    details.update(pred=list(pred), iou=iou)
    return Score(iou, format_score(extraction, True), details)
