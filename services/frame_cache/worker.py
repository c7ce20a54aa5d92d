"""Build workers: threads that take build requests from the work queue and run them.

They run inside the service process (``--build-workers N``) or alone
(``evr1 serve frame-cache --worker-only``). Protocol per build, after ``get`` leased it:
mark the status record ``running``; run the build (the library's builder, decoding in
subprocesses); write the final record as the task's result (once per build id), then on
the status board; ``ack``. A worker that dies mid-build leaves its lease unacked: after
the lease time the build is delivered again (stored blobs are then counted as reused),
and after ``max_attempts`` deliveries it is dead-lettered and reported as failed.

A lost queue backend (Redis down) never stops a worker: it backs off and reconnects.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from easyvideor1.logging import event, get_logger
from easyvideor1.queue import Message, QueueError, QueueUnavailableError, WorkQueue, open_queue
from easyvideor1.queue.base import split_url
from services.frame_cache import builds
from services.frame_cache.board import BuildBoard
from services.frame_cache.metrics import FrameCacheMetrics

_log = get_logger("services.frame_cache.worker")
T = TypeVar("T")
STREAM = "frame-builds"
GROUP = "frame-cache"
_KNOWN_ERROR_KINDS = {"missing file", "decode", "decode timeout", "too large", "media", "store", "internal"}


@dataclass(frozen=True)
class QueueSettings:
    url: str = "memory://frame-cache"
    namespace: str = "frame-cache"
    lease_s: float = 3600.0  # longer than any build: a live build is never handed to a second worker
    max_attempts: int = 3
    op_timeout_s: float = 3.0

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"visibility_timeout_s": self.lease_s, "max_attempts": self.max_attempts}
        if split_url(self.url)[0] == "redis":
            options.update(stream=STREAM, group=GROUP, op_timeout_s=self.op_timeout_s,
                           connect_timeout_s=min(2.0, self.op_timeout_s))
        return options


class QueueHandle:
    """A queue that is opened on first use and re-opened after the backend was lost."""

    def __init__(self, settings: QueueSettings):
        self.settings = settings
        self._queue: WorkQueue | None = None
        self._lock = threading.Lock()

    def _open(self) -> WorkQueue:
        with self._lock:
            if self._queue is None:
                self._queue = open_queue(self.settings.url, self.settings.namespace, **self.settings.options())
            return self._queue

    def call(self, fn: Callable[[WorkQueue], T]) -> T:
        try:
            return fn(self._open())
        except QueueUnavailableError:
            self.reset()
            raise

    def reset(self) -> None:
        with self._lock:
            queue, self._queue = self._queue, None
        if queue is not None:
            try:
                queue.close()
            except QueueError as exc:  # the connection is already gone: nothing left to release
                event(_log, "queue_close_failed", logging.DEBUG, error=str(exc))

    close = reset


@dataclass
class BuildSettings:
    store_url: str
    store_options: dict[str, Any] = field(default_factory=dict)
    processes: int = 2  # decoding subprocesses per build
    file_timeout_s: float = 600.0


class BuildWorkers:
    """``count`` threads consuming builds; ``start()``, then ``stop(grace)`` at shutdown."""

    def __init__(self, count: int, queue: QueueSettings, build: BuildSettings, board: BuildBoard,
                 metrics: FrameCacheMetrics):
        self.count, self.queue_settings, self.build, self.board, self.metrics = count, queue, build, board, metrics
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.busy = 0
        self._busy_lock = threading.Lock()

    def start(self) -> None:
        base = f"{socket.gethostname()}-{os.getpid()}"
        for slot in range(self.count):
            thread = threading.Thread(target=self._loop, args=(f"{base}-{slot}",), name=f"frame-build-{slot}",
                                      daemon=True)  # a build cannot be interrupted; its lease covers it
            thread.start()
            self._threads.append(thread)
        self.metrics.build_workers.set(len(self._threads))

    @property
    def alive(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    def stop(self, grace: float = 10.0) -> None:
        """Stop taking builds; wait up to ``grace`` for the running ones (the rest are re-delivered)."""
        self._stop.set()
        deadline = time.monotonic() + grace
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.metrics.build_workers.set(self.alive)

    def wait(self) -> None:
        """Block until ``stop`` (worker-only mode)."""
        while not self._stop.wait(1.0):
            pass

    def _loop(self, consumer: str) -> None:
        handle = QueueHandle(self.queue_settings)
        backoff = 0.2
        try:
            while not self._stop.is_set():
                try:
                    messages = handle.call(lambda q: q.get(consumer, 1, block_s=1.0))
                except QueueError as exc:
                    event(_log, "build_queue_unavailable", logging.WARNING, consumer=consumer, error=str(exc),
                          retry_s=backoff)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                backoff = 0.2
                for message in messages:
                    try:
                        self._run(handle, message, consumer)
                    except Exception as exc:  # never lose the worker; the unacked lease is re-delivered
                        event(_log, "build_worker_error", logging.ERROR, consumer=consumer,
                              build_id=message.task_id, error=f"{type(exc).__name__}: {exc}",
                              traceback=traceback.format_exc(limit=8))
        finally:
            handle.close()

    def _run(self, handle: QueueHandle, message: Message, consumer: str) -> None:
        build_id, payload = message.task_id, message.payload
        with self._busy_lock:
            self.busy += 1
        self.metrics.builds_running.inc()
        started = time.time()
        self._record(build_id, {"status": "running", "started_at": started, "worker": consumer,
                                "attempt": message.attempt,
                                "request": builds.describe(payload) if "kind" in payload else None})
        try:
            fields = builds.execute(payload, self.build.store_url, store_options=self.build.store_options,
                                    workers=self.build.processes, timeout=self.build.file_timeout_s)
        except Exception as exc:  # a bug or a malformed payload: report it as this build's failure
            fields = {"status": "failed", "error": f"internal error: {type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc(limit=5)}
            event(_log, "build_crashed", logging.ERROR, build_id=build_id, error=fields["error"])
        finally:
            self.metrics.builds_running.dec()
            with self._busy_lock:
                self.busy -= 1
        final = {"build_id": build_id, "request": builds.describe(payload) if "kind" in payload else None,
                 "started_at": started, "finished_at": time.time(), "worker": consumer,
                 "attempt": message.attempt, **fields}
        self._observe(final)
        try:
            handle.call(lambda q: q.put_result(build_id, final))
            handle.call(lambda q: q.ack(message))
        except QueueError as exc:  # unacked: redelivered after the lease; the rebuild finds the blobs stored
            event(_log, "build_result_not_written", logging.WARNING, build_id=build_id, error=str(exc))
        self._record(build_id, final)
        event(_log, "build_finished", build_id=build_id, status=final["status"],
              counts=final.get("counts"), seconds=round(final["finished_at"] - started, 3))

    def _record(self, build_id: str, fields: dict[str, Any]) -> None:
        try:
            self.board.update(build_id, fields)
        except QueueError as exc:  # advisory only: the queue result is the authority
            event(_log, "build_record_not_written", logging.WARNING, build_id=build_id, error=str(exc))

    def _observe(self, final: dict[str, Any]) -> None:
        m = self.metrics
        m.builds_finished.labels(final["status"]).inc()
        m.build_seconds.observe(max(0.0, final["finished_at"] - final["started_at"]))
        counts = final.get("counts") or {}
        for outcome in ("built", "reused", "failed"):
            m.build_media.labels(outcome).inc(int(counts.get(outcome, 0)))
        for failure in final.get("failures") or []:
            kind = failure.get("error_kind")
            m.build_failures.labels(kind if kind in _KNOWN_ERROR_KINDS else "other").inc()
