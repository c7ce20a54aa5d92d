"""Offline cache build: decode every video/image of a data file once into a frame store.

Steps: load the rows (bad rows are reported and skipped); collect the distinct media files
and the rows that use each; compute every cache key (content hash + parameters) in a thread
pool; group paths by key (one build per distinct content); skip keys already stored
(resumable); build the rest in ``workers`` subprocesses (cache/worker.py), each task with a
wall-clock timeout after which its worker is killed by pid, the file reported as a
MediaTimeoutError, and a fresh worker started. Nothing a single file does stops the run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from easyvideor1.cache.key import CacheKey, cache_key
from easyvideor1.cache.loader import index_for_store
from easyvideor1.cache.pool import WorkerPool
from easyvideor1.cache.stores.base import open_store
from easyvideor1.errors import MediaError, MediaMissingError, RowProblem
from easyvideor1.logging import event, get_logger
from easyvideor1.video.metadata import ImageParams, VideoParams

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
) -> BuildSummary:
    """Build the frame cache for every row of ``data_path`` into ``store_url``."""
    from easyvideor1.data import load_samples_report

    started = time.perf_counter()
    video_params = video_params or VideoParams()
    image_params = image_params or ImageParams()
    summary = BuildSummary()
    samples, summary.bad_rows = load_samples_report(data_path, media_root=media_root)
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
        for k in tqdm(list(paths_of), desc="check store", unit="key", file=sys.stderr,
                      disable=not progress or len(paths_of) < 200):
            if store.exists(k):
                summary.reused += 1
            else:
                to_build.append(key_of[k])
        if to_build:
            config = {"store_url": store_url, "store_options": store_options or {},
                      "index_dir": str(index.path.parent)}
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
            tqdm(total=len(media_list), desc="hash media", unit="file", file=sys.stderr,
                 disable=not progress) as bar:
        futures = {pool.submit(one, media): media for media in media_list}
        for future, media in futures.items():
            try:
                keys[media] = future.result()
            except MediaError as exc:
                summary.failed.append(BuildFailure(media[1], exc.kind, type(exc).__name__, exc.reason,
                                                   sorted(rows_of[media])))
            bar.update(1)
    return keys


def _run_builds(to_build: list[CacheKey], paths_of: dict[str, list[tuple[str, str]]],
                rows_of: dict[tuple[str, str], list[str]], config: dict[str, Any], workers: int,
                timeout: float, progress: bool, summary: BuildSummary) -> None:
    tasks = queue.Queue()
    for task_id, key in enumerate(to_build):
        tasks.put((task_id, key))
    results: queue.Queue = queue.Queue()
    with WorkerPool(config, size=min(max(1, workers), len(to_build)), timeout=timeout) as pool, \
            tqdm(total=len(to_build), desc="build cache", unit="file", file=sys.stderr,
                 disable=not progress) as bar:
        threads = [threading.Thread(target=pool.serve, args=(slot, tasks, results), daemon=True)
                   for slot in range(pool.size)]
        for thread in threads:
            thread.start()
        for _ in range(len(to_build)):
            key, reply = results.get()
            _account(key, reply, paths_of, rows_of, summary)
            bar.update(1)
            bar.set_postfix(built=summary.built, failed=len(summary.failed), refresh=False)
        for thread in threads:
            thread.join()


def _account(key: CacheKey, reply: dict[str, Any], paths_of: dict[str, list[tuple[str, str]]],
             rows_of: dict[tuple[str, str], list[str]], summary: BuildSummary) -> None:
    if reply.get("ok"):
        if reply.get("built"):
            summary.built += 1
            summary.bytes_written += int(reply.get("bytes", 0))
        else:
            summary.reused += 1
        return
    for media in paths_of[key.key]:
        summary.failed.append(BuildFailure(media[1], reply.get("error_kind", "internal"),
                                           reply.get("error_class", "Error"), reply.get("reason", ""),
                                           sorted(rows_of[media])))
        event(_log, "cache_build_failed", path=media[1], kind=reply.get("error_kind"),
              reason=reply.get("reason", "").splitlines()[0] if reply.get("reason") else "")


def write_report(path: str | os.PathLike, summary: BuildSummary, data_path: str) -> Path:
    """JSONL, one line per problem: ``{"path", "error_kind", "error_class", "reason", "rows"}``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temp, "w", encoding="utf-8") as handle:
        for problem in summary.bad_rows:
            handle.write(json.dumps({"path": problem.path or data_path, "error_kind": "bad row",
                                     "error_class": "RowProblem", "reason": problem.describe(),
                                     "rows": [f"{problem.path}:{problem.line}"]}) + "\n")
        for failure in summary.failed:
            handle.write(json.dumps(failure.as_dict()) + "\n")
    os.replace(temp, path)
    return path
