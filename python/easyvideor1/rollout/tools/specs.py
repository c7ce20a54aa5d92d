"""The two video tools: their JSON-schema declarations and the check of a call's arguments.

``get_frames(start_s, end_s, fps)``: a clip of the trajectory's video; ``fps`` may be left out
(then the highest rate the budgets allow). ``zoom(t_s, box)``: one frame, cropped to ``box =
[x1, y1, x2, y2]`` in pixels of the source video (the size every get_frames result states).
The descriptions carry the configured limits, so the policy reads the budgets it is held to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from easyvideor1.config.schema import ToolsConfig
from easyvideor1.rollout.tools.base import ToolCall

GET_FRAMES = "get_frames"
ZOOM = "zoom"
TOOL_NAMES = (GET_FRAMES, ZOOM)


@dataclass(frozen=True)
class _Argument:
    name: str
    kind: str  # "seconds", "rate" or "box"
    required: bool


_ARGUMENTS: dict[str, tuple[_Argument, ...]] = {
    GET_FRAMES: (_Argument("start_s", "seconds", True), _Argument("end_s", "seconds", True),
                 _Argument("fps", "rate", False)),
    ZOOM: (_Argument("t_s", "seconds", True), _Argument("box", "box", True)),
}


def tool_schemas(cfg: ToolsConfig) -> list[dict[str, Any]]:
    """Both tools as function declarations (the ``tools=`` of a chat template)."""
    seconds = {"type": "number", "minimum": 0}
    get_frames = {
        "type": "function",
        "function": {
            "name": GET_FRAMES,
            "description": (f"Frames of the video from start_s to end_s at fps: at most {cfg.frames_per_call} per "
                            f"call (a longer window is thinned), {cfg.frames_per_trajectory} per answer, fps at most "
                            f"{cfg.max_fps:g}. The result gives each frame's time and the source frame size."),
            "parameters": {
                "type": "object",
                "properties": {
                    "start_s": {**seconds, "description": "Window start, seconds from the video start."},
                    "end_s": {**seconds, "description": "Window end in seconds, at most the video's duration."},
                    "fps": {"type": "number", "exclusiveMinimum": 0,
                            "description": "Frames per second (left out: the most the budget allows)."},
                },
                "required": ["start_s", "end_s"],
            },
        },
    }
    zoom = {
        "type": "function",
        "function": {
            "name": ZOOM,
            "description": "The frame at t_s at the source resolution, cropped to box and enlarged (one frame "
                           "of the budget).",
            "parameters": {
                "type": "object",
                "properties": {
                    "t_s": {**seconds, "description": "Time of the frame in seconds."},
                    "box": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4,
                            "description": "[x1, y1, x2, y2] in pixels of the source frame, origin top-left."},
                },
                "required": ["t_s", "box"],
            },
        },
    }
    return [get_frames, zoom]


def check_arguments(call: ToolCall) -> dict[str, Any] | str:
    """The call's arguments as floats (``box`` a 4-tuple), or what is wrong with them."""
    if call.name not in _ARGUMENTS:
        return f"unknown tool {call.name!r}: the tools are {' and '.join(TOOL_NAMES)}"
    spec = _ARGUMENTS[call.name]
    known = [a.name for a in spec]
    signature = f"{call.name}({', '.join(known)})"
    unknown = sorted(set(call.arguments) - set(known))
    if unknown:
        return f"{call.name} has no argument {unknown[0]!r}; it takes {signature}"
    resolved: dict[str, Any] = {}
    for argument in spec:
        if argument.name not in call.arguments or call.arguments[argument.name] is None:
            if argument.required:
                return f"{call.name} is missing the argument {argument.name!r}; it takes {signature}"
            continue
        value = call.arguments[argument.name]
        checked = _check_box(value) if argument.kind == "box" else _check_number(value, argument.kind)
        if isinstance(checked, str):
            return f"{call.name}: argument {argument.name!r} {checked}"
        resolved[argument.name] = checked
    return resolved


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_number(value: Any, kind: str) -> float | str:
    what = "a number of seconds" if kind == "seconds" else "a number of frames per second"
    if not _is_number(value):
        return f"must be {what}, got {_shown(value)}"
    return float(value)


def _check_box(value: Any) -> tuple[float, float, float, float] | str:
    if not isinstance(value, (list, tuple)) or len(value) != 4 or not all(_is_number(v) for v in value):
        return f"must be a list of four numbers [x1, y1, x2, y2], got {_shown(value)}"
    x1, y1, x2, y2 = (float(v) for v in value)
    return x1, y1, x2, y2


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
