"""Sampling/resizing parameters and the metadata that travels with every frame tensor.

``VideoParams``/``ImageParams`` are part of the cache key: any change gives a new key.
``VideoMetadata`` records what was actually sampled so that rollout, reference, actor and
evaluation all see identical frames, token counts and timestamps.

A ``VideoParams`` may carry a clip window (``start_s``/``end_s``, seconds in the source
video): frames are then sampled inside it only, while indices and timestamps stay those of
the source video.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

# Qwen2-VL / Qwen2.5-VL: patch 14 x merge 2; Qwen3-VL / Qwen3.5: patch 16 x merge 2.
FACTOR_QWEN2 = 28
FACTOR_QWEN3 = 32


@dataclass(frozen=True)
class VideoParams:
    """How a video is turned into frames. Defaults follow the paper's recipe."""

    fps: float = 2.0
    min_frames: int = 4
    max_frames: int = 128
    min_pixels: int = 128 * 28 * 28
    max_pixels: int = 262144
    factor: int = FACTOR_QWEN2
    temporal_patch_size: int = 2
    # Hard caps against hostile input: refuse rather than allocate unbounded memory.
    max_source_pixels: int = 8192 * 8192
    max_duration_s: float = 6 * 3600.0
    # Clip window in seconds of the source video; None: from its start / to its end.
    start_s: float | None = None
    end_s: float | None = None

    def __post_init__(self) -> None:
        _check_positive(self, ("fps", "min_frames", "max_frames", "min_pixels", "max_pixels", "factor",
                               "temporal_patch_size"))
        if self.min_frames > self.max_frames:
            raise ValueError(f"min_frames ({self.min_frames}) > max_frames ({self.max_frames})")
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) > max_pixels ({self.max_pixels})")
        for name in _WINDOW_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                    or value < 0:
                raise ValueError(f"VideoParams.{name} must be a finite number of seconds >= 0 (None: "
                                 f"{'the video start' if name == 'start_s' else 'the video end'}), got {value!r}")
            # Coerced here so that 1 and 1.0 give one cache key (the key does not coerce Optionals).
            object.__setattr__(self, name, float(value))
        if self.end_s is not None and not (self.start_s or 0.0) < self.end_s:
            raise ValueError(f"VideoParams clip window [{self.start_s or 0.0:g}, {self.end_s:g}] s is empty: "
                             f"start_s must be < end_s")

    @property
    def has_window(self) -> bool:
        return self.start_s is not None or self.end_s is not None

    def with_window(self, start_s: float | None, end_s: float | None) -> VideoParams:
        """These parameters restricted to ``[start_s, end_s]`` (seconds of the source video)."""
        return dataclasses.replace(self, start_s=start_s, end_s=end_s)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        # An unset window is left out, so whole-video parameters serialize (and key the
        # cache) exactly as before windows existed: existing caches stay valid.
        for name in _WINDOW_FIELDS:
            if d[name] is None:
                del d[name]
        return d


_WINDOW_FIELDS = ("start_s", "end_s")


@dataclass(frozen=True)
class ImageParams:
    """How an image is resized; its budget is independent of the video budget."""

    min_pixels: int = 4 * 28 * 28
    max_pixels: int = 1048576
    factor: int = FACTOR_QWEN2
    max_source_pixels: int = 16384 * 16384

    def __post_init__(self) -> None:
        _check_positive(self, ("min_pixels", "max_pixels", "factor"))
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) > max_pixels ({self.max_pixels})")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class VideoMetadata:
    """What was sampled from a video and how it was resized.

    ``frame_indices`` are indices into the decoded source frame sequence (presentation
    order); ``timestamps`` are their presentation times in seconds from the stream start.
    Both stay absolute for a clip: ``clip`` is then the window the frames were sampled
    from, ``(start_s, end_s)`` in source seconds with ``end_s`` clamped to the video's end;
    ``total_frames`` and ``duration`` always describe the whole source video.
    """

    source_fps: float
    total_frames: int
    duration: float
    frame_indices: tuple[int, ...]
    timestamps: tuple[float, ...]
    height: int
    width: int
    source_height: int
    source_width: int
    factor: int
    decoder: str
    rotation: int = 0
    clip: tuple[float, float] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def num_frames(self) -> int:
        return len(self.frame_indices)

    @property
    def sample_fps(self) -> float:
        """Effective sampling rate, as the model sees it (frames per second of video)."""
        span = self.clip[1] - self.clip[0] if self.clip is not None else self.duration
        if self.num_frames < 2 or span <= 0:
            return self.source_fps
        return self.num_frames / span

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["frame_indices"] = list(self.frame_indices)
        d["timestamps"] = list(self.timestamps)
        # Left out for a whole video: its cached metadata stays byte-identical to older blobs.
        if self.clip is None:
            del d["clip"]
        else:
            d["clip"] = list(self.clip)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VideoMetadata:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown VideoMetadata fields: {sorted(unknown)}")
        d = dict(d)
        d["frame_indices"] = tuple(int(i) for i in d["frame_indices"])
        d["timestamps"] = tuple(float(t) for t in d["timestamps"])
        if d.get("clip") is not None:
            start, end = d["clip"]
            d["clip"] = (float(start), float(end))
        return cls(**d)

    def processor_metadata(self) -> dict[str, Any]:
        """The dict that HF video processors and vLLM accept as video metadata.

        Frames are already sampled and resized: consumers must pass
        ``do_sample_frames=False`` (and ``do_resize=False``) alongside it.
        """
        return {
            "fps": self.source_fps,
            "duration": self.duration,
            "total_num_frames": self.total_frames,
            "frames_indices": list(self.frame_indices),
            "width": self.width,
            "height": self.height,
            "video_backend": "pyav",
            "do_sample_frames": False,
        }


@dataclass(frozen=True)
class ImageMetadata:
    height: int
    width: int
    source_height: int
    source_width: int
    factor: int

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ImageMetadata:
        return cls(**{k: int(v) for k, v in d.items()})


def _check_positive(obj: Any, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(obj, name)
        if not value > 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be > 0, got {value!r}")
