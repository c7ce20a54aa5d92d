"""Data files (and prepared manifests) as ``s3://bucket/key`` objects.

On a cluster there is no file system shared by the prepare Job, the trainer's Ray pods and
an eval Job, but they all reach the frame store's S3 endpoint. So a data file may be an
object: read by fetching it to a local temporary file, written (``evr1 data prepare --out
s3://...``) by writing locally and uploading. The client is the one raw media use
(cache/media_source.py, built on the S3 frame store: ``EVR1_S3_ENDPOINT``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``), so whatever reaches a store reaches its
data files with the same settings.

Relative media paths of a fetched data file are relative to the object's "folder", its key
prefix: ``clips/a.mp4`` in ``s3://b/data/train.jsonl`` is ``s3://b/data/clips/a.mp4``.
Every failure is a :class:`RemoteFileError` naming the URL and what is wrong (no such
object, no such bucket, no credentials, access denied, endpoint unreachable).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import urllib3
from minio.error import MinioException, S3Error

from easyvideor1.cache.media_source import MediaSource, is_remote, split_s3_url
from easyvideor1.errors import MediaMissingError, StoreError

_MISSING_OBJECT = {"NoSuchKey", "NoSuchObject"}
_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}


class RemoteFileError(StoreError):
    """An ``s3://`` data file that cannot be read or written: ``url`` and ``reason``."""

    def __init__(self, url: str, reason: str):
        self.url, self.reason = url, reason
        super().__init__(f"{url}: {reason}")


class MissingObjectError(RemoteFileError):
    """The bucket is there, the object is not."""


class MissingBucketError(RemoteFileError):
    """The bucket is not there."""


