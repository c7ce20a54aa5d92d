"""Offline cache build: decode every video/image of a data file once into a frame store.

Steps: load the rows (bad rows are reported and skipped); collect the distinct media files
and the rows that use each; compute every cache key (content hash + parameters) in a thread
pool; group paths by key (one build per distinct content); skip keys already stored
(resumable); build the rest in ``workers`` worker processes (:func:`decode_keys`: an
:mod:`easyvideor1.workpool` pool running cache/worker.py), each file with a wall-clock
timeout after which its worker is killed with its process group, the file reported as a
MediaTimeoutError, and a fresh worker started. Nothing a single file does stops the run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from easyvideor1.cache.key import CacheKey, cache_key
from easyvideor1.cache.loader import index_for_store
from easyvideor1.cache.stores.base import open_store
from easyvideor1.cache.worker import build_one, open_build_state
from easyvideor1.console import Progress
from easyvideor1.errors import MediaError, MediaMissingError, RowProblem
from easyvideor1.files import atomic_write
from easyvideor1.logging import event, get_logger
from easyvideor1.video.metadata import ImageParams, VideoParams
from easyvideor1.workpool import ItemResult, WorkerPool, WorkerSpec, WorkerStartError
from easyvideor1.workpool.proc import exit_description

if TYPE_CHECKING:
    from easyvideor1.data.loader import GroundTruthCheck

_log = get_logger("cache.builder")


@dataclass
class BuildFailure:
    path: str
    error_kind: str
    error_class: str
    reason: str
    rows: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class BuildSummary:
    rows: int = 0
    bad_rows: list[RowProblem] = field(default_factory=list)
    media: int = 0  # distinct (kind, path) pairs referenced by good rows
    unique: int = 0  # distinct cache keys among them
    built: int = 0
    reused: int = 0
    failed: list[BuildFailure] = field(default_factory=list)
    bytes_written: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed and not self.bad_rows

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "bad_rows": [p.as_dict() for p in self.bad_rows], "media": self.media,
                "unique": self.unique, "built": self.built, "reused": self.reused,
                "failed": [f.as_dict() for f in self.failed], "bytes_written": self.bytes_written,
                "seconds": round(self.seconds, 3)}

    def format(self) -> str:
        lines = [f"rows: {self.rows} good, {len(self.bad_rows)} bad",
                 f"media: {self.media} files, {self.unique} distinct (content x parameters)",
                 f"built: {self.built}  reused: {self.reused}  failed: {len(self.failed)}",
                 f"bytes written: {self.bytes_written} ({self.bytes_written / 2**20:.1f} MiB) "
                 f"in {self.seconds:.1f}s"]
        for problem in self.bad_rows[:20]:
            lines.append(f"  bad row  {problem.describe()}")
        for failure in self.failed[:50]:
            lines.append(f"  failed   {failure.path}: {failure.error_kind}: {failure.reason.splitlines()[0]}")
        hidden = max(0, len(self.failed) - 50) + max(0, len(self.bad_rows) - 20)
        if hidden:
            lines.append(f"  ... {hidden} more in the report file")
        return "\n".join(lines)


def build_cache(
    data_path: str | os.PathLike,
    store_url: str,
    *,
    video_params: VideoParams | None = None,
    image_params: ImageParams | None = None,
    workers: int = 2,
    timeout: float = 600.0,
    report_path: str | os.PathLike | None = None,
    store_options: dict[str, Any] | None = None,
    media_root: str | os.PathLike | None = None,
    progress: bool = True,
    check_ground_truth: GroundTruthCheck | None = None,
) -> BuildSummary:
    """Build the frame cache for every row of ``data_path`` into ``store_url``; rows failing
    ``check_ground_truth`` (`evr1 cache build` passes `data validate`'s) are bad rows too."""
    from easyvideor1.data import load_samples_report

    started = time.perf_counter()
    video_params = video_params or VideoParams()
    image_params = image_params or ImageParams()
    summary = BuildSummary()
    samples, summary.bad_rows = load_samples_report(data_path, media_root=media_root,
                                                    check_ground_truth=check_ground_truth)
    summary.rows = len(samples)
    store = open_store(store_url, **(store_options or {}))
    try:
        index = index_for_store(store)
        rows_of: dict[tuple[str, str], list[str]] = defaultdict(list)
        for sample in samples:
            for path in sample.videos:
                rows_of[("video", path)].append(sample.source)
            for path in sample.images:
                rows_of[("image", path)].append(sample.source)
        summary.media = len(rows_of)

        keys = _compute_keys(rows_of, video_params, image_params, index, workers, progress, summary)
        paths_of: dict[str, list[tuple[str, str]]] = defaultdict(list)
        key_of: dict[str, CacheKey] = {}
        for media, key in keys.items():
            paths_of[key.key].append(media)
            key_of.setdefault(key.key, key)
        summary.unique = len(paths_of)

        to_build = []
        checking = Progress("check store", total=len(paths_of), unit="key", enabled=progress and len(paths_of) >= 200)
        for k in checking.each(list(paths_of)):
            if store.exists(k):
                summary.reused += 1
            else:
                to_build.append(key_of[k])
        if to_build:
            config = worker_config(store_url, store_options, index)
            _run_builds(to_build, paths_of, rows_of, config, workers, timeout, progress, summary)
    finally:
        store.close()
    summary.seconds = time.perf_counter() - started
    if report_path is not None:
        write_report(report_path, summary, str(data_path))
    event(_log, "cache_build_done", built=summary.built, reused=summary.reused, failed=len(summary.failed),
          bad_rows=len(summary.bad_rows), bytes=summary.bytes_written, seconds=round(summary.seconds, 2))
    return summary


def _compute_keys(rows_of: dict[tuple[str, str], list[str]], video_params: VideoParams,
                  image_params: ImageParams, index: Any, workers: int, progress: bool,
                  summary: BuildSummary) -> dict[tuple[str, str], CacheKey]:
    """Hash every file (I/O bound: threads); files that cannot be hashed become failures."""
    def one(media: tuple[str, str]) -> CacheKey:
        kind, path = media
        if "://" in path:
            raise MediaMissingError(path, "remote URLs are not fetched by the cache builder; download the file")
        return cache_key(path, video_params if kind == "video" else image_params, index=index)

    keys: dict[tuple[str, str], CacheKey] = {}
    media_list = list(rows_of)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool, \
            Progress("hash media", total=len(media_list), unit="file", enabled=progress) as bar:
        futures = {pool.submit(one, media): media for media in media_list}
        for future, media in futures.items():
            try:
                keys[media] = future.result()
            except MediaError as exc:
                summary.failed.append(BuildFailure(media[1], exc.kind, type(exc).__name__, exc.reason,
                                                   sorted(rows_of[media])))
            bar.update(1)
    return keys


def worker_config(store_url: str, store_options: dict[str, Any] | None, index: Any) -> dict[str, Any]:
    """What a build worker needs to open the store and the hash index (cache/worker.py)."""
    return {"store_url": store_url, "store_options": store_options or {}, "index_dir": str(index.path.parent)}


def decode_keys(keys: list[CacheKey], config: dict[str, Any], workers: int, timeout: float
                ) -> Iterator[tuple[CacheKey, dict[str, Any]]]:
    """Build ``keys`` in up to ``workers`` worker processes, one file per job, each within
    ``timeout`` seconds; yields ``(key, reply)`` as each finishes (reply: cache/worker.py's,
    or the pool's timeout / crash / start-up failure in the same shape)."""
    spec = WorkerSpec(open_build_state, build_one, (config,), name="evr1-cache",
                      preload=("easyvideor1.cache.media",), forward_output=False)
    with WorkerPool(spec, min(max(1, workers), len(keys))) as pool:
        try:
            pool.start()
        except WorkerStartError as exc:
            for key in keys:
                yield key, {"ok": False, "error_class": "WorkerStartError", "error_kind": "internal",
                            "reason": f"cannot start a build worker: {exc}"}
            return
        tasks = [{"path": key.path, "key": dataclasses.asdict(key)} for key in keys]
        for index, result in pool.each(tasks, timeout):
            yield keys[index], _reply(keys[index], result, timeout)


def _reply(key: CacheKey, result: ItemResult, timeout: float) -> dict[str, Any]:
    if result.kind is None:
        return result.value
    if result.kind == "timeout":
        event(_log, "cache_build_timeout", path=key.path, timeout_s=timeout, killed_pid=result.pid)
        return {"ok": False, "error_class": "MediaTimeoutError", "error_kind": "decode timeout",
                "reason": f"no result within {timeout:g}s; the decoding process (pid {result.pid}) was killed"}
    if result.kind == "worker_crash" and result.exit_code is not None:
        return {"ok": False, "error_class": "MediaDecodeError", "error_kind": "decode",
                "reason": f"the decoding process died ({exit_description(result.exit_code)})"
                          + (f": {result.output}" if result.output else "")}
    return {"ok": False, "error_class": "WorkerError", "error_kind": "internal", "reason": result.error or ""}


def _run_builds(to_build: list[CacheKey], paths_of: dict[str, list[tuple[str, str]]],
                rows_of: dict[tuple[str, str], list[str]], config: dict[str, Any], workers: int,
                timeout: float, progress: bool, summary: BuildSummary) -> None:
    with Progress("build cache", total=len(to_build), unit="file", enabled=progress) as bar:
        for key, reply in decode_keys(to_build, config, workers, timeout):
            account(summary, reply, ((media[1], sorted(rows_of[media])) for media in paths_of[key.key]))
            bar.update(1, built=summary.built, failed=len(summary.failed))


def account(summary: BuildSummary, reply: dict[str, Any], users: Iterable[tuple[str, list[str]]]) -> None:
    """Count one build reply; a failure is listed once per ``(path, rows)`` that has this content."""
    if reply.get("ok"):
        if reply.get("built"):
            summary.built += 1
            summary.bytes_written += int(reply.get("bytes", 0))
        else:
            summary.reused += 1
        return
    reason = reply.get("reason", "")
    for path, rows in users:
        summary.failed.append(BuildFailure(path, reply.get("error_kind", "internal"),
                                           reply.get("error_class", "Error"), reason, rows))
        event(_log, "cache_build_failed", path=path, kind=reply.get("error_kind"),
              reason=reason.splitlines()[0] if reason else "")


def build_media(videos: list[str], images: list[str], store_url: str, video_params: VideoParams,
                image_params: ImageParams, *, store_options: dict[str, Any] | None = None, workers: int = 2,
                timeout: float = 600.0) -> BuildSummary:
    """Build the given files into ``store_url`` (what ``build_cache`` does for a data file, for a
    list of media: the frame-cache service's media builds)."""
    started = time.perf_counter()
    summary = BuildSummary()
    media = [("video", p) for p in videos] + [("image", p) for p in images]
    summary.media = len(media)
    store = open_store(store_url, **(store_options or {}))
    try:
        index = index_for_store(store)

        def key_of(item: tuple[str, str]) -> CacheKey:
            kind, path = item
            if "://" in path:
                raise MediaMissingError(path, "remote URLs are not fetched by the cache builder")
            return cache_key(path, video_params if kind == "video" else image_params, index=index)

        paths_of: dict[str, list[str]] = defaultdict(list)
        first: dict[str, CacheKey] = {}
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for item, future in [(m, pool.submit(key_of, m)) for m in media]:
                try:
                    key = future.result()
                except MediaError as exc:
                    summary.failed.append(BuildFailure(item[1], exc.kind, type(exc).__name__, exc.reason))
                    continue
                paths_of[key.key].append(item[1])
                first.setdefault(key.key, key)
        summary.unique = len(first)
        to_build = []
        for key in first.values():
            if store.exists(key.key):
                summary.reused += 1
            else:
                to_build.append(key)
        if to_build:
            _decode_all(to_build, paths_of, worker_config(store_url, store_options, index), workers, timeout,
                        summary)
    finally:
        store.close()
    summary.seconds = time.perf_counter() - started
    return summary


def _decode_all(to_build: list[CacheKey], paths_of: dict[str, list[str]], config: dict[str, Any],
                workers: int, timeout: float, summary: BuildSummary) -> None:
    for key, reply in decode_keys(to_build, config, workers, timeout):
        account(summary, reply, ((path, []) for path in paths_of[key.key]))


def write_report(path: str | os.PathLike, summary: BuildSummary, data_path: str) -> Path:
    """JSONL, one line per problem: ``{"path", "error_kind", "error_class", "reason", "rows"}``."""
    path = Path(path)
    with atomic_write(path) as handle:
        for problem in summary.bad_rows:
            handle.write(json.dumps({"path": problem.path or data_path, "error_kind": "bad row",
                                     "error_class": "RowProblem", "reason": problem.describe(),
                                     "rows": [f"{problem.path}:{problem.line}"]}) + "\n")
        for failure in summary.failed:
            handle.write(json.dumps(failure.as_dict()) + "\n")
    return path
