"""A frame store in an S3 bucket (AWS S3, MinIO, SeaweedFS) through the ``minio`` SDK.

Objects are ``<prefix>/ab/<key>.safetensors``. An S3 PUT is atomic per object, so readers
never see a torn blob; blobs above ``part_size`` go up as a multipart upload. The bucket
is created on the first write when missing. ``put_if_absent`` is a conditional PutObject
(``If-None-Match: *``): first write wins, atomically, at the server. Every failure is a StoreError naming the
endpoint, bucket and object; requests time out and retry a bounded number of times, so an
unreachable endpoint fails in seconds instead of hanging.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import urllib3
from minio import Minio
from minio.error import MinioException, S3Error

from easyvideor1.cache.stores.base import BLOB_SUFFIX, FrameStore, StoreStats, check_key, shard_name
from easyvideor1.errors import StoreError

DEFAULT_PART_SIZE = 16 << 20
_MIN_PART_SIZE = 5 << 20  # the S3 minimum for all parts but the last
_MAX_SINGLE_PUT = 5 << 30  # the S3 maximum of one PutObject
_MISSING = {"NoSuchKey", "NoSuchBucket", "NoSuchObject"}
_TRUE = {"1", "true", "yes", "on"}


class S3Store(FrameStore):
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
        secure: bool | str | None = None,
        region: str | None = None,
        part_size: int | str = DEFAULT_PART_SIZE,
        create_bucket: bool | str = True,
        timeout: float | str = 30.0,
        retries: int | str = 2,
    ):
        super().__init__()
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        endpoint = endpoint or os.environ.get("EVR1_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL") \
            or "https://s3.amazonaws.com"
        self.endpoint, default_secure = _split_endpoint(endpoint)
        self.secure = default_secure if secure is None else _flag(secure)
        self.part_size = max(_MIN_PART_SIZE, int(part_size))
        self._create_bucket = _flag(create_bucket)
        self._bucket_ready = False
        self._bucket_lock = threading.Lock()
        access_key = access_key or os.environ.get("AWS_ACCESS_KEY_ID")
        secret_key = secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
        if not access_key or not secret_key:
            raise StoreError(f"S3 store s3://{bucket}/{self.prefix} at {self.endpoint}: no credentials "
                             f"(set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or pass access_key/secret_key)")
        scheme = "https" if self.secure else "http"
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._where = f"{self.url} at {scheme}://{self.endpoint}"
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=min(5.0, float(timeout)), read=float(timeout)),
            retries=urllib3.Retry(total=int(retries), backoff_factor=0.2, status_forcelist=(500, 502, 503, 504)),
            maxsize=16,
        )
        self._http = http
        self._client = Minio(self.endpoint, access_key=access_key, secret_key=secret_key,
                             session_token=session_token or os.environ.get("AWS_SESSION_TOKEN"),
                             secure=self.secure,
                             region=region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
                             http_client=http)

    def object_name(self, key: str) -> str:
        name = shard_name(check_key(key))
        return f"{self.prefix}/{name}" if self.prefix else name

    def _error(self, action: str, exc: Exception, name: str | None = None) -> StoreError:
        target = f"object {name}" if name else f"bucket {self.bucket}"
        if isinstance(exc, S3Error):
            reason = f"{exc.code}: {exc.message}"
        else:
            reason = f"{type(exc).__name__}: {exc}"
        return StoreError(f"S3 store {self._where}: {action} {target} failed: {reason}")

    def _ensure_bucket(self) -> None:
        if self._bucket_ready:
            return
        with self._bucket_lock:
            if self._bucket_ready:
                return
            try:
                if not self._client.bucket_exists(self.bucket):
                    if not self._create_bucket:
                        raise StoreError(f"S3 store {self._where}: bucket {self.bucket} does not exist")
                    try:
                        self._client.make_bucket(self.bucket)
                    except S3Error as exc:
                        if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                            raise
            except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                raise self._error("creating", exc) from None
            self._bucket_ready = True

    def get(self, key: str) -> bytes | None:
        return self._read(self.object_name(key))

    def read_head(self, key: str, size: int = 1 << 16) -> bytes | None:
        name = self.object_name(key)
        head = self._read(name, length=size)
        if head is not None and len(head) >= 8:
            needed = 8 + int.from_bytes(head[:8], "little")
            if len(head) < needed < (100 << 20):
                head = self._read(name, length=needed)
        return head

    def _read(self, name: str, length: int = 0) -> bytes | None:
        response = None
        try:
            response = self._client.get_object(self.bucket, name, offset=0, length=length)
            return response.read()
        except S3Error as exc:
            if exc.code in _MISSING:
                return None
            if exc.code == "InvalidRange":  # an empty object asked for a range
                return b""
            raise self._error("reading", exc, name) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise self._error("reading", exc, name) from None
        finally:
            if response is not None:
                response.close()
                response.release_conn()

    def put(self, key: str, data: bytes) -> None:
        name = self.object_name(key)
        self._ensure_bucket()
        try:
            self._client.put_object(self.bucket, name, io.BytesIO(data), len(data),
                                    part_size=self.part_size)
        except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise self._error("writing", exc, name) from None

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store ``data`` only if no object of ``key`` exists: True when stored, False when one
        was already there (nothing written).

        One conditional PutObject with ``If-None-Match: *``: the server refuses it (412
        PreconditionFailed) when the object exists, so of two concurrent writers exactly one
        creates it. AWS S3, MinIO and SeaweedFS (checked against 4.x) honour the header; a
        server that ignored it would make this a plain put. One request, so at most 5 GiB.
        """
        name = self.object_name(key)
        if len(data) > _MAX_SINGLE_PUT:
            raise StoreError(f"S3 store {self._where}: a conditional put of object {name} is one request, "
                             f"at most {_MAX_SINGLE_PUT} bytes; this blob has {len(data)}")
        self._ensure_bucket()
        try:
            self._client._put_object(self.bucket, name, bytes(data),
                                     headers={"If-None-Match": "*", "Content-Type": "application/octet-stream"})
            return True
        except S3Error as exc:
            if exc.code in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise self._error("writing", exc, name) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise self._error("writing", exc, name) from None

    def exists(self, key: str) -> bool:
        name = self.object_name(key)
        try:
            self._client.stat_object(self.bucket, name)
            return True
        except S3Error as exc:
            if exc.code in _MISSING:
                return False
            raise self._error("checking", exc, name) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise self._error("checking", exc, name) from None

    def etag(self, key: str) -> str | None:
        """The object's ETag (``<md5>-<parts>`` for a multipart upload), None when absent."""
        name = self.object_name(key)
        try:
            return self._client.stat_object(self.bucket, name).etag
        except S3Error as exc:
            if exc.code in _MISSING:
                return None
            raise self._error("checking", exc, name) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise self._error("checking", exc, name) from None

    def delete(self, key: str) -> bool:
        if not self.exists(key):
            return False
        name = self.object_name(key)
        try:
            self._client.remove_object(self.bucket, name)
            return True
        except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise self._error("deleting", exc, name) from None

    def _entries(self) -> Iterator[tuple[str, int]]:
        listing_prefix = f"{self.prefix}/" if self.prefix else None
        try:
            for obj in self._client.list_objects(self.bucket, prefix=listing_prefix, recursive=True):
                base = obj.object_name.rsplit("/", 1)[-1]
                if base.endswith(BLOB_SUFFIX):
                    yield base[: -len(BLOB_SUFFIX)], int(obj.size or 0)
        except S3Error as exc:
            if exc.code == "NoSuchBucket":
                return
            raise self._error("listing", exc) from None
        except (MinioException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise self._error("listing", exc) from None

    def keys(self) -> Iterator[str]:
        for key, _size in self._entries():
            yield key

    def stats(self) -> StoreStats:
        count = total = 0
        for _key, size in self._entries():
            count += 1
            total += size
        return StoreStats(count, total, self.url)

    def close(self) -> None:
        self._http.clear()


def _split_endpoint(endpoint: str) -> tuple[str, bool]:
    """``http://host:port`` -> (``host:port``, secure=False); a bare ``host:port`` is https."""
    if "://" in endpoint:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise StoreError(f"invalid S3 endpoint {endpoint!r} (expected http(s)://host:port)")
        return parts.netloc, parts.scheme == "https"
    return endpoint.strip("/"), True


def _flag(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in _TRUE
