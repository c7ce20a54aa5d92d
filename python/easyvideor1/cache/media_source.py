"""Raw media given as ``s3://bucket/key`` URLs: fetched to a local temporary file.

On a cluster the raw videos live in a bucket. Hashing and decoding need a seekable local
file (PyAV seeks; the content hash reads every byte), so a remote medium is streamed to a
temporary file next to the job's other temporaries, used, and deleted. The S3 client and
its settings (``EVR1_S3_ENDPOINT``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, or
keyword options) are those of the S3 frame store (stores/s3.py), so a bucket reachable as a
store is reachable as a media source with the same configuration.

Every failure is a :class:`MediaMissingError` naming the URL and the reason, so callers
treat an unreachable object like a missing file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import urllib3

from easyvideor1.errors import MediaMissingError, StoreError

_CHUNK = 1 << 20
_MISSING = {"NoSuchKey", "NoSuchBucket", "NoSuchObject"}


def is_remote(path: str) -> bool:
    """True for an ``s3://`` media URL (the one remote scheme media may use)."""
    return isinstance(path, str) and path[:5].lower() == "s3://"


def split_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b.mp4`` -> ``("bucket", "a/b.mp4")``; MediaMissingError when malformed."""
    parts = urlsplit(url)
    bucket, key = parts.netloc, unquote(parts.path.lstrip("/"))
    if parts.scheme.lower() != "s3" or not bucket or not key or key.endswith("/"):
        raise MediaMissingError(url, "expected an object URL s3://bucket/key")
    return bucket, key


@dataclass(frozen=True)
class RemoteObject:
    """What a HEAD tells about an object: enough to notice that it changed."""

    url: str
    size: int
    etag: str


class MediaSource:
    """Fetches ``s3://`` media. One client per bucket, shared by threads (minio's is thread-safe)."""

    def __init__(self, **s3_options: Any):
        self._options = s3_options
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _client(self, url: str) -> tuple[Any, str, str, str]:
        """``(minio client, bucket, key, where)`` for ``url``."""
        from easyvideor1.cache.stores.s3 import S3Store

        bucket, key = split_s3_url(url)
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                try:
                    store = S3Store(bucket, create_bucket=False, **self._options)
                except StoreError as exc:
                    raise MediaMissingError(url, f"cannot reach the bucket: {exc}") from None
                self._stores[bucket] = store
        # The store's client carries the endpoint, credentials, timeouts and retries.
        return store._client, bucket, key, f"{'https' if store.secure else 'http'}://{store.endpoint}"

    def stat(self, url: str) -> RemoteObject:
        client, bucket, key, where = self._client(url)
        try:
            info = client.stat_object(bucket, key)
        except Exception as exc:  # noqa: BLE001 - mapped to one typed error below
            raise _fetch_error(url, "checking", exc, where) from None
        return RemoteObject(url, int(info.size or 0), str(info.etag or ""))

    def fetch(self, url: str, directory: str | os.PathLike | None = None) -> Path:
        """Stream the object to a new temporary file in ``directory``; the caller deletes it.

        The file keeps the object's extension (container probing uses it for a few formats).
        """
        client, bucket, key, where = self._client(url)
        suffix = Path(key).suffix[:16]
        fd, name = tempfile.mkstemp(dir=directory, prefix="evr1-media-", suffix=suffix)
        response = None
        try:
            with os.fdopen(fd, "wb") as handle:
                response = client.get_object(bucket, key)
                for chunk in response.stream(_CHUNK):
                    handle.write(chunk)
        except BaseException as exc:
            Path(name).unlink(missing_ok=True)
            if isinstance(exc, Exception):
                raise _fetch_error(url, "fetching", exc, where) from None
            raise
        finally:
            if response is not None:
                response.close()
                response.release_conn()
        return Path(name)

    @contextlib.contextmanager
    def local_copy(self, path: str, directory: str | os.PathLike | None = None) -> Iterator[str]:
        """A local path for ``path``: itself when local, else a temporary copy deleted on exit."""
        if not is_remote(path):
            yield path
            return
        local = self.fetch(path, directory)
        try:
            yield str(local)
        finally:
            local.unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()

    def __enter__(self) -> MediaSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fetch_error(url: str, action: str, exc: Exception, where: str) -> MediaMissingError:
    # Imported here: local media (every GPU benchmark, most pods) never needs the S3 SDK.
    from minio.error import MinioException, S3Error

    if isinstance(exc, S3Error):
        if exc.code in _MISSING:
            return MediaMissingError(url, f"no such object ({exc.code} at {where})")
        return MediaMissingError(url, f"{action} failed at {where}: {exc.code}: {exc.message}")
    if isinstance(exc, (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError)):
        return MediaMissingError(url, f"{action} failed at {where}: {type(exc).__name__}: {exc}")
    raise exc
