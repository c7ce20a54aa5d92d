"""``FrameLoader``: frames + metadata for every stage after the offline build.

A load computes the cache key (content hash through the hash index, so an unchanged file
costs a ``stat`` and an index lookup), reads the blob from the store and checks it against
the key. ``load_video(path, clip=(start_s, end_s))`` samples only that window of the video;
the window is part of the parameters, hence of the key. On a miss, an unreachable store (StoreError) or a corrupt blob it decodes the file
on the fly, logs one ``frame_cache_miss`` line, counts it, and (with ``write_back=True``)
stores the result. Both paths return the same arrays and metadata; arrays are read-only in
both, so no caller comes to depend on mutating one of them.

``load_video_key(key)`` / ``load_image_key(key)`` load by cache key alone (a prepared manifest,
data/prepared.py, names every medium's key), so no raw file is needed. The blob's stored
identity must hash to the requested key and its parameters must be this loader's (a manifest
prepared with other frame budgets is refused, never silently served). A missing blob is an
error naming the key and the sample, unless the caller passes the raw path and it is
reachable (a local file, or an ``s3://`` object fetched to a temporary file): then it is
decoded on the fly, as a miss, and counted as ``on_the_fly``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import blake3
import numpy as np

from easyvideor1.cache.blob import blob_metadata, decode_blob
from easyvideor1.cache.key import (
    FORMAT_VERSION,
    CacheKey,
    HashIndex,
    cache_key,
    canonical_params,
    default_hash_index,
    hash_index_at,
)
from easyvideor1.cache.media import build_blob, decode_media
from easyvideor1.cache.stores.base import FrameStore
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.errors import CacheError, CacheMismatchError, MediaError, StoreError
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
    by_key: int = 0  # loads by cache key (load_*_key), hits and on-the-fly decodes alike
    on_the_fly: int = 0  # key loads whose blob was missing, decoded from the raw path

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class BlobUnavailableError(CacheError):
    """A medium asked for by key is not in the store and cannot be decoded from a raw file."""


def identity_key(identity: dict[str, Any]) -> str:
    """The key of a blob identity (``CacheKey.identity()``): key.make_key's formula, for the
    stored identity of a blob built elsewhere (its decoder build need not be this process's)."""
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return blake3.blake3(canonical.encode()).hexdigest()


def stored_key(data: Any, key: str, kind: str, where: str) -> CacheKey:
    """The ``CacheKey`` a blob says it was built for, after checking that it hashes to ``key``.

    Loading by key has no file to hash, so the blob's own identity (content hash, parameters,
    kind, decoder, format) is what the key must be derived from; a blob whose identity does
    not give ``key`` is corrupt (CacheError), one of another kind a CacheMismatchError.
    """
    meta = blob_metadata(data, where)
    try:
        params = json.loads(meta["evr1.params"])
        stored = CacheKey(key, meta["evr1.content_hash"], params, meta["evr1.kind"], meta["evr1.decoder"],
                          int(meta["evr1.format_version"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CacheError(f"{where}: unreadable blob identity ({exc})") from None
    if not isinstance(params, dict):
        raise CacheError(f"{where}: the blob's parameters are not an object")
    if stored.format_version != FORMAT_VERSION:
        raise CacheError(f"{where}: blob format {stored.format_version}, this build reads {FORMAT_VERSION} "
                         "(prepare the data again)")
    if stored.kind != kind:
        raise CacheMismatchError(f"{where}: the blob under this key is a {stored.kind}, not a {kind}")
    if identity_key(stored.identity()) != key:
        raise CacheError(f"{where}: the blob's identity does not hash to its key; the blob is corrupt")
    return stored


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
        self._source: Any = None  # MediaSource for s3:// raw paths, made on first use

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

    def load_video_key(self, key: str, *, sample_id: str | None = None, path: str | os.PathLike | None = None
                       ) -> tuple[np.ndarray, VideoMetadata]:
        """Frames and metadata stored under ``key`` (no raw file needed).

        ``sample_id`` goes into every error. ``path`` (a local file or an ``s3://`` URL) is
        the raw medium to decode on the fly when the blob is missing; without it a missing
        blob raises :class:`BlobUnavailableError`. Raises CacheMismatchError when the blob
        was made with other parameters than this loader's (or the raw file no longer gives
        ``key``).
        """
        frames, metadata = self._load_key(key, "video", sample_id, path)
        assert isinstance(metadata, VideoMetadata)
        return frames, metadata

    def load_image_key(self, key: str, *, sample_id: str | None = None, path: str | os.PathLike | None = None
                       ) -> tuple[np.ndarray, ImageMetadata]:
        """The image stored under ``key``; see :meth:`load_video_key`."""
        array, metadata = self._load_key(key, "image", sample_id, path)
        assert isinstance(metadata, ImageMetadata)
        return array, metadata

    def load_prepared(self, sample: Any, family: str, *, raw_fallback: bool = True
                      ) -> tuple[list[tuple[np.ndarray, VideoMetadata]], list[tuple[np.ndarray, ImageMetadata]]]:
        """Every video and image of a ``PreparedSample`` (data/prepared.py) for ``family``.

        With ``raw_fallback`` the sample's own media paths are the raw files a missing blob
        may be decoded from; without it only the store is read.
        """
        entry = sample.family(family)
        sid = sample.problem_id
        videos = [self.load_video_key(m.key, sample_id=sid, path=raw if raw_fallback else None)
                  for m, raw in zip(entry.videos, sample.sample.videos)]
        images = [self.load_image_key(m.key, sample_id=sid, path=raw if raw_fallback else None)
                  for m, raw in zip(entry.images, sample.sample.images)]
        return videos, images

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
        # One per decoded file (the counts are in stats()): the run's log, not the console.
        event(_log, "frame_cache_miss", logging.DEBUG, path=path, key=key.key, kind=key.kind, reason=reason,
              seconds=round(seconds, 4))
        return frames, metadata

    def _load_key(self, key: str, kind: str, sample_id: str | None, path: str | os.PathLike | None
                  ) -> tuple[np.ndarray, Any]:
        params = self.video_params if kind == "video" else self.image_params
        where = f"sample {sample_id!r} {kind} {key}" if sample_id else f"{kind} {key}"
        absent, reason = False, "no frame store is configured"
        if self.store is not None:
            try:
                found = self.store.get_buffer(key)
            except StoreError as exc:
                self._count(fallbacks_store_error=1)
                event(_log, "frame_store_unavailable", logging.WARNING, key=key, sample=sample_id, error=str(exc))
                found, reason = None, f"the frame store cannot be read ({exc})"
            else:
                absent, reason = found is None, f"not in the frame store {self.store.url}"
            if found is not None:
                try:
                    result = self._decode_keyed(found, key, kind, params, where)
                except CacheMismatchError:
                    raise  # the request is wrong, not the blob: decoding would not help
                except CacheError as exc:
                    self._count(corrupt=1)
                    event(_log, "frame_cache_corrupt", logging.WARNING, key=key, sample=sample_id, error=str(exc))
                    reason = f"the stored blob is corrupt ({exc})"
                else:
                    self._count(hits=1, by_key=1)
                    return result
        if path is None:
            raise BlobUnavailableError(f"{where}: {reason}, and no raw path is configured to decode it from "
                                       "(run `evr1 data prepare` for this data and store)")
        return self._decode_for_key(key, os.fspath(path), params, where, reason, write_back=absent)

    @staticmethod
    def _decode_keyed(data: Any, key: str, kind: str, params: VideoParams | ImageParams, where: str
                      ) -> tuple[np.ndarray, Any]:
        stored = stored_key(data, key, kind, where)
        wanted = canonical_params(params)
        differences = [f"{name}: blob has {stored.params_dict.get(name)!r}, this loader uses {wanted.get(name)!r}"
                       for name in sorted(set(stored.params_dict) | set(wanted))
                       if stored.params_dict.get(name) != wanted.get(name)]
        if differences:
            raise CacheMismatchError(f"{where}: stored with other frame parameters than this loader's ("
                                     + "; ".join(differences) + "): prepare the data again with this run config")
        return decode_blob(data, stored)

    def _decode_for_key(self, key: str, path: str, params: VideoParams | ImageParams, where: str, reason: str,
                        *, write_back: bool) -> tuple[np.ndarray, Any]:
        """The miss path of a key load: decode the raw file, if it still is the keyed content."""
        started = time.perf_counter()
        try:
            with self._media_source().local_copy(path) as local:
                actual = cache_key(local, params, index=self.index)
                if actual.key != key:
                    raise CacheMismatchError(
                        f"{where}: {reason}; its raw file {path} gives key {actual.key} with this loader's "
                        "parameters: the file changed, or the frame budgets or decoder differ from when the "
                        "data was prepared (prepare it again)")
                if self.write_back and write_back and self.store is not None:
                    frames, metadata = self._decode_and_store(local, actual, params)
                else:
                    frames, metadata = decode_media(local, params)
        except MediaError as exc:
            raise BlobUnavailableError(f"{where}: {reason}, and its raw file cannot be used: {exc}") from None
        seconds = time.perf_counter() - started
        self._count(misses=1, on_the_fly=1, by_key=1, decode_seconds=seconds)
        event(_log, "frame_cache_miss", logging.DEBUG, path=path, key=key, kind=actual.kind, reason=reason,
              seconds=round(seconds, 4))
        return frames, metadata

    def _media_source(self) -> Any:
        from easyvideor1.cache.media_source import MediaSource

        with self._lock:
            if self._source is None:
                self._source = MediaSource()
            return self._source

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
