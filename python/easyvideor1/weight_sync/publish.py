"""Versioned policy weights: the trainer publishes, rollout replicas fetch and reload in place.

Layout under the store (``s3://bucket/prefix`` or a local directory)::

    v00000007/model.safetensors   every tensor of version 7 (dtype as given, or cast)
    v00000007/manifest.json       {"version", "file", "tensors", "bytes", "tensor_bytes",
                                   "sha256", "dtypes", "created_at", "publisher"}

Protocol: ``WeightPublisher.publish(v, state_dict)`` (1) serializes to a temporary file and
hashes it; (2) puts ``model.safetensors`` atomically (local: temporary name in the same
directory, fsync, rename; S3: one PUT or a multipart upload, which no reader can see
before it completes); (3) writes ``manifest.json`` the same way: a version is complete
once its manifest exists; (4) announces ``(v, uri, {sha256, bytes, tensors, manifest})``
on the VersionBoard, which refuses versions that do not increase; (5) deletes all but the
newest ``keep`` versions. ``WeightSubscriber`` reads the board, downloads, verifies size
and sha256 against the manifest and the announcement, and calls
``engine.update_weights(path, version)``.

Staleness: a rollout produced by policy version ``v`` is usable by the trainer at version
``t`` iff ``t - v <= bound`` (:func:`is_stale`); ``bound = 0`` is strictly on-policy.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from easyvideor1.files import share
from easyvideor1.logging import event, get_logger
from easyvideor1.queue import VersionBoard, VersionError, WeightVersion
from easyvideor1.weight_sync.host import unique_tensors
from easyvideor1.weight_sync.store import (
    WeightCorruptError,
    WeightSyncError,
    open_objects,
    sha256_file,
    version_dir,
)

__all__ = ["WeightCorruptError", "WeightPublisher", "WeightSubscriber", "WeightSyncError", "is_stale"]
_log = get_logger(__name__)
MODEL_FILE = "model.safetensors"
MANIFEST_FILE = "manifest.json"
_counter = itertools.count()


def is_stale(result_version: int, current_version: int, bound: int) -> bool:
    """Whether a result made by policy ``result_version`` is too old for trainer version ``current_version``.

    Usable iff ``current_version - result_version <= bound``; ``bound=0`` accepts only the
    current policy (strictly on-policy), ``bound=1`` also the previous one (one-step
    off-policy, the usual asynchronous-rollout setting). A result newer than the trainer
    cannot exist in a correct run and raises ValueError.
    """
    for name, value in (("result_version", result_version), ("current_version", current_version),
                        ("bound", bound)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if result_version > current_version:
        raise ValueError(f"result of policy version {result_version} is newer than the trainer's version "
                         f"{current_version}: versions went backwards (a restarted trainer must resume its count)")
    return current_version - result_version > bound


class WeightPublisher:
    """Trainer side: ``publish(version, state_dict) -> uri``; keeps the newest ``keep`` versions."""

    def __init__(self, store_url: str, board: VersionBoard, *, keep: int = 3, dtype: Any = None,
                 **store_options: Any):
        if not isinstance(keep, int) or keep < 1:
            raise WeightSyncError(f"keep must be an integer >= 1, got {keep!r}")
        self.objects, self.board, self.keep, self.dtype = open_objects(store_url, **store_options), board, keep, dtype

    def publish(self, version: int, state_dict: Mapping[str, Any]) -> str:
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise WeightSyncError(f"weight version must be a non-negative integer, got {version!r}")
        latest = self.board.latest()
        if latest is not None and version <= latest.version:  # refuse before uploading anything
            raise VersionError(f"cannot publish weight version {version}: version {latest.version} is already "
                               "published (versions must increase)")
        started = time.perf_counter()
        from safetensors.torch import save_file

        tensors = unique_tensors(state_dict, drop_prefixes=())  # CPU, contiguous, tied storage cloned
        if self.dtype is not None:
            tensors = {k: t.to(self.dtype) if t.is_floating_point() else t for k, t in tensors.items()}
        if not tensors:
            raise WeightSyncError(f"weight version {version}: the state dict is empty")
        staging = self.objects.staging(version)
        stamp = f"{os.getpid()}-{next(_counter)}"
        model_tmp = staging / f".{MODEL_FILE}.tmp-{stamp}"
        manifest_tmp = staging / f".{MANIFEST_FILE}.tmp-{stamp}"
        name = f"{version_dir(version)}/{MODEL_FILE}"
        try:
            save_file(tensors, str(model_tmp), metadata={"evr1.version": str(version)})
            share(model_tmp)  # 0600 from safetensors: rollout workers of another uid read it from the store
            sha256, size = sha256_file(model_tmp)
            manifest = {"version": version, "file": MODEL_FILE, "format": "safetensors", "tensors": len(tensors),
                        "bytes": size, "tensor_bytes": sum(t.numel() * t.element_size() for t in tensors.values()),
                        "sha256": sha256, "dtypes": sorted({str(t.dtype).removeprefix("torch.")
                                                           for t in tensors.values()}),
                        "created_at": time.time(), "publisher": f"{socket.gethostname()}:{os.getpid()}"}
            self.objects.commit(name, model_tmp)
            manifest_tmp.write_text(json.dumps(manifest, indent=1))
            self.objects.commit(f"{version_dir(version)}/{MANIFEST_FILE}", manifest_tmp)
        finally:
            model_tmp.unlink(missing_ok=True)
            manifest_tmp.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # an S3 scratch directory, or the dir of a failed local publish
                staging.rmdir()
        uri = self.objects.uri(name)
        meta = {"sha256": sha256, "bytes": size, "tensors": len(tensors),
                "manifest": self.objects.uri(f"{version_dir(version)}/{MANIFEST_FILE}")}
        self.board.publish(version, uri, meta)
        removed = self._retain(version)
        event(_log, "weights_published", version=version, uri=uri, bytes=size, tensors=len(tensors),
              removed=removed, seconds=round(time.perf_counter() - started, 3))
        return uri

    def _retain(self, newest: int) -> list[int]:
        """Delete versions older than the newest ``keep`` (a reader mid-download of one gets a clear error)."""
        versions = [v for v in self.objects.versions() if v <= newest]
        doomed = versions[:-self.keep]
        for version in doomed:
            self.objects.delete_version(version)
        return doomed


class WeightSubscriber:
    """Replica side: find, fetch (verified) and load published versions."""

    def __init__(self, store_url: str, board: VersionBoard, **store_options: Any):
        self.objects, self.board = open_objects(store_url, **store_options), board

    def latest_version(self) -> int | None:
        record = self.board.latest()
        return None if record is None else record.version

    def wait_for(self, min_version: int, timeout: float) -> WeightVersion:
        """The board's record once a version >= ``min_version`` exists (VersionTimeoutError otherwise)."""
        return self.board.wait_for(min_version, timeout)

    def manifest(self, version: int) -> dict[str, Any]:
        name = f"{version_dir(version)}/{MANIFEST_FILE}"
        raw = self.objects.read(name)
        if raw is None:
            kept = self.objects.versions()
            raise WeightSyncError(f"weight version {version} not found at {self.objects.uri(version_dir(version))} "
                                  f"(stored versions: {kept[-5:] or 'none'}; old ones are deleted after newer "
                                  "ones are published)")
        try:
            manifest = json.loads(raw)
            manifest["bytes"], manifest["sha256"] = int(manifest["bytes"]), str(manifest["sha256"])
        except (ValueError, KeyError, TypeError) as exc:
            raise WeightCorruptError(f"{self.objects.uri(name)}: unreadable manifest ({exc})") from None
        return manifest

    def _check(self, version: int, manifest: dict[str, Any], sha256: str, size: int) -> None:
        where = self.objects.uri(f"{version_dir(version)}/{MODEL_FILE}")
        if size != int(manifest["bytes"]) or sha256 != manifest["sha256"]:
            raise WeightCorruptError(f"{where}: corrupt weights: {size} bytes with sha256 {sha256}, the manifest "
                                     f"says {manifest['bytes']} bytes with sha256 {manifest['sha256']}")

    def fetch(self, version: int) -> bytes:
        """The verified safetensors bytes of ``version``."""
        manifest = self.manifest(version)
        data = self.objects.read(f"{version_dir(version)}/{MODEL_FILE}")
        if data is None:
            raise WeightSyncError(f"weight version {version}: {MODEL_FILE} is missing beside its manifest")
        self._check(version, manifest, hashlib.sha256(data).hexdigest(), len(data))
        return data

    @contextlib.contextmanager
    def local_file(self, version: int, expected_sha256: str | None = None) -> Iterator[Path]:
        """A verified local file of ``version`` (downloaded to a temporary directory for S3).

        ``expected_sha256`` (the board's announcement) must also match the manifest.
        """
        manifest = self.manifest(version)
        if expected_sha256 is not None and expected_sha256 != manifest["sha256"]:
            raise WeightCorruptError(f"weight version {version}: the manifest's sha256 {manifest['sha256']} is not "
                                     f"the announced {expected_sha256} (overwritten after publishing?)")
        scratch = Path(tempfile.mkdtemp(prefix=f"evr1-weights-{version_dir(version)}-"))
        try:
            path = self.objects.local_copy(f"{version_dir(version)}/{MODEL_FILE}", scratch)
            if path is None:
                raise WeightSyncError(f"weight version {version}: {MODEL_FILE} is missing beside its manifest")
            self._check(version, manifest, *sha256_file(path))
            yield path
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def apply_to(self, engine: Any, min_version: int | None = None, *, timeout: float = 60.0,
                 force: bool = False) -> int:
        """Load the latest version (waiting up to ``timeout`` for one >= ``min_version``) into ``engine``.

        Calls ``engine.update_weights(path, version)`` with a verified local safetensors file
        and returns the version. An engine already at that version is left alone unless
        ``force``. Raises WeightSyncError when nothing is published yet.
        """
        if min_version is None:
            record = self.board.latest()
            if record is None:
                raise WeightSyncError(f"no weight version published yet on board {self.board.board!r} of "
                                      f"namespace {self.board.namespace!r}")
        else:
            record = self.board.wait_for(min_version, timeout)
        version = record.version
        if not force and getattr(engine, "policy_version", None) == version:
            return version
        expected = self.objects.uri(f"{version_dir(version)}/{MODEL_FILE}")
        if record.uri != expected:
            raise WeightSyncError(f"weight version {version} was announced at {record.uri}, but this subscriber "
                                  f"reads {expected}: publisher and subscriber use different stores")
        started = time.perf_counter()
        with self.local_file(version, record.meta.get("sha256")) as path:
            engine.update_weights(str(path), version)
        event(_log, "weights_applied", version=version, engine=type(engine).__name__,
              seconds=round(time.perf_counter() - started, 3))
        return version
