"""A pool of cache-build worker subprocesses with a per-task wall-clock timeout.

``concurrent.futures.ProcessPoolExecutor`` cannot kill one stuck task without breaking the
whole pool, so each slot here owns one ``python -m easyvideor1.cache.worker`` process
(protocol in worker.py). A task that overruns its timeout gets that process killed by its
pid (SIGKILL: a decoder stuck in C code ignores gentler signals) and reported as a
MediaTimeoutError; the slot starts a fresh process for its next task.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import selectors
import subprocess
import sys
import tempfile
import time
from typing import Any

from easyvideor1.logging import event, get_logger

_log = get_logger("cache.pool")
STARTUP_TIMEOUT_S = 120.0


class WorkerDied(Exception):
    """The worker process exited or closed its pipe."""


class _LineReader:
    """Read newline-terminated lines from a pipe with a deadline (no thread per read)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buffer = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(fd, selectors.EVENT_READ)

    def readline(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if self.selector.select(remaining):
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    raise WorkerDied("end of output")
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def close(self) -> None:
        self.selector.close()


class WorkerProcess:
    def __init__(self, config: dict[str, Any], startup_timeout: float = STARTUP_TIMEOUT_S):
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "easyvideor1.cache.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr)
        self.pid = self.proc.pid
        self.reader = _LineReader(self.proc.stdout.fileno())
        try:
            self.send(config)
            if not self.receive(startup_timeout).get("ready"):
                raise WorkerDied("worker did not report ready")
        except (TimeoutError, WorkerDied):
            self.kill()
            raise

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDied(f"cannot write to worker: {exc}") from None

    def receive(self, timeout: float) -> dict[str, Any]:
        line = self.reader.readline(timeout)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise WorkerDied(f"unreadable reply {line[:200]!r}") from None

    def stderr_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - limit))
            return self.stderr.read().decode(errors="replace").strip()
        return ""

    def exit_description(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "still running"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def kill(self) -> None:
        """SIGKILL this worker (by the pid we started) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close()

    def stop(self, grace: float = 10.0) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        self.reader.close()
        for handle in (self.proc.stdin, self.proc.stdout, self.stderr):
            with contextlib.suppress(OSError, ValueError):
                handle.close()


class WorkerPool:
    """``size`` slots; call ``serve(slot, tasks, results)`` from one thread per slot."""

    def __init__(self, config: dict[str, Any], size: int, timeout: float):
        self.config = config
        self.size = max(1, size)
        self.timeout = timeout
        self._live: set[WorkerProcess] = set()

    def serve(self, slot: int, tasks: queue.Queue, results: queue.Queue) -> None:
        """Take ``(task_id, CacheKey)`` items until the queue is empty; put ``(key, reply)``."""
        worker: WorkerProcess | None = None
        try:
            while True:
                try:
                    task_id, key = tasks.get_nowait()
                except queue.Empty:
                    return
                worker, reply = self._run_one(worker, task_id, key, slot)
                results.put((key, reply))
        finally:
            if worker is not None:
                worker.stop()
                self._live.discard(worker)

    def _run_one(self, worker: WorkerProcess | None, task_id: int, key: Any, slot: int
                 ) -> tuple[WorkerProcess | None, dict[str, Any]]:
        try:
            if worker is None:
                worker = WorkerProcess(self.config)
                self._live.add(worker)
        except (TimeoutError, WorkerDied) as exc:
            return None, {"id": task_id, "ok": False, "error_class": "WorkerStartError", "error_kind": "internal",
                          "reason": f"cannot start a build worker: {exc}"}
        try:
            worker.send({"id": task_id, "path": key.path, "key": dataclasses.asdict(key)})
            return worker, worker.receive(self.timeout)
        except TimeoutError:
            pid = worker.pid
            worker.kill()
            self._live.discard(worker)
            event(_log, "cache_build_timeout", path=key.path, timeout_s=self.timeout, killed_pid=pid, slot=slot)
            return None, {"id": task_id, "ok": False, "error_class": "MediaTimeoutError",
                          "error_kind": "decode timeout",
                          "reason": f"no result within {self.timeout:g}s; the decoding process (pid {pid}) "
                                    f"was killed"}
        except WorkerDied as exc:
            tail = worker.stderr_tail()
            worker.kill()
            self._live.discard(worker)
            return None, {"id": task_id, "ok": False, "error_class": "MediaDecodeError", "error_kind": "decode",
                          "reason": f"the decoding process died ({worker.exit_description()}, {exc})"
                                    + (f": {tail}" if tail else "")}

    def close(self) -> None:
        for worker in list(self._live):
            worker.kill()
        self._live.clear()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
