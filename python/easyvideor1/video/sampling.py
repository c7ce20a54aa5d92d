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
"""

from __future__ import annotations

import math

from easyvideor1.video.metadata import VideoParams

# The processors refuse sizes more elongated than this (the patch grid degenerates).
MAX_ASPECT_RATIO = 200


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
