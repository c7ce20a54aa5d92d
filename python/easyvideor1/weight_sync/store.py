"""Object stores for versioned weights (used by :mod:`easyvideor1.weight_sync.publish`).

``open_objects(url)``: ``s3://bucket/prefix`` through the ``minio`` SDK (options, else the URL
query, else EVR1_S3_ENDPOINT / AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), or a local directory
(``file:///dir`` or a path). Objects are named ``v00000007/model.safetensors`` and so on.
Local commits are temporary name + fsync + rename; an S3 PUT or multipart upload is invisible
until complete, so it is atomic by itself. Every failure is a WeightSyncError naming the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from easyvideor1.errors import EasyVideoR1Error

PART_SIZE = 64 << 20  # S3 multipart part size; files above it go up in parts
_VERSION_DIR = re.compile(r"^v(\d{8,})$")
_HASH_CHUNK = 8 << 20


class WeightSyncError(EasyVideoR1Error):
    """A weight version cannot be published, found or loaded; the message says which and why."""


class WeightCorruptError(WeightSyncError):
    """The stored weights do not match their manifest (size or checksum)."""


def version_dir(version: int) -> str:
    return f"v{version:08d}"


def sha256_file(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Objects(ABC):
    """Named objects of one weight store: ``v00000007/model.safetensors`` and so on."""

    root: str  # for URIs and messages

    def uri(self, name: str) -> str:
        return f"{self.root}/{name}"

    @abstractmethod
    def staging(self, version: int) -> Path:
        """A directory for temporary files of ``version`` (same filesystem as the target, if local)."""

    @abstractmethod
    def commit(self, name: str, temp: Path) -> None:
        """Move the finished file ``temp`` to ``name`` atomically (``temp`` is consumed)."""

    @abstractmethod
    def read(self, name: str) -> bytes | None: ...

    @abstractmethod
    def local_copy(self, name: str, directory: Path) -> Path | None:
        """A local file with the object's bytes (the object itself when already local)."""

    @abstractmethod
    def versions(self) -> list[int]: ...

    @abstractmethod
    def delete_version(self, version: int) -> None: ...


class _LocalObjects(_Objects):
    def __init__(self, root: str):
        self.path = Path(os.path.abspath(root))
        self.root = f"file://{self.path}"

    def staging(self, version: int) -> Path:
        directory = self.path / version_dir(version)
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def commit(self, name: str, temp: Path) -> None:
        final = self.path / name
        _fsync(temp)
        os.replace(temp, final)
        _fsync(final.parent)

    def read(self, name: str) -> bytes | None:
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            return None

    def local_copy(self, name: str, directory: Path) -> Path | None:
        path = self.path / name
        return path if path.is_file() else None

    def versions(self) -> list[int]:
        if not self.path.is_dir():
            return []
        return sorted(int(m.group(1)) for e in os.scandir(self.path) if (m := _VERSION_DIR.match(e.name)))

    def delete_version(self, version: int) -> None:
        shutil.rmtree(self.path / version_dir(version), ignore_errors=True)


