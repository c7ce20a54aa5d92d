"""Where a medium's frames come from, as a small value that travels with a prompt.

A :class:`MediaRef` names a medium by its cache key (a prepared manifest: no raw file is
needed anywhere downstream) or by its raw path (frames from the cache by content key, or
decoded on the fly, counted). Rollout tasks and train items carry refs instead of pixels, so
each process that must run a forward loads its own frames from the frame store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from easyvideor1.cache.loader import FrameLoader
from easyvideor1.data.prepared import prepared_family
from easyvideor1.data.schema import Sample
from easyvideor1.video.metadata import ImageMetadata, VideoMetadata


@dataclass(frozen=True)
class MediaRef:
    kind: str  # "video" | "image"
    path: str | None = None  # the raw medium: the fallback (or the source) of the frames
    key: str | None = None  # the cache key, when the medium was prepared
    clip: tuple[float, float] | None = None

    def load(self, loader: FrameLoader, *, sample_id: str = "") -> tuple[np.ndarray, VideoMetadata | ImageMetadata]:
        if self.key is not None:
            fetch = loader.load_video_key if self.kind == "video" else loader.load_image_key
            return fetch(self.key, sample_id=sample_id, path=self.path)
        if self.path is None:
            raise ValueError(f"sample {sample_id!r}: a {self.kind} reference needs a cache key or a path")
        if self.kind == "video":
            return loader.load_video(self.path, clip=self.clip)
        return loader.load_image(self.path)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "key": self.key,
                "clip": list(self.clip) if self.clip is not None else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MediaRef:
        clip = data.get("clip")
        return cls(str(data["kind"]), data.get("path"), data.get("key"),
                   (float(clip[0]), float(clip[1])) if clip is not None else None)


def media_refs(sample: Sample, family: str) -> tuple[MediaRef, ...]:
    """The refs of ``sample``'s media for a model of ``family``: by cache key when the sample
    comes from a prepared manifest (its raw path kept as the fallback), else by path."""
    prepared = prepared_family(sample, family)
    if prepared is None:
        return (tuple(MediaRef("video", path=p) for p in sample.videos)
                + tuple(MediaRef("image", path=p) for p in sample.images))
    return (tuple(MediaRef("video", path=p, key=m.key) for p, m in zip(sample.videos, prepared.videos, strict=True))
            + tuple(MediaRef("image", path=p, key=m.key) for p, m in zip(sample.images, prepared.images, strict=True)))


def media_metadata(sample: Sample, family: str) -> tuple[list[VideoMetadata], list[ImageMetadata]] | None:
    """The media metadata a prepared sample recorded for ``family`` (None for a plain row)."""
    prepared = prepared_family(sample, family)
    if prepared is None:
        return None
    return [m.metadata for m in prepared.videos], [m.metadata for m in prepared.images]
