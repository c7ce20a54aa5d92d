"""Pure arithmetic of frame sampling and resizing (no decoding here).

Both functions follow the Qwen-VL processors' semantics so that the frames we cache are
exactly the ones the model's processor would have produced itself:

* ``smart_resize``: round each side to a multiple of ``factor``; if the area is outside
  ``[min_pixels, max_pixels]``, scale both sides by the square root of the area ratio,
  flooring (when shrinking) or ceiling (when growing) to the factor.
* ``sample_frame_indices``: ``duration * fps`` frames clamped to ``[min_frames,
  max_frames]`` and rounded down to a whole number of temporal patches, spread evenly over
  the source frames; a video with fewer frames than that keeps every frame and repeats the
  last one up to a whole temporal patch (what the processors do for a single image).
* ``window_frame_range``: the run of frames presented inside a clip window; sampling a clip
  is ``sample_frame_indices`` over that run (the same fps/min/max rules, applied to the
  window's length), offset to source indices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from easyvideor1.video.metadata import VideoParams

# The processors refuse sizes more elongated than this (the patch grid degenerates).
MAX_ASPECT_RATIO = 200
# Presentation times are rationals converted to float: a frame at 0.5 s may read 0.49999999.
WINDOW_EPSILON_S = 1e-6


def _round_to(value: float, factor: int) -> int:
    return round(value / factor) * factor


def _floor_to(value: float, factor: int) -> int:
    return math.floor(value / factor) * factor


def _ceil_to(value: float, factor: int) -> int:
    return math.ceil(value / factor) * factor


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Target ``(height, width)``: multiples of ``factor``, area within the pixel budget.

    Guarantees: both sides are multiples of ``factor`` and at least ``factor``; shrinking
    (floor) never exceeds ``max_pixels`` while the short side stays >= ``factor``; growing
    (ceil) never falls below ``min_pixels``. A budget narrower than one rounding step can
    overshoot the other bound (the processors share this); with ``max_pixels >= 4 *
    min_pixels`` both bounds hold. Raises ``ValueError`` for a non-positive size or an aspect
    ratio above 200.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ValueError(f"aspect ratio {max(height, width) / min(height, width):.1f} of {height}x{width} "
                         f"exceeds {MAX_ASPECT_RATIO}")
    new_h = max(factor, _round_to(height, factor))
    new_w = max(factor, _round_to(width, factor))
    if new_h * new_w > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        new_h = max(factor, _floor_to(height / scale, factor))
        new_w = max(factor, _floor_to(width / scale, factor))
    elif new_h * new_w < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        new_h = _ceil_to(height * scale, factor)
        new_w = _ceil_to(width * scale, factor)
    return new_h, new_w


def target_frame_count(total_frames: int, source_fps: float, params: VideoParams) -> int:
    """How many frames (a whole number of temporal patches) a video of this length gets."""
    patch = params.temporal_patch_size
    wanted = total_frames / source_fps * params.fps if source_fps > 0 else float(params.max_frames)
    wanted = min(max(wanted, params.min_frames), params.max_frames)
    # The epsilon absorbs float error such as 3.9999999 patches meaning 4.
    return max(patch, math.floor(wanted / patch + 1e-9) * patch)


def sample_frame_indices(total_frames: int, source_fps: float, params: VideoParams) -> list[int]:
    """Indices (into the presentation-order frame sequence) of the frames to keep.

    The result always has a multiple of ``params.temporal_patch_size`` entries, is
    non-decreasing, and repeats an index only to pad a video shorter than one patch set.
    """
    if total_frames <= 0:
        raise ValueError(f"total_frames must be > 0, got {total_frames}")
    count = target_frame_count(total_frames, source_fps, params)
    if count <= total_frames:
        if count == 1:
            return [0]
        step = (total_frames - 1) / (count - 1)
        # Round half to even, like numpy/torch linspace(...).round() in the processors.
        return [round(i * step) for i in range(count)]
    patch = params.temporal_patch_size
    padded = math.ceil(total_frames / patch) * patch
    return list(range(total_frames)) + [total_frames - 1] * (padded - total_frames)


def window_frame_range(timestamps: Sequence[float], start_s: float, end_s: float) -> tuple[int, int]:
    """``(first, stop)``: the frames whose presentation time lies in ``[start_s, end_s)``.

    ``timestamps`` are the presentation times of every source frame, in order. A frame at
    exactly ``end_s`` is first shown when the window closes, so it is outside. A window
    shorter than one frame interval may hold no frame start: the frame on screen at
    ``start_s`` (the last one shown at or before it) is then the window's only frame.
    """
    if not timestamps:
        raise ValueError("no frames")
    low, high = start_s - WINDOW_EPSILON_S, end_s - WINDOW_EPSILON_S
    inside = [i for i, t in enumerate(timestamps) if low <= t < high]
    if inside:
        # Timestamps are non-decreasing in presentation order; min/max keeps a run even if not.
        return inside[0], inside[-1] + 1
    shown = [i for i, t in enumerate(timestamps) if t <= start_s + WINDOW_EPSILON_S]
    first = shown[-1] if shown else 0
    return first, first + 1


def sample_window_indices(timestamps: Sequence[float], source_fps: float, params: VideoParams,
                          start_s: float, end_s: float) -> list[int]:
    """Source indices of the frames to keep from the window ``[start_s, end_s)``."""
    first, stop = window_frame_range(timestamps, start_s, end_s)
    return [first + i for i in sample_frame_indices(stop - first, source_fps, params)]
