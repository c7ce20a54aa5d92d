"""The ``FrameStore`` interface and ``open_store(url)``.

A store maps a cache key (64 hex chars) to an immutable blob. Every implementation makes a
``put`` atomic (a reader sees the whole old blob, the whole new one, or nothing) and
``get_or_build`` runs the builder once per key within a process (in-flight
de-duplication); stores that can also coordinate processes do so in ``_build_lock``.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from easyvideor1.errors import StoreError

_KEY = re.compile(r"^[0-9a-f]{16,128}$")
BLOB_SUFFIX = ".safetensors"
T = TypeVar("T")


@dataclass(frozen=True)
class StoreStats:
    count: int
    bytes: int
    url: str

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "bytes": self.bytes, "url": self.url}


def check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY.match(key):
        raise StoreError(f"invalid cache key {key!r}: expected lowercase hex")
    return key


def shard_name(key: str) -> str:
    """``ab/abcdef....safetensors``: 256 shards keep directories and listings small."""
    return f"{key[:2]}/{key}{BLOB_SUFFIX}"


class FrameStore(ABC):
    """Key -> blob bytes. Implementations: ``LocalStore`` (directory), ``S3Store`` (S3/MinIO)."""

    url: str

    def __init__(self) -> None:
        self._inflight: dict[str, Future] = {}
        self._inflight_lock = threading.Lock()

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The blob, or None when absent. Raises StoreError when the store cannot answer."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically (replacing any previous blob)."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def delete(self, key: str) -> bool:
        """Remove the blob; True when there was one."""

    @abstractmethod
    def keys(self) -> Iterator[str]: ...

    @abstractmethod
    def stats(self) -> StoreStats: ...

    def get_buffer(self, key: str) -> Any | None:
        """Like ``get`` but may return a zero-copy buffer (an mmap for the local store)."""
        return self.get(key)

    def read_head(self, key: str) -> bytes | None:
        """At least the blob's header (for reports); the whole blob unless a store does better."""
        return self.get(key)

    def close(self) -> None:  # noqa: B027 - stores without connections have nothing to release
        """Release connections; the store is not used afterwards."""

    @contextlib.contextmanager
    def _build_lock(self, key: str) -> Iterator[None]:
        """Cross-process exclusion while building ``key``; none unless a store provides it."""
        yield

    def _single_flight(self, key: str, work: Callable[[], T]) -> tuple[T, bool]:
        """Run ``work`` once for concurrent callers of the same key: ``(result, ran_here)``.

        Callers arriving while it runs wait for that run and get its result (or exception).
        """
        with self._inflight_lock:
            pending = self._inflight.get(key)
            owner = pending is None
            if owner:
                pending = self._inflight[key] = Future()
        if not owner:
            return pending.result(), False
        try:
            result = work()
            pending.set_result(result)
            return result, True
        except BaseException as exc:
            pending.set_exception(exc)
            raise
        finally:
            with self._inflight_lock:
                self._inflight.pop(key, None)

    def get_or_build(self, key: str, build: Callable[[], bytes]) -> tuple[Any, bool]:
        """``(blob, built_here)``: the stored blob, or ``build()``'s result after storing it.

        ``build`` runs at most once per key at a time in this process (and, for stores with a
        build lock, across processes); the other callers get the same blob.
        """
        check_key(key)
        found = self.get_buffer(key)
        if found is not None:
            return found, False

        def work() -> tuple[Any, bool]:
            with self._build_lock(key):
                again = self.get_buffer(key)  # another process may have finished meanwhile
                if again is not None:
                    return again, False
                data = build()
                self.put(key, data)
                return data, True

        (data, built), ran_here = self._single_flight(key, work)
        return data, built and ran_here

    def ensure(self, key: str, build: Callable[[], bytes]) -> tuple[bool, int]:
        """Make sure ``key`` is stored without downloading it: ``(built_here, bytes_written)``."""
        check_key(key)
        if self.exists(key):
            return False, 0

        def work() -> tuple[bool, int]:
            with self._build_lock(key):
                if self.exists(key):
                    return False, 0
                data = build()
                self.put(key, data)
                return True, len(data)

        (built, written), ran_here = self._single_flight(key, work)
        return (built, written) if ran_here else (False, 0)

    def __enter__(self) -> FrameStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(url: str, *, create: bool = True, **options: Any) -> FrameStore:
    """A store from a URL: ``file:///abs/dir`` or a plain path, ``s3://bucket/prefix``, or
    ``http(s)://host:port`` (the frame-cache service, stores/http.py).

    S3 options come from keyword arguments, else the URL query (``?endpoint=...&secure=false``),
    else the environment (EVR1_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
    ``create=False`` opens an existing store only (no directory or bucket is created).
    """
    if not isinstance(url, str) or not url:
        raise StoreError(f"invalid store URL {url!r}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "s3":
        from easyvideor1.cache.stores.s3 import S3Store

        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        merged = {"create_bucket": create, **query, **options}
        if not parts.netloc:
            raise StoreError(f"store URL {url!r} has no bucket (expected s3://bucket/prefix)")
        return _construct(S3Store, url, parts.netloc, parts.path.strip("/"), **merged)
    if scheme in ("http", "https"):  # the frame-cache service
        from easyvideor1.cache.stores.http import HttpFrameStore

        return HttpFrameStore(url, **options)
    if scheme in ("", "file"):
        from easyvideor1.cache.stores.local import LocalStore

        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise StoreError(f"store URL {url!r}: file URLs must be local (file:///abs/dir)")
            return _construct(LocalStore, url, parts.path, create=create, **options)
        return _construct(LocalStore, url, url, create=create, **options)
    raise StoreError(f"unsupported store URL scheme {scheme!r} in {url!r} (use a path, file://, s3:// or http(s)://)")


def _construct(cls: type, url: str, *args: Any, **options: Any) -> FrameStore:
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise StoreError(f"store URL {url!r}: unknown option(s) {unknown}; {cls.__name__} accepts "
                         f"{sorted(accepted - {'bucket', 'prefix', 'root'})}")
    return cls(*args, **options)
