"""The one implementation of a tool window and a zoom crop, over a :class:`FrameLoader`.

Both frame sources use these functions: the in-process one (rollout/tools/frames.py) and the
frame-cache service's tool endpoint (services/frame_cache/tools.py), so a trajectory's media
are the same frames whichever served them, and a re-fetch by its refs gives them again.

* :func:`fetch_window` loads ``[start_s, end_s]`` at ``fps`` through ``loader.load_video``:
  the loader's parameters with the call's rate, frame budget and pixel budget (and the
  family's factor and temporal patch), the window applied. That is the project's decode and
  seek path with its own cache key, so a miss decodes and (``write_back``) stores the clip and
  the next identical call is a store hit.
* :func:`fetch_crop` loads the single frame on screen at ``t_s`` at the source resolution
  (resize factor 1, the same loader path and store), cuts ``box`` out of it and scales the
  crop to between a quarter of ``max_pixels`` and ``max_pixels`` (``smart_resize`` to the
  family's factor, bicubic as ``video/image.py``): a zoom enlarges a small detail.

A request the video cannot answer raises :class:`ToolArgumentError` (a ``ToolRequestError``,
rollout/tools/errors.py) naming the argument (``start_s``, ``box``, ...); a video without a raw
file raises ``ToolSourceError``; a file that cannot be decoded, the decoder's MediaError.

Refs (``ToolOutcome.refs``, ``Trajectory.media_refs``) are flat JSON dicts, one per medium, in
the tool kit's layout: ``{"tool": "get_frames", "video_path", "video_key", "duration_s",
"start_s", "end_s", "fps", "max_frames", "max_pixels"}`` and ``{"tool": "zoom", "video_path",
"video_key", "duration_s", "t_s", "box": [x1, y1, x2, y2], "max_pixels"}`` (:func:`window_ref`,
:func:`crop_ref`); :func:`refetch` fetches the medium a ref names again through any
:class:`ToolFrameSource` (what ``VideoToolKit.refetch`` does through its own source).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from easyvideor1.cache.loader import FrameLoader
from easyvideor1.models.families import ModelFamily, get_family
from easyvideor1.models.inputs import ImageInput, VideoInput
from easyvideor1.rollout.tools.base import ToolFrameSource, ToolVideo
from easyvideor1.rollout.tools.errors import ToolRequestError, ToolSourceError
from easyvideor1.video.metadata import ImageMetadata, VideoParams
from easyvideor1.video.sampling import smart_resize

WINDOW_TOOL = "get_frames"
CROP_TOOL = "zoom"
# A window may end a rounding error past the video's end (a policy copying the duration).
_END_TOLERANCE_S = 1e-3
# A zoom reads the frame on screen at t_s: a window this short holds at most that frame's start.
ZOOM_WINDOW_S = 1e-3


class ToolArgumentError(ToolRequestError):
    """A :class:`ToolRequestError` that names the argument at fault (``field``)."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


