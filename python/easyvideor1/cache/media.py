"""Decode one media file for a cache key and serialize it: shared by the builder and the loader."""

from __future__ import annotations

import os

import numpy as np

from easyvideor1.cache.blob import encode_blob
from easyvideor1.cache.key import CacheKey, HashIndex, content_hash
from easyvideor1.errors import MediaDecodeError, MediaMissingError
from easyvideor1.video.decode import decode_video
from easyvideor1.video.image import load_image
from easyvideor1.video.metadata import ImageMetadata, ImageParams, VideoMetadata, VideoParams


def decode_media(path: str, params: VideoParams | ImageParams) -> tuple[np.ndarray, VideoMetadata | ImageMetadata]:
    if isinstance(params, VideoParams):
        return decode_video(path, params)
    return load_image(path, params)


def build_blob(path: str, key: CacheKey, params: VideoParams | ImageParams, *, index: HashIndex | None = None
               ) -> tuple[bytes, np.ndarray, VideoMetadata | ImageMetadata]:
    """``(blob, frames, metadata)`` for ``key``, refusing a file that no longer matches the key.

    The key was computed from the file's content earlier (possibly in another process): a
    blob decoded from a file changed since then would be stored under a stale key.
    """
    before = _stat_signature(path)
    if content_hash(path, index=index) != key.content_hash:
        raise MediaDecodeError(path, "the file changed after its cache key was computed")
    frames, metadata = decode_media(path, params)
    if _stat_signature(path) != before:
        raise MediaDecodeError(path, "the file changed while it was being decoded")
    return encode_blob(frames, metadata, key), frames, metadata


def _stat_signature(path: str) -> tuple[int, ...]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise MediaMissingError(path, "no such file") from None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
