"""Intervals and boxes: validation of parsed JSON values and their IoU.

Interval ``[start, end]`` in seconds: two finite numbers, ``0 <= start <= end`` (a reversed
interval is invalid; a zero-length one is valid). tIoU = |A ∩ B| / |A ∪ B|; two identical
zero-length intervals have tIoU 1, any other pair with an empty union 0.

Box ``[x1, y1, x2, y2]`` in pixels: four finite numbers with ``x1 < x2`` and ``y1 < y2``
(degenerate boxes are invalid). Dict forms name the box under ``bbox_2d``, ``bbox``, ``box``
or ``boxes`` (the last is the reference project's ``{"boxes": [x1, y1, x2, y2]}``).
IoU = area(A ∩ B) / area(A ∪ B), continuous coordinates (no +1 pixel convention).

Timestamp keys (``"1.5"``) are matched after rounding to 0.01 s: :func:`time_key` maps a key
to an integer number of hundredths, so ``"1.5"``, ``"1.50"`` and ``1.5`` are the same frame.
"""

from __future__ import annotations

import math
from typing import Any

Interval = tuple[float, float]
Box = tuple[float, float, float, float]

BOX_KEYS = ("bbox_2d", "bbox", "box", "boxes")


class GeometryError(ValueError):
    """A value is not a valid interval, box or timestamp; the message says why."""


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise GeometryError(f"{what} must be a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise GeometryError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise GeometryError(f"{what} must be finite, got {value!r}")
    return number


def as_interval(value: Any) -> Interval:
    """Validate ``[start, end]`` (also ``{"start":, "end":}`` or a one-element nesting)."""
    if isinstance(value, dict):
        if "start" in value and "end" in value:
            value = [value["start"], value["end"]]
        elif "time" in value:
            value = value["time"]
    if isinstance(value, list | tuple) and len(value) == 1 and isinstance(value[0], list | tuple | dict):
        return as_interval(value[0])
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise GeometryError(f"an interval is [start, end], got {value!r}")
    start, end = _finite(value[0], "start"), _finite(value[1], "end")
    if start < 0:
        raise GeometryError(f"start must be >= 0, got {start:g}")
    if start > end:
        raise GeometryError(f"reversed interval: start {start:g} > end {end:g}")
    return start, end


def as_box(value: Any) -> Box:
    """Validate ``[x1, y1, x2, y2]`` (also ``{"bbox_2d": [...]}``/``{"bbox":}``/``{"box":}``/
    ``{"boxes":}``, or a one-element list of any of these)."""
    if isinstance(value, dict):
        for key in BOX_KEYS:
            if key in value:
                return as_box(value[key])
        raise GeometryError(f"a box dict needs one of {', '.join(BOX_KEYS)}, got keys {sorted(value)}")
    if isinstance(value, list | tuple) and value and all(isinstance(v, list | tuple | dict) for v in value):
        if len(value) > 1:
            raise GeometryError(f"{len(value)} boxes given, one expected")
        return as_box(value[0])
    if not isinstance(value, list | tuple) or len(value) != 4:
        raise GeometryError(f"a box is [x1, y1, x2, y2], got {value!r}")
    x1, y1, x2, y2 = (_finite(v, name) for v, name in zip(value, ("x1", "y1", "x2", "y2")))
    if not (x1 < x2 and y1 < y2):
        raise GeometryError(f"degenerate box: need x1 < x2 and y1 < y2, got {list(value)!r}")
    return x1, y1, x2, y2


def time_key(key: Any) -> int:
    """A timestamp (string or number, seconds) as hundredths of a second."""
    seconds = _finite(key.strip() if isinstance(key, str) else key, "timestamp")
    if seconds < 0:
        raise GeometryError(f"timestamp must be >= 0, got {key!r}")
    return round(seconds * 100)


def _ratio(inter: float, union: float) -> float:
    ratio = inter / union
    return ratio if 0.0 <= ratio <= 1.0 else 0.0  # NaN from inf/inf lands here


def interval_iou(a: Interval, b: Interval) -> float:
    if not all(math.isfinite(x) for x in (a[1] - a[0], b[1] - b[0])):
        # Spans too large for float arithmetic: compare in units of the largest coordinate.
        scale = max(abs(x) for x in (*a, *b))
        a, b = (a[0] / scale, a[1] / scale), (b[0] / scale, b[1] / scale)
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = (a[1] - a[0]) + (b[1] - b[0]) - inter
    if union <= 0:
        return 1.0 if a == b else 0.0
    return _ratio(inter, union)


def box_iou(a: Box, b: Box) -> float:
    if not all(math.isfinite((box[2] - box[0]) * (box[3] - box[1])) for box in (a, b)):
        scale = max(abs(x) for x in (*a, *b))
        a = tuple(x / scale for x in a)  # type: ignore[assignment]
        b = tuple(x / scale for x in b)  # type: ignore[assignment]
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return _ratio(inter, union) if union > 0 else 0.0