def _number(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ToolArgumentError(field, f"must be a finite number, got {value!r}")
    return float(value)


def _count(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ToolArgumentError(field, f"must be an integer, got {value!r}")
    return int(value)


def _path(video: ToolVideo) -> str:
    if not video.path:
        raise ToolSourceError(f"video {video.key or '?'} has no raw file path to decode a window or a frame from "
                              "(serve it with the frame-cache service, which finds the file by its key)")
    return video.path


def _check_time(field: str, t: float, video: ToolVideo) -> None:
    if t < 0:
        raise ToolArgumentError(field, f"{t:g} s is before the start of the video")
    if video.duration_s > 0 and t >= video.duration_s:
        raise ToolArgumentError(field, f"{t:g} s is at or after the end of the video ({video.duration_s:g} s)")


def _with_params(loader: FrameLoader, params: VideoParams) -> FrameLoader:
    """``loader`` with other video parameters, sharing its store, hash index and counters (a
    shallow copy), so tool loads are counted as the loader's hits, misses and write-backs."""
    view = copy.copy(loader)
    view.video_params = params
    return view


def window_params(loader: FrameLoader, start_s: float, end_s: float, fps: float, *, max_frames: int,
                  max_pixels: int | None, family: str | ModelFamily) -> VideoParams:
    """The video parameters of a window: the loader's, with the call's rate and budgets.

    The fewest frames is one temporal patch (the data's ``min_frames`` is a floor for whole
    videos, not for a short window the policy chose)."""
    fam = get_family(family)
    base = loader.video_params
    fps = _number("fps", fps)
    if fps <= 0:
        raise ToolArgumentError("fps", f"must be > 0, got {fps:g}")
    max_frames = _count("max_frames", max_frames)
    if max_frames < fam.temporal_patch_size:
        raise ToolArgumentError("max_frames", f"must be >= {fam.temporal_patch_size} (one temporal patch of "
                               f"{fam.name}), got {max_frames}")
    pixels = base.max_pixels if max_pixels is None else _count("max_pixels", max_pixels)
    if pixels < fam.factor**2:
        raise ToolArgumentError("max_pixels", f"must be >= {fam.factor**2} (one {fam.factor}x{fam.factor} "
                               f"patch of {fam.name}), got {pixels}")
    return dataclasses.replace(
        base, fps=fps, min_frames=fam.temporal_patch_size, max_frames=max_frames,
        min_pixels=min(base.min_pixels, pixels), max_pixels=pixels, factor=fam.factor,
        temporal_patch_size=fam.temporal_patch_size, start_s=start_s, end_s=end_s)


def fetch_window(loader: FrameLoader, video: ToolVideo, start_s: float, end_s: float, fps: float, *,
                 max_frames: int, max_pixels: int | None, family: str | ModelFamily) -> VideoInput:
    """Frames of ``[start_s, end_s]`` at ``fps`` (at most ``max_frames``), resized within
    ``max_pixels`` (None: the loader's), as the project's decoder samples a clip window."""
    start_s, end_s = _number("start_s", start_s), _number("end_s", end_s)
    _check_time("start_s", start_s, video)
    if end_s <= start_s:
        raise ToolArgumentError("end_s", f"must be after start_s ({start_s:g} s), got {end_s:g} s")
    if video.duration_s > 0 and end_s > video.duration_s + _END_TOLERANCE_S:
        raise ToolArgumentError("end_s", f"{end_s:g} s is after the end of the video ({video.duration_s:g} s)")
    params = window_params(loader, start_s, end_s, fps, max_frames=max_frames, max_pixels=max_pixels,
                           family=family)
    frames, metadata = _with_params(loader, params).load_video(_path(video))
    return VideoInput(frames, metadata)


def frame_params(loader: FrameLoader, t_s: float) -> VideoParams:
    """Parameters of the single frame on screen at ``t_s``, at the source resolution.

    Factor 1 keeps every source size (no rounding) and the pixel budget is the source cap, so
    the decoder only converts the frame to RGB. The window ``[t_s, t_s + ZOOM_WINDOW_S)`` holds
    that frame alone (``window_frame_range``: the frame starting in it, else the one shown)."""
    base = loader.video_params
    return VideoParams(fps=1.0, min_frames=1, max_frames=1, min_pixels=1, max_pixels=base.max_source_pixels,
                       factor=1, temporal_patch_size=1, max_source_pixels=base.max_source_pixels,
                       max_duration_s=base.max_duration_s, start_s=t_s, end_s=t_s + ZOOM_WINDOW_S)


def _crop_box(box: Any, height: int, width: int) -> tuple[int, int, int, int]:
    """``(left, top, right, bottom)`` pixel bounds of ``box`` (x1, y1, x2, y2), or why not."""
    if isinstance(box, (str, bytes)) or not isinstance(box, Sequence) or len(box) != 4:
        raise ToolArgumentError("box", f"must be [x1, y1, x2, y2] in source pixels, got {box!r}")
    x1, y1, x2, y2 = (_number("box", v) for v in box)
    if not (0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height):
        raise ToolArgumentError("box", f"[{x1:g}, {y1:g}, {x2:g}, {y2:g}] is not a non-empty box inside the "
                               f"{width}x{height} frame (0 <= x1 < x2 <= {width}, 0 <= y1 < y2 <= {height})")
    # Partial pixels count as covered: the crop holds every pixel the box touches.
    return math.floor(x1), math.floor(y1), math.ceil(x2), math.ceil(y2)


def fetch_crop(loader: FrameLoader, video: ToolVideo, t_s: float, box: Sequence[float], *, max_pixels: int,
               family: str | ModelFamily) -> ImageInput:
    """The frame at ``t_s`` at source resolution, cropped to ``box`` (x1, y1, x2, y2 in source
    pixels of the displayed, rotated frame; edges widened outwards to whole pixels), resized
    to between a quarter of ``max_pixels`` and ``max_pixels``, sides multiples of the factor."""
    fam = get_family(family)
    t_s = _number("t_s", t_s)
    _check_time("t_s", t_s, video)
    pixels = _count("max_pixels", max_pixels)
    if pixels < fam.factor**2:
        raise ToolArgumentError("max_pixels", f"must be >= {fam.factor**2} (one {fam.factor}x{fam.factor} "
                               f"patch of {fam.name}), got {pixels}")
    frames, _ = _with_params(loader, frame_params(loader, t_s)).load_video(_path(video))
    frame = frames[0]  # (source_height, source_width, 3): factor 1 leaves the size alone
    left, top, right, bottom = _crop_box(box, frame.shape[0], frame.shape[1])
    region = frame[top:bottom, left:right]
    crop_h, crop_w = region.shape[:2]
    # A zoom magnifies: the crop is scaled to at least a quarter of its budget (and the images' floor).
    floor_pixels = min(pixels, max(loader.image_params.min_pixels, pixels // 4, fam.factor**2))
    try:
        new_h, new_w = smart_resize(crop_h, crop_w, fam.factor, floor_pixels, pixels)
    except ValueError as exc:
        raise ToolArgumentError("box", f"cannot resize a {crop_w}x{crop_h} crop: {exc}") from None
    image = Image.fromarray(np.ascontiguousarray(region))
    if (new_h, new_w) != (crop_h, crop_w):
        image = image.resize((new_w, new_h), Image.Resampling.BICUBIC)
    array = np.ascontiguousarray(np.asarray(image, dtype=np.uint8))
    array.setflags(write=False)
    return ImageInput(array, ImageMetadata(height=new_h, width=new_w, source_height=crop_h, source_width=crop_w,
                                           factor=fam.factor))


# ---- refs: how a trajectory names its tool media without their pixels ------------------------
# The tool kit's layout (rollout/tools/kit.py): flat JSON, the video's path/key/duration and the
# call's resolved arguments.
def video_ref(video: ToolVideo) -> dict[str, Any]:
    return {"video_path": video.path, "video_key": video.key, "duration_s": float(video.duration_s)}


def window_ref(video: ToolVideo, start_s: float, end_s: float, fps: float, *, max_frames: int,
               max_pixels: int | None) -> dict[str, Any]:
    return {"tool": WINDOW_TOOL, **video_ref(video), "start_s": float(start_s), "end_s": float(end_s),
            "fps": float(fps), "max_frames": int(max_frames),
            "max_pixels": None if max_pixels is None else int(max_pixels)}


def crop_ref(video: ToolVideo, t_s: float, box: Sequence[float], *, max_pixels: int) -> dict[str, Any]:
    return {"tool": CROP_TOOL, **video_ref(video), "t_s": float(t_s), "box": [float(v) for v in box],
            "max_pixels": int(max_pixels)}


def ref_video(ref: dict[str, Any]) -> ToolVideo:
    """The :class:`ToolVideo` of a ref (ToolArgumentError naming the entry when malformed)."""
    if not isinstance(ref, dict):
        raise ToolArgumentError("ref", f"a media ref is a JSON object, got {type(ref).__name__}")
    path, key = ref.get("video_path"), ref.get("video_key")
    for name, value in (("video_path", path), ("video_key", key)):
        if value is not None and not isinstance(value, str):
            raise ToolArgumentError(name, f"must be a string or null, got {value!r}")
    return ToolVideo(path=path, key=key, duration_s=_number("duration_s", ref.get("duration_s", 0.0)))


def refetch(source: ToolFrameSource, ref: dict[str, Any]) -> VideoInput | ImageInput:
    """The medium ``ref`` names, fetched again through ``source`` (the same frames)."""
    video = ref_video(ref)
    tool = ref.get("tool")
    try:
        if tool == WINDOW_TOOL:
            return source.window(video, ref["start_s"], ref["end_s"], ref["fps"], max_frames=ref["max_frames"],
                                 max_pixels=ref.get("max_pixels"))
        if tool == CROP_TOOL:
            return source.crop(video, ref["t_s"], tuple(ref["box"]), max_pixels=ref["max_pixels"])
    except KeyError as exc:
        raise ToolArgumentError(str(exc.args[0]), f"missing from the {tool} media ref") from None
    raise ToolArgumentError("tool", f"unknown tool {tool!r} in a media ref (known: {WINDOW_TOOL}, {CROP_TOOL})")
