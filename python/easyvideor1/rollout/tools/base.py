"""The video tools' interface: what the multi-turn driver asks of a tool kit.

A :class:`ToolKit` declares the tools to the chat template, finds a tool call in a policy
turn, and opens a :class:`ToolSession` per trajectory (its budget state: calls made, frames
fetched). A session answers every call with a :class:`ToolOutcome`, an error message for a
bad call included: a tool call never raises into the rollout. Where the frames come from is
a :class:`ToolFrameSource` (the frame store in this process, or the frame-cache service's tool
endpoint over HTTP), made by ``make_tool_frame_source(cfg)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from easyvideor1.models.inputs import ImageInput, VideoInput


@dataclass(frozen=True)
class ToolVideo:
    """The video a trajectory's tool calls refer to (the sample's first video)."""

    path: str | None  # the raw file: windows at other rates/sizes are decoded from it
    key: str | None  # its cache key when prepared (where the frame-cache service finds it)
    duration_s: float  # what get_frames/zoom times are checked against


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    raw: str  # the call's text as the policy wrote it


@dataclass(frozen=True)
class ToolOutcome:
    """What one call appends as a tool turn: text, and the media it shows the policy."""

    text: str
    videos: tuple[VideoInput, ...] = ()
    images: tuple[ImageInput, ...] = ()
    error: str | None = None  # set when the call was refused (the text says why)
    # How to fetch each medium again (one dict per video then image, in order: the tool, the
    # video's path/key and the call's resolved arguments), so a trajectory can travel over the
    # queue without its pixels and be re-fetched by the trainer through a ToolFrameSource.
    refs: tuple[dict[str, Any], ...] = ()

    @property
    def frames(self) -> int:
        return sum(int(v.frames.shape[0]) for v in self.videos) + len(self.images)


class ToolFrameSource(ABC):
    """Frames for tool calls, by the video's path/key."""

    @abstractmethod
    def window(self, video: ToolVideo, start_s: float, end_s: float, fps: float, *, max_frames: int,
               max_pixels: int | None) -> VideoInput:
        """Frames of ``[start_s, end_s]`` at ``fps`` (at most ``max_frames``), resized for the model."""

    @abstractmethod
    def crop(self, video: ToolVideo, t_s: float, box: tuple[float, float, float, float], *,
             max_pixels: int) -> ImageInput:
        """The frame at ``t_s`` at source resolution, cropped to ``box`` (x1, y1, x2, y2 in source
        pixels), then resized within ``max_pixels``."""

    def close(self) -> None:
        return None


class ToolSession(ABC):
    """One trajectory's tool state (calls and frames so far, against the config's budgets)."""

    @abstractmethod
    def run(self, policy_turn: str) -> ToolOutcome | None:
        """The outcome of the tool call in ``policy_turn``; None when the turn makes no call (the
        trajectory ends). A malformed call, an unknown tool, bad arguments, a budget or a turn limit
        exceeded: an outcome with ``error`` set, never an exception."""

    @property
    @abstractmethod
    def calls(self) -> int:
        """Calls made so far (refused ones included)."""


class ToolKit(ABC):
    """The tools of one model family, over one frame source."""

    @abstractmethod
    def schemas(self) -> list[dict[str, Any]]:
        """The tools as JSON-schema function declarations (``tools=`` of the chat template)."""

    @property
    @abstractmethod
    def stop_strings(self) -> tuple[str, ...]:
        """Where a policy turn that makes a call ends (the family's closing call tag)."""

    @abstractmethod
    def tool_turn_text(self, outcome: ToolOutcome) -> str:
        """The text appended after a policy turn that made a call, up to and including the next
        assistant header, in the family's chat format, with one unexpanded vision placeholder
        (``<|vision_start|><|video_pad|><|vision_end|>`` / ``..<|image_pad|>..``) per medium in
        the order of ``outcome.videos`` then ``outcome.images``."""

    @abstractmethod
    def refetch(self, ref: dict[str, Any]) -> VideoInput | ImageInput:
        """The medium one of ``ToolOutcome.refs`` describes, fetched again (same frames)."""

    @abstractmethod
    def session(self, video: ToolVideo) -> ToolSession:
        """Fresh per-trajectory state."""

    def chat_template_kwargs(self) -> dict[str, Any]:
        """What the chat template needs to declare the tools (``tools=`` and any family option)."""
        return {"tools": self.schemas()}

    def request_fields(self) -> dict[str, Any]:
        """:meth:`chat_template_kwargs` as a request's (or ``PromptBuilder.expand``'s) keywords."""
        return declaration_fields(self.chat_template_kwargs())


def declaration_fields(declared: Mapping[str, Any]) -> dict[str, Any]:
    """Chat-template declarations as request keywords: ``tools``, and the other variables (the call
    syntax, ...) as ``template_kwargs`` (None when there are none)."""
    rest = dict(declared)
    tools = rest.pop("tools", None)
    return {"tools": tools, "template_kwargs": rest or None}
