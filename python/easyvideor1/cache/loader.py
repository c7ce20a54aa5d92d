"""``FrameLoader``: frames + metadata for every stage after the offline build.

A load computes the cache key (content hash through the hash index, so an unchanged file
costs a ``stat`` and an index lookup), reads the blob from the store and checks it against
the key. ``load_video(path, clip=(start_s, end_s))`` samples only that window of the video;
the window is part of the parameters, hence of the key. On a miss, an unreachable store (StoreError) or a corrupt blob it decodes the file
on the fly, logs one ``frame_cache_miss`` line, counts it, and (with ``write_back=True``)
stores the result. Both paths return the same arrays and metadata; arrays are read-only in
both, so no caller comes to depend on mutating one of them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from easyvideor1.cache.blob import decode_blob
from easyvideor1.cache.key import CacheKey, HashIndex, cache_key, default_hash_index, hash_index_at
from easyvideor1.cache.media import build_blob, decode_media
from easyvideor1.cache.stores.base import FrameStore
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.errors import CacheError, StoreError
from easyvideor1.logging import event, get_logger
from easyvideor1.video.metadata import ImageMetadata, ImageParams, VideoMetadata, VideoParams

_log = get_logger("cache.loader")


@dataclass
class LoaderCounters:
    hits: int = 0
    misses: int = 0
    fallbacks_store_error: int = 0
    corrupt: int = 0
    write_backs: int = 0
    decode_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def index_for_store(store: FrameStore | None) -> HashIndex:
    """The content-hash index next to a local store, else the per-user default one."""
    if isinstance(store, LocalStore):
        return hash_index_at(store.index_dir)
    return default_hash_index()


class FrameLoader:
    def __init__(self, store: FrameStore | None, video_params: VideoParams | None = None,
                 image_params: ImageParams | None = None, write_back: bool = False, *,
                 index: HashIndex | None = None):
        self.store = store
        self.video_params = video_params or VideoParams()
        self.image_params = image_params or ImageParams()
        self.write_back = write_back
        self.index = index or index_for_store(store)
        self.counters = LoaderCounters()
        self._lock = threading.Lock()

    def load_video(self, path: str | os.PathLike, clip: tuple[float, float] | None = None
                   ) -> tuple[np.ndarray, VideoMetadata]:
        """Frames and metadata of ``path``; with ``clip=(start_s, end_s)`` only from that window.

        A clip is the loader's parameters with the window applied, so it has its own cache
        key (never the whole video's blob). Raises ValueError for a malformed window.
        """
        frames, metadata = self._load(os.fspath(path), self.clip_params(clip))
        assert isinstance(metadata, VideoMetadata)
        return frames, metadata

    def clip_params(self, clip: tuple[float, float] | None) -> VideoParams:
        """The video parameters a load with ``clip`` uses (the loader's own when None)."""
        if clip is None:
            return self.video_params
        try:
            start_s, end_s = clip
        except (TypeError, ValueError):
            raise ValueError(f"clip must be (start_s, end_s) in seconds, got {clip!r}") from None
        return self.video_params.with_window(start_s, end_s)

    def load_image(self, path: str | os.PathLike) -> tuple[np.ndarray, ImageMetadata]:
        array, metadata = self._load(os.fspath(path), self.image_params)
        assert isinstance(metadata, ImageMetadata)
        return array, metadata

    def key_for(self, path: str | os.PathLike, params: VideoParams | ImageParams) -> CacheKey:
        return cache_key(path, params, index=self.index)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return self.counters.as_dict()

    def _count(self, **increments: float) -> None:
        with self._lock:
            for name, amount in increments.items():
                setattr(self.counters, name, getattr(self.counters, name) + amount)

    def _load(self, path: str, params: VideoParams | ImageParams) -> tuple[np.ndarray, Any]:
        key = self.key_for(path, params)
        reason = "no store"
        store_usable = self.store is not None
        if self.store is not None:
            try:
                found = self.store.get_buffer(key.key)
            except StoreError as exc:
                self._count(fallbacks_store_error=1)
                event(_log, "frame_store_unavailable", logging.WARNING, path=path, key=key.key, error=str(exc))
                found, store_usable, reason = None, False, "store error"
            if found is not None:
                try:
                    result = decode_blob(found, key)
                except CacheError as exc:
                    self._count(corrupt=1)
                    event(_log, "frame_cache_corrupt", logging.WARNING, path=path, key=key.key, error=str(exc))
                    reason = "corrupt blob"
                else:
                    self._count(hits=1)
                    return result
            elif store_usable:
                reason = "not in store"
        started = time.perf_counter()
        if self.write_back and store_usable and reason == "not in store":
            frames, metadata = self._decode_and_store(path, key, params)
        else:
            frames, metadata = decode_media(path, params)
        seconds = time.perf_counter() - started
        self._count(misses=1, decode_seconds=seconds)
        event(_log, "frame_cache_miss", path=path, key=key.key, kind=key.kind, reason=reason,
              seconds=round(seconds, 4))
        return frames, metadata

    def _decode_and_store(self, path: str, key: CacheKey, params: VideoParams | ImageParams
                          ) -> tuple[np.ndarray, Any]:
        """Decode, store, return; concurrent callers for the same key share one decode."""
        assert self.store is not None
        decoded: dict[str, Any] = {}

        def build() -> bytes:
            blob, frames, metadata = build_blob(path, key, params, index=self.index)
            decoded["result"] = (frames, metadata)
            return blob

        try:
            data, built = self.store.get_or_build(key.key, build)
        except StoreError as exc:
            self._count(fallbacks_store_error=1)
            event(_log, "frame_store_write_failed", logging.WARNING, path=path, key=key.key, error=str(exc))
            return decoded["result"] if "result" in decoded else decode_media(path, params)
        if built:
            self._count(write_backs=1)
        if "result" in decoded:
            return decoded["result"]
        return decode_blob(data, key)
