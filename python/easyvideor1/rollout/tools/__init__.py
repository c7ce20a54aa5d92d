"""Video tools for multi-turn rollouts (get_frames, zoom) over the frame store (docs/tools.md)."""

from .base import ToolCall, ToolFrameSource, ToolKit, ToolOutcome, ToolSession, ToolVideo
from .calls import STOP_STRINGS, BadCall, call_syntax, find_tool_call, format_tool_call
from .errors import ToolRequestError, ToolSourceError
from .frames import LocalToolFrameSource, make_tool_frame_source
from .kit import IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER, VideoToolKit, VideoToolSession, make_tool_kit
from .specs import GET_FRAMES, TOOL_NAMES, ZOOM, check_arguments, tool_schemas

__all__ = [
    "GET_FRAMES",
    "IMAGE_PLACEHOLDER",
    "STOP_STRINGS",
    "TOOL_NAMES",
    "VIDEO_PLACEHOLDER",
    "ZOOM",
    "BadCall",
    "LocalToolFrameSource",
    "ToolCall",
    "ToolFrameSource",
    "ToolKit",
    "ToolOutcome",
    "ToolRequestError",
    "ToolSession",
    "ToolSourceError",
    "ToolVideo",
    "VideoToolKit",
    "VideoToolSession",
    "call_syntax",
    "check_arguments",
    "find_tool_call",
    "format_tool_call",
    "make_tool_frame_source",
    "make_tool_kit",
    "tool_schemas",
]
