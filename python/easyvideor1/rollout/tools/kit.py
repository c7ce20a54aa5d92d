"""``VideoToolKit``: get_frames and zoom for one model family, and their per-trajectory sessions.

A session answers each policy turn that makes a call with a :class:`ToolOutcome`, refusals
included, in this order of checks: the turn limit (``max_turns``), the call's syntax, the tool
and its arguments, the times against the video's duration, the trajectory's frame budget
(``frames_per_trajectory``), then the fetch itself (a box outside the frame is found there).
get_frames caps fps at ``max_fps`` and thins a window to ``frames_per_call`` (and to what is
left of the trajectory's budget) by lowering the rate, and says so in the result. The media's
``refs`` hold the resolved request, so :meth:`VideoToolKit.refetch` returns the same frames.
"""

from __future__ import annotations

import logging
from typing import Any

from easyvideor1.config.schema import RunConfig, ToolsConfig
from easyvideor1.errors import MediaError
from easyvideor1.logging import event, get_logger
from easyvideor1.models.expansion import MediaInputError, check_image_metadata, check_video_metadata
from easyvideor1.models.families import (
    IMAGE_PAD,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    ModelFamily,
    get_family,
)
from easyvideor1.models.inputs import ImageInput, VideoInput
from easyvideor1.rollout.tools.base import (
    ToolCall,
    ToolFrameSource,
    ToolKit,
    ToolOutcome,
    ToolSession,
    ToolVideo,
)
from easyvideor1.rollout.tools.calls import (
    STOP_STRINGS,
    BadCall,
    CallSyntax,
    call_syntax,
    find_tool_call,
    format_tool_call,
)
from easyvideor1.rollout.tools.errors import ToolRequestError
from easyvideor1.rollout.tools.frames import make_tool_frame_source
from easyvideor1.rollout.tools.specs import GET_FRAMES, ZOOM, check_arguments, tool_schemas
from easyvideor1.rollout.tools.window import crop_ref, refetch, window_ref

_log = get_logger("rollout.tools")

IM_START, IM_END = "<|im_start|>", "<|im_end|>"  # the chat-turn markers of every Qwen family
VIDEO_PLACEHOLDER = VISION_START + VIDEO_PAD + VISION_END
IMAGE_PLACEHOLDER = VISION_START + IMAGE_PAD + VISION_END
# A zoom at the very end of the video reads the last frame, which starts before the end.
_END_MARGIN_S = 1e-3
# Window sizes are compared against frame counts with this slack (float error of span * fps).
_FRAME_EPSILON = 1e-6


def tool_template_kwargs(family: str | ModelFamily, cfg: ToolsConfig) -> dict[str, Any]:
    """Keyword arguments of ``apply_chat_template`` that declare the tools: ``tools`` and the
    call syntax (``tool_call_format``, read by the tiny models' template; real templates ignore it
    and write their own). A pure function of the settings: the trainer's remote stage lays out a
    prompt exactly as the rollout worker's kit does without a frame source of its own."""
    return {"tools": tool_schemas(cfg), "tool_call_format": call_syntax(get_family(family))}


class VideoToolKit(ToolKit):
    """The video tools of ``family`` over ``source``, held to ``cfg``'s budgets."""

    def __init__(self, family: str | ModelFamily, source: ToolFrameSource, cfg: ToolsConfig | None = None):
        self.family = get_family(family)
        self.source = source
        self.cfg = cfg or ToolsConfig()
        self.syntax: CallSyntax = call_syntax(self.family)

    def schemas(self) -> list[dict[str, Any]]:
        return tool_schemas(self.cfg)

    def chat_template_kwargs(self) -> dict[str, Any]:
        return tool_template_kwargs(self.family, self.cfg)

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return STOP_STRINGS

    def parse(self, policy_turn: str) -> ToolCall | BadCall | None:
        """The turn's call in this family's syntax (None: no call)."""
        return find_tool_call(policy_turn, self.syntax)

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        """``name(arguments)`` as this family writes a call (offline trajectories, tests)."""
        return format_tool_call(self.syntax, name, arguments)

    def tool_turn_text(self, outcome: ToolOutcome) -> str:
        placeholders = VIDEO_PLACEHOLDER * len(outcome.videos) + IMAGE_PLACEHOLDER * len(outcome.images)
        body = outcome.text + ("\n" + placeholders if placeholders else "")
        # Qwen templates render a tool message as a user turn wrapping <tool_response> ... </tool_response>.
        return (f"{IM_END}\n{IM_START}user\n<tool_response>\n{body}\n</tool_response>{IM_END}\n"
                f"{IM_START}assistant\n")

    def refetch(self, ref: dict[str, Any]) -> VideoInput | ImageInput:
        return refetch(self.source, ref)

    def session(self, video: ToolVideo) -> VideoToolSession:
        return VideoToolSession(self, video)

    def close(self) -> None:
        self.source.close()