def split_url(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b.jsonl`` -> ``("bucket", "a/b.jsonl")``; RemoteFileError when malformed."""
    try:
        return split_s3_url(url)
    except MediaMissingError as exc:
        raise RemoteFileError(url, exc.reason) from None


def object_url(bucket: str, key: str) -> str:
    # split_s3_url unquotes the path and urlsplit cuts at '?' and '#': escape just those, so
    # the URL reads like the key and still maps back to it.
    return f"s3://{bucket}/" + key.replace("%", "%25").replace("?", "%3F").replace("#", "%23")


def folder_of(url: str) -> tuple[str, str]:
    """``(bucket, key prefix)`` relative media paths of the object ``url`` resolve against."""
    bucket, key = split_url(url)
    return bucket, posixpath.dirname(key)


def resolve_relative(bucket: str, prefix: str, path: str) -> str | None:
    """The ``s3://`` URL of ``path`` (relative, normalised) under ``prefix``; None when it
    climbs out of the bucket (``..`` past its root)."""
    key = posixpath.normpath(posixpath.join(prefix, path))
    if key == ".." or key.startswith("../") or key in (".", ""):
        return None
    return object_url(bucket, key)


def parse_prefix(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` or ``s3://bucket/a/b`` or ``s3://bucket`` -> ``("bucket", "a/b")``."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    if parts.scheme.lower() != "s3" or not parts.netloc:
        raise RemoteFileError(url, "expected s3://bucket/prefix")
    return parts.netloc, unquote(parts.path).strip("/")


@contextlib.contextmanager
def _client(url: str) -> Iterator[tuple[MediaSource, Any, str, str, str]]:
    """``(source, minio client, bucket, key, endpoint)``: a media source for one call (data
    files are read a few times per run, nothing is worth keeping open) and its client."""
    with MediaSource() as source:
        try:
            # MediaSource builds the S3 frame store's client (endpoint, credentials, timeouts,
            # retries); data files use it as it is instead of a third construction.
            client, bucket, key, where = source._client(url)
        except MediaMissingError as exc:
            raise RemoteFileError(url, exc.reason) from None
        yield source, client, bucket, key, where


def _error(url: str, action: str, exc: Exception, where: str, bucket: str, client: Any = None) -> RemoteFileError:
    if isinstance(exc, S3Error):
        if exc.code in _MISSING_OBJECT:
            # A HEAD has no body, so S3 (and minio) say NoSuchKey for a missing bucket too.
            with contextlib.suppress(Exception):
                if client is not None and not client.bucket_exists(bucket):
                    return MissingBucketError(url, f"the bucket {bucket!r} does not exist (at {where})")
            return MissingObjectError(url, f"no such object (at {where})")
        if exc.code == "NoSuchBucket":
            return MissingBucketError(url, f"the bucket {bucket!r} does not exist (at {where})")
        if exc.code in _DENIED:
            return RemoteFileError(url, f"{action} was refused at {where}: {exc.code}: {exc.message} (check "
                                        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
        return RemoteFileError(url, f"{action} failed at {where}: {exc.code}: {exc.message}")
    if isinstance(exc, (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError)):
        return RemoteFileError(url, f"{action} failed, cannot reach {where} (EVR1_S3_ENDPOINT): "
                                    f"{type(exc).__name__}: {exc}")
    raise exc


def stat(url: str) -> tuple[int, str] | None:
    """``(size, etag)`` of the object, None when the bucket exists and the object does not."""
    with _client(url) as (_, client, bucket, key, where):
        try:
            info = client.stat_object(bucket, key)
        except Exception as exc:  # noqa: BLE001 - mapped to one typed error
            error = _error(url, "checking", exc, where, bucket, client)
            if isinstance(error, MissingObjectError):
                return None
            raise error from None
    return int(info.size or 0), str(info.etag or "")


def fetch(url: str, directory: str | os.PathLike | None = None) -> Path:
    """Download the object to a new temporary file in ``directory``; the caller deletes it."""
    with _client(url) as (source, client, bucket, key, where):
        # A HEAD first: S3 says precisely whether the object or the bucket is missing.
        try:
            client.stat_object(bucket, key)
        except Exception as exc:  # noqa: BLE001
            raise _error(url, "checking", exc, where, bucket, client) from None
        try:
            return source.fetch(url, directory)
        except MediaMissingError as exc:
            raise RemoteFileError(url, exc.reason) from None


def read_bytes(url: str, directory: str | os.PathLike | None = None) -> bytes:
    """The object's content, through one temporary file that is deleted at once."""
    local = fetch(url, directory)
    try:
        return local.read_bytes()
    finally:
        local.unlink(missing_ok=True)


def upload(local: str | os.PathLike, url: str, *, content_type: str = "application/x-ndjson") -> None:
    """Put the file at ``url`` (one atomic PUT per object: a reader never sees half of it).
    The bucket is created when missing, as the frame store creates its own."""
    with _client(url) as (_, client, bucket, key, where):
        try:
            if not client.bucket_exists(bucket):
                with contextlib.suppress(S3Error):  # another writer made it meanwhile
                    client.make_bucket(bucket)
            client.fput_object(bucket, key, str(local), content_type=content_type)
        except Exception as exc:  # noqa: BLE001
            raise _error(url, "uploading", exc, where, bucket) from None


def list_data_files(url: str) -> list[str]:
    """The ``.json``/``.jsonl`` objects directly under the prefix ``url`` (a "folder"), sorted."""
    bucket, prefix = parse_prefix(url)
    probe = object_url(bucket, f"{prefix}/.probe" if prefix else ".probe")  # any key: only the client matters
    with _client(probe) as (_, client, _, _, where):
        try:
            names = [obj.object_name for obj in client.list_objects(bucket, prefix=f"{prefix}/" if prefix else None)
                     if not obj.is_dir]
        except Exception as exc:  # noqa: BLE001
            raise _error(url, "listing", exc, where, bucket) from None
    return sorted(object_url(bucket, n) for n in names if posixpath.splitext(n)[1] in (".json", ".jsonl"))


__all__ = ["MissingBucketError", "MissingObjectError", "RemoteFileError", "fetch", "folder_of", "is_remote", "list_data_files",
           "object_url", "parse_prefix", "read_bytes", "resolve_relative", "split_url", "stat", "upload"]