class _S3Objects(_Objects):
    def __init__(self, bucket: str, prefix: str, *, endpoint: str | None = None, access_key: str | None = None,
                 secret_key: str | None = None, secure: bool | str | None = None, region: str | None = None,
                 timeout: float | str = 60.0, retries: int | str = 2, part_size: int | str = PART_SIZE):
        import urllib3
        from minio import Minio

        endpoint = endpoint or os.environ.get("EVR1_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL") \
            or "https://s3.amazonaws.com"
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise WeightSyncError(f"invalid S3 endpoint {endpoint!r} (expected http(s)://host:port)")
        if secure is None:
            secure = parts.scheme == "https"
        elif not isinstance(secure, bool):
            secure = str(secure).lower() in ("1", "true", "yes", "on")
        access_key = access_key or os.environ.get("AWS_ACCESS_KEY_ID")
        secret_key = secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.root = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._where = f"{self.root} at {parts.scheme}://{parts.netloc}"
        if not access_key or not secret_key:
            raise WeightSyncError(f"weight store {self._where}: no credentials (set AWS_ACCESS_KEY_ID and "
                                  "AWS_SECRET_ACCESS_KEY)")
        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=min(5.0, float(timeout)), read=float(timeout)),
                                   retries=urllib3.Retry(total=int(retries), backoff_factor=0.2,
                                                         status_forcelist=(500, 502, 503, 504)))
        self._client = Minio(parts.netloc, access_key=access_key, secret_key=secret_key, secure=secure,
                             region=region or os.environ.get("AWS_REGION"), http_client=http)
        self._bucket_ready = False
        self.part_size = max(5 << 20, int(part_size))  # S3's minimum for every part but the last

    def _name(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        from minio.error import MinioException
        from urllib3.exceptions import HTTPError

        try:
            yield
        except (MinioException, HTTPError, OSError, ValueError) as exc:
            raise WeightSyncError(f"weight store {self._where}: {action} failed: {type(exc).__name__}: {exc}"
                                  ) from None

    def staging(self, version: int) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"evr1-weights-{version_dir(version)}-"))

    def commit(self, name: str, temp: Path) -> None:
        try:
            with self._errors(f"uploading {name}"):
                self._ensure_bucket()
                self._client.fput_object(self.bucket, self._name(name), str(temp), part_size=self.part_size)
        finally:
            temp.unlink(missing_ok=True)

    def _ensure_bucket(self) -> None:
        from minio.error import S3Error

        if self._bucket_ready:
            return
        if not self._client.bucket_exists(self.bucket):
            try:
                self._client.make_bucket(self.bucket)
            except S3Error as exc:  # another publisher created it in between
                if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
        self._bucket_ready = True

    def _missing(self, exc: Exception) -> bool:
        return getattr(exc, "code", None) in ("NoSuchKey", "NoSuchBucket", "NoSuchObject")

    def read(self, name: str) -> bytes | None:
        from minio.error import S3Error

        with self._errors(f"reading {name}"):
            try:
                response = self._client.get_object(self.bucket, self._name(name))
            except S3Error as exc:
                if self._missing(exc):
                    return None
                raise
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()

    def local_copy(self, name: str, directory: Path) -> Path | None:
        from minio.error import S3Error

        target = directory / Path(name).name
        with self._errors(f"downloading {name}"):
            try:
                self._client.fget_object(self.bucket, self._name(name), str(target))
            except S3Error as exc:
                if self._missing(exc):
                    return None
                raise
        return target

    def versions(self) -> list[int]:
        from minio.error import S3Error

        # Objects, not "directories": some servers (SeaweedFS) keep an emptied prefix listed.
        found = set()
        base = self._name("")
        with self._errors("listing versions"):
            try:
                for obj in self._client.list_objects(self.bucket, prefix=base, recursive=True):
                    m = _VERSION_DIR.match(obj.object_name[len(base):].split("/", 1)[0])
                    if m:
                        found.add(int(m.group(1)))
            except S3Error as exc:
                if exc.code != "NoSuchBucket":
                    raise
        return sorted(found)

    def delete_version(self, version: int) -> None:
        with self._errors(f"deleting {version_dir(version)}"):
            for obj in self._client.list_objects(self.bucket, prefix=self._name(version_dir(version) + "/"),
                                                 recursive=True):
                self._client.remove_object(self.bucket, obj.object_name)


def open_objects(store_url: str, **options: Any) -> _Objects:
    """``s3://bucket/prefix`` (options or ``?endpoint=...`` or the environment), ``file:///dir`` or a path."""
    parts = urlsplit(store_url)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise WeightSyncError(f"weight store URL {store_url!r} has no bucket (expected s3://bucket/prefix)")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return _S3Objects(parts.netloc, parts.path, **{**query, **options})
    if parts.scheme == "file":
        return _LocalObjects(parts.path)
    if parts.scheme == "":
        return _LocalObjects(store_url)
    raise WeightSyncError(f"unsupported weight store URL {store_url!r} (use s3://bucket/prefix, file:// or a path)")


def join_store(root: str, prefix: str) -> str:
    """``root`` (a path, file://, or s3://bucket/p?query) with ``prefix`` appended to its path."""
    parts = urlsplit(root)
    if parts.scheme in ("", "file"):
        path = parts.path if parts.scheme else root
        joined = f"{path.rstrip('/')}/{prefix.strip('/')}"
        return f"file://{joined}" if parts.scheme else joined
    path = f"{parts.path.rstrip('/')}/{prefix.strip('/')}"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))