class VideoToolSession(ToolSession):
    """One trajectory's calls and frames against the kit's budgets."""

    def __init__(self, kit: VideoToolKit, video: ToolVideo):
        self.kit, self.video, self.cfg = kit, video, kit.cfg
        self._calls = 0
        self.errors = 0
        self.frames_fetched = 0

    @property
    def calls(self) -> int:
        return self._calls

    @property
    def frames_left(self) -> int:
        return max(0, self.cfg.frames_per_trajectory - self.frames_fetched)

    def run(self, policy_turn: str) -> ToolOutcome | None:
        found = self.kit.parse(policy_turn)
        if found is None:
            return None
        self._calls += 1
        if self._calls > self.cfg.max_turns:
            return self._refuse(f"turn limit reached: this answer has used its {self.cfg.max_turns} tool call(s); "
                                "answer now without calling a tool")
        if isinstance(found, BadCall):
            return self._refuse(f"bad tool call: {found.message}")
        arguments = check_arguments(found)
        if isinstance(arguments, str):
            return self._refuse(f"bad tool call: {arguments}")
        if found.name == GET_FRAMES:
            return self._get_frames(arguments)
        return self._zoom(arguments)

    def _refuse(self, message: str) -> ToolOutcome:
        self.errors += 1
        return ToolOutcome(text=f"Error: {message}", error=message)

    def _time_error(self, name: str, value: float, *, end_ok: bool) -> str | None:
        duration = self.video.duration_s
        if value < 0:
            return f"{name}={value:g} is before the start of the video (0 s)"
        if duration <= 0:  # unknown: the decoder refuses a window past the end
            return None
        if value > duration or (value == duration and not end_ok):
            return f"{name}={value:g} is {'after' if end_ok else 'at or after'} the end of the video " \
                   f"({duration:.2f} s)"
        return None

    def _budget_error(self, needed: int) -> str | None:
        left = self.frames_left
        if left >= needed:
            return None
        return (f"frame budget used up: {self.frames_fetched} of {self.cfg.frames_per_trajectory} frames fetched "
                f"for this answer, {left} left and this call needs at least {needed}; answer now")

    def _get_frames(self, args: dict[str, Any]) -> ToolOutcome:
        start, end = args["start_s"], args["end_s"]
        problem = self._time_error("start_s", start, end_ok=False) or self._time_error("end_s", end, end_ok=True)
        if problem is None and start >= end:
            problem = f"start_s ({start:g}) must be before end_s ({end:g})"
        if problem is not None:
            return self._refuse(f"get_frames: {problem}")
        notes = []
        fps = args.get("fps", self.cfg.max_fps)
        if fps <= 0:
            return self._refuse(f"get_frames: argument 'fps' must be > 0, got {fps:g}")
        if fps > self.cfg.max_fps:
            notes.append(f"fps {fps:g} is above the limit of {self.cfg.max_fps:g}, sampled at {self.cfg.max_fps:g}")
            fps = self.cfg.max_fps
        patch = self.kit.family.temporal_patch_size
        problem = self._budget_error(patch)
        if problem is not None:
            return self._refuse(f"get_frames: {problem}")
        per_call, left = self.cfg.frames_per_call, self.frames_left
        if per_call < patch:
            return self._refuse(f"get_frames is unavailable: worker.rollout.tools.frames_per_call ({per_call}) is "
                                f"below one temporal patch of {patch} frames; use zoom or answer now")
        allowed = min(per_call, left) // patch * patch
        span = end - start
        if span * fps > allowed + _FRAME_EPSILON:
            limit = f"the limit of {per_call} frames per call" if per_call <= left else \
                f"the {left} frames left for this answer"
            asked = fps
            # One rate per window beyond the limit: every over-long request shares one cache key.
            fps = allowed / span
            notes.append(f"at {asked:g} fps this window would give {span * asked:.3g} frames; it was thinned to "
                         f"{allowed} frames ({fps:.3g} fps) to stay within {limit}")
        try:
            video = self.kit.source.window(self.video, start, end, fps, max_frames=allowed,
                                           max_pixels=self.cfg.window_max_pixels)
            check_video_metadata("tool", 0, video.metadata, self.kit.family)
        except ToolRequestError as exc:
            return self._refuse(f"get_frames: {exc}")
        except Exception as exc:  # noqa: BLE001 - a tool call never raises into a rollout
            return self._failed(GET_FRAMES, exc)
        count = int(video.frames.shape[0])
        self.frames_fetched += count
        meta = video.metadata
        times = ", ".join(f"{t:.2f}" for t in meta.timestamps)
        text = (f"get_frames: {count} frames of {start:.2f}-{end:.2f} s at {meta.sample_fps:.3g} fps, "
                f"{meta.width}x{meta.height} pixels each (source frame {meta.source_width}x{meta.source_height}); "
                f"frame times (s): {times}. {self.frames_left} of {self.cfg.frames_per_trajectory} frames left.")
        if notes:
            text += " Note: " + "; ".join(notes) + "."
        ref = window_ref(self.video, start, end, fps, max_frames=allowed, max_pixels=self.cfg.window_max_pixels)
        return ToolOutcome(text=text, videos=(video,), refs=(ref,))

    def _zoom(self, args: dict[str, Any]) -> ToolOutcome:
        t = args["t_s"]
        problem = self._time_error("t_s", t, end_ok=True) or self._budget_error(1)
        if problem is not None:
            return self._refuse(f"zoom: {problem}")
        frame_time = t if self.video.duration_s <= 0 else min(t, max(0.0, self.video.duration_s - _END_MARGIN_S))
        box = args["box"]
        x1, y1, x2, y2 = box
        shown = ", ".join(f"{v:g}" for v in box)
        if x1 >= x2 or y1 >= y2:
            return self._refuse(f"zoom: box [{shown}] is empty: it needs x1 < x2 and y1 < y2")
        if min(box) < 0:
            return self._refuse(f"zoom: box [{shown}] has a negative coordinate: pixels count from the source "
                                "frame's top-left corner (0, 0)")
        try:
            image = self.kit.source.crop(self.video, frame_time, box, max_pixels=self.cfg.zoom_max_pixels)
            check_image_metadata("tool", 0, image.metadata, self.kit.family)
        except ToolRequestError as exc:
            return self._refuse(f"zoom: {exc}")
        except Exception as exc:  # noqa: BLE001 - a tool call never raises into a rollout
            return self._failed(ZOOM, exc)
        self.frames_fetched += 1
        meta = image.metadata
        assert meta is not None  # check_image_metadata refused an image without it
        text = (f"zoom: the frame at {t:.2f} s, box [{shown}] ({meta.source_width}x{meta.source_height} source "
                f"pixels) shown at {meta.width}x{meta.height}. {self.frames_left} of "
                f"{self.cfg.frames_per_trajectory} frames left.")
        ref = crop_ref(self.video, frame_time, box, max_pixels=self.cfg.zoom_max_pixels)
        return ToolOutcome(text=text, images=(image,), refs=(ref,))

    def _failed(self, tool: str, exc: Exception) -> ToolOutcome:
        event(_log, "tool_fetch_failed", logging.WARNING, tool=tool, video=self.video.path or self.video.key,
              error=f"{type(exc).__name__}: {exc}")
        # The policy gets the reason where it is about the media, not a service's internals.
        detail = exc.reason if isinstance(exc, MediaError) else str(exc) if isinstance(exc, MediaInputError) \
            else type(exc).__name__
        return self._refuse(f"{tool}: the frames could not be fetched ({detail}); try another window or answer now")


def make_tool_kit(cfg: RunConfig, family: str | ModelFamily, *, source: ToolFrameSource | None = None
                  ) -> VideoToolKit:
    """The run's tool kit for ``family`` (its frame source from ``make_tool_frame_source``)."""
    if source is None:
        source = make_tool_frame_source(cfg, family)
    return VideoToolKit(family, source, cfg.worker.rollout.tools)
