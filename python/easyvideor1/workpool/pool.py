"""A pool of killable worker processes with a hard per-item time limit.

Why processes: a thread cannot be killed, and a hard limit must stop anything (a decoder
stuck in C, sympy, a sandbox or a browser child). Each worker leads its own process group
and dies with its parent; an item past its limit gets its worker's group SIGKILLed, the
item an error result, and the rest of its job goes on on another worker while a fresh one
is started. Workers are forked from multiprocessing's forkserver: it has the ``preload``
modules imported, so a replacement is up in milliseconds, and a parent with threads is
never forked. Idle workers block in a pipe read: they use no CPU.

``run_job(items, timeout, context)`` is blocking and thread-safe (``timeout``: one limit for
every item, or a sequence of one limit per item); one job's items run in
order on one worker (cheap items batched, no round trip per item), ``run_jobs`` spreads
several jobs over the workers and ``each`` runs one job per item, yielding as they finish.
Nothing a single item does raises: it comes back as an :class:`ItemResult` with ``kind``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import forkserver, reduction
from typing import Any

from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.logging import event, get_logger
from easyvideor1.workpool.child import worker_main
from easyvideor1.workpool.proc import CappedBuffer, drain, exit_description, kill_group, remaining

_log = get_logger("workpool")
TAIL_BYTES = 8192  # of a worker's output, kept to explain its death
_STALLS = 3  # workers that die before running anything, in a row, before a job gives up
_STOP = object()
_PRELOAD: set[str] = {"easyvideor1.workpool.child"}


class WorkerStartError(EasyVideoR1Error):
    """No worker could be started (the reason carries the worker's exception or output)."""


def add_preload(*modules: str) -> None:
    """Have the forkserver import ``modules`` when it starts (effective before the first
    pool of the process starts; a later worker imports what it needs itself, only slower)."""
    _PRELOAD.update(modules)


def _forget_forkserver() -> None:
    # A forked child inherits the parent's forkserver handle, which it cannot wait for
    # (not its child): drop it, so the child's first pool starts a forkserver of its own.
    server = getattr(forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None) is not None:
        server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None


os.register_at_fork(after_in_child=_forget_forkserver)


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker runs: ``state = init(*init_args)`` once (before the worker counts as ready,
    so start-up never eats into an item's time), then ``handle(state, item, context)`` per
    item; ``state.close()``, when it exists, at a graceful stop. Functions must be importable
    (module level): they travel to the worker by name."""

    init: Callable[..., Any]
    handle: Callable[[Any, Any, Any], Any]
    init_args: tuple = ()
    name: str = "evr1-worker"  # the workers' process name (ps, /proc/PID/comm)
    preload: tuple[str, ...] = ()
    forward_output: bool = True  # copy the workers' stdout/stderr to ours (the tail is kept anyway)
    start_timeout: float = 120.0


@dataclass(frozen=True, slots=True)
class ItemResult:
    """``kind`` None: ``value`` is what ``handle`` returned (in ``seconds``). Otherwise ``error``
    says why not: ``error`` (handle raised), ``timeout``, ``worker_crash`` or ``internal``."""

    value: Any = None
    seconds: float | None = None
    error: str | None = None
    kind: str | None = None
    pid: int | None = None  # the worker that timed out or crashed
    exit_code: int | None = None
    output: str = ""  # the end of what that worker printed


@dataclass
class _Attempt:
    results: list[ItemResult]
    failed: int | None = None  # index in the job of the item that timed out or crashed its worker
    failure: ItemResult | None = None


class _Fd:
    """A file descriptor handed to a forkserver child: pickled while the child is started, it
    travels with it and arrives as an object whose ``detach()`` gives the child's copy."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _arrived, (reduction.DupFd(self.fd),)


def _arrived(dup: Any) -> Any:
    return dup


class _Worker:
    """The parent's side of one worker process."""

    def __init__(self, ctx: Any, spec: WorkerSpec):
        self.spec = spec
        self.conn, child = ctx.Pipe()
        self.progress = ctx.RawArray("d", 2)
        self.tail = CappedBuffer(TAIL_BYTES, tail=True)
        read_fd, write_fd = os.pipe()
        self.proc = ctx.Process(target=worker_main, name=spec.name, daemon=True,
                                args=(child, self.progress, _Fd(write_fd), spec, dict(os.environ)))
        try:
            self.proc.start()
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            child.close()
            os.close(write_fd)
        self.pid: int = self.proc.pid
        self.dead = False
        self._kill_lock = threading.Lock()  # a driver and close() may both kill it
        self._drain = threading.Thread(target=drain, name=f"{spec.name}-output", daemon=True,
                                       args=(read_fd, self.tail, 2 if spec.forward_output else None))
        self._drain.start()

    def output(self) -> str:
        self._drain.join(1.0)  # the group is dead: the pipe reaches EOF right away
        return self.tail.text()

    def wait_ready(self, timeout: float) -> None:
        name = self.spec.name
        try:
            if not self.conn.poll(timeout):
                self.kill()
                raise WorkerStartError(f"{name} worker {self.pid} not ready after {timeout:g}s"
                                       + _tail_text(self.output()))
            kind, info = self.conn.recv()
        except (EOFError, OSError):
            code = self.kill()
            raise WorkerStartError(f"{name} worker {self.pid} exited during start-up ({exit_description(code)})"
                                   + _tail_text(self.output())) from None
        if kind != "ready":
            self.kill()
            raise WorkerStartError(f"{name} worker failed to start: {info.strip()}" + _tail_text(self.output()))

    def run(self, items: list[Any], context: Any, timeout: float | None | Sequence[float | None]) -> _Attempt:
        """Blocking: run ``items`` in order, each within ``timeout`` seconds (or its own entry
        of a sequence of limits)."""
        limits = timeout if isinstance(timeout, Sequence) else None
        self.progress[0], self.progress[1] = 0.0, 0.0
        try:
            if not self.proc.is_alive():
                raise OSError("worker exited while idle")
            self.conn.send((items, context))
        except (OSError, ValueError):
            self.kill()
            return _Attempt([])
        results: list[ItemResult] = []
        while True:
            index, started = self.progress[0], self.progress[1]
            limit = timeout if limits is None else limits[min(int(index), len(limits) - 1)]
            if started > 0 and limit is not None:
                wait = started + limit - time.monotonic()
                if wait <= 0:
                    if (self.progress[0], self.progress[1]) != (index, started):
                        continue  # it moved on to the next item meanwhile
                    code = self.kill()
                    event(_log, "workpool_item_timeout", logging.WARNING, pool=self.spec.name, worker=self.pid,
                          timeout_s=limit)
                    return _Attempt(results, max(int(index), len(results)),
                                    ItemResult(error=f"timeout after {limit:g}s", kind="timeout", pid=self.pid,
                                               exit_code=code))
            else:
                wait = 0.25  # the job is on its way in: re-read the progress soon
            try:
                if not self.conn.poll(wait):
                    continue
                kind, chunk = self.conn.recv()
            except (EOFError, OSError):
                return self._crashed(results)
            results.extend(ItemResult(value, seconds, error, "error" if error else None)
                           for value, seconds, error in chunk)
            if kind == "done":
                return _Attempt(results)

    def _crashed(self, results: list[ItemResult]) -> _Attempt:
        index, started = int(self.progress[0]), self.progress[1]
        code = self.kill()
        output = self.output()
        event(_log, "workpool_worker_crashed", logging.WARNING, pool=self.spec.name, worker=self.pid,
              exit=exit_description(code), output=output[-500:])
        if started <= 0:  # no item had started: nobody's fault, the job goes to another worker
            return _Attempt(results)
        return _Attempt(results, max(index, len(results)),
                        ItemResult(error=f"worker crashed ({exit_description(code)})", kind="worker_crash",
                                   pid=self.pid, exit_code=code, output=output))

    def kill(self) -> int | None:
        """SIGKILL the worker's process group (the worker's pid), then reap it."""
        with self._kill_lock:
            if not self.dead:
                self.dead = True
                kill_group(self.pid, leader_alive=self.proc.is_alive())
                self.proc.join(10)
                self.conn.close()
        return self.proc.exitcode


def _tail_text(output: str) -> str:
    return f"; its output ended with:\n{output[-2000:]}" if output else ""


class WorkerPool:
    """``size`` workers running ``spec``, started on :meth:`start` or the first job."""

    def __init__(self, spec: WorkerSpec, size: int, *, listener: Callable[[str], None] | None = None):
        self.spec, self.size, self.listener = spec, max(1, int(size)), listener
        self.restarts = 0  # workers lost to a timeout or a crash (each replaced)
        self.owner = os.getpid()
        self._ctx = multiprocessing.get_context("forkserver")
        self._lock = threading.RLock()  # start() adds workers while holding it
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._workers: set[_Worker] = set()
        self._replace: queue.Queue[object] = queue.Queue()
        self._closed = threading.Event()
        self._started = False
        self._start_error: str | None = None  # the replacer's last failure, while it lasts
        self._starting: _Worker | None = None  # the replacement being started, for close() to stop
        self._replacer_thread: threading.Thread | None = None
        self._drivers: ThreadPoolExecutor | None = None

    @property
    def live(self) -> int:
        return len(self._workers)

    def pids(self) -> list[int]:
        return sorted(w.pid for w in list(self._workers))

    def start(self) -> None:
        """Start every worker; raises :class:`WorkerStartError` when none comes up."""
        if os.getpid() != self.owner:  # a forked copy: the workers and their pipes are the parent's
            raise WorkerStartError(f"{self.spec.name} pool belongs to process {self.owner}, not to this fork")
        if self._started:
            return
        with self._lock:
            if self._started:
                return
            if self._closed.is_set():
                raise WorkerStartError(f"{self.spec.name} pool is closed")
            add_preload(*self.spec.preload)
            self._ctx.set_forkserver_preload(sorted(_PRELOAD))
            errors: list[str] = []
            spawned: list[_Worker] = []
            for _ in range(self.size):  # forks are quick: start all, then wait for all
                try:
                    spawned.append(_Worker(self._ctx, self.spec))
                except Exception as exc:
                    errors.append(f"cannot start a {self.spec.name} worker: {type(exc).__name__}: {exc}")
            deadline = time.monotonic() + self.spec.start_timeout
            ready = []
            for worker in spawned:
                try:
                    worker.wait_ready(remaining(deadline))
                    ready.append(worker)
                except WorkerStartError as exc:
                    errors.append(str(exc))
            if not ready:
                raise WorkerStartError(errors[0])
            self._drivers = ThreadPoolExecutor(self.size, thread_name_prefix=f"{self.spec.name}-driver")
            self._replacer_thread = threading.Thread(target=self._replacer, name=f"{self.spec.name}-replacer",
                                                     daemon=True)
            self._replacer_thread.start()
            for worker in ready:
                self._add(worker)
            for error in errors:
                event(_log, "workpool_worker_start_failed", logging.ERROR, pool=self.spec.name, error=error)
                self._replace.put(None)
            self._started = True

    def _add(self, worker: _Worker) -> None:
        with self._lock:
            self._workers.add(worker)
        self._idle.put(worker)
        self._notify("started")

    def _notify(self, what: str) -> None:
        if self.listener is not None:
            self.listener(what)

    def _replacer(self) -> None:
        """One thread, blocked on its queue until a worker dies; retries with backoff."""
        while self._replace.get() is not _STOP:
            delay = 0.5
            while not self._closed.is_set():
                try:
                    worker = self._starting = _Worker(self._ctx, self.spec)
                    worker.wait_ready(self.spec.start_timeout)
                except Exception as exc:  # keep trying: the pool must heal without a restart
                    if self._closed.is_set():
                        break
                    self._start_error = str(exc)
                    event(_log, "workpool_worker_start_failed", logging.ERROR, pool=self.spec.name, error=str(exc),
                          retry_in_s=delay)
                    self._closed.wait(delay)
                    delay = min(30.0, delay * 2)
                    continue
                finally:
                    self._starting = None
                self._start_error = None
                if self._closed.is_set():
                    self._stop_workers([worker], 1.0)
                else:
                    self._add(worker)
                break

    def _take(self) -> _Worker | str:
        """An idle worker, or why there is none."""
        while True:
            if self._closed.is_set():
                return f"{self.spec.name} pool is closed"
            try:
                return self._idle.get(timeout=0.5)
            except queue.Empty:
                error = self._start_error
                if error is not None and not self._workers:
                    return f"no {self.spec.name} worker could start: {error}"

    def _release(self, worker: _Worker) -> None:
        if worker.dead:
            with self._lock:
                self._workers.discard(worker)
                self.restarts += 1
            self._notify("died")
            if not self._closed.is_set():
                self._replace.put(None)
        elif self._closed.is_set():
            self._stop_workers([worker], 1.0)
        else:
            self._idle.put(worker)

    def run_job(self, items: Sequence[Any], timeout: float | None | Sequence[float | None],
                context: Any = None) -> list[ItemResult]:
        """Run ``items`` in order, each item within ``timeout`` seconds (a number for all, or a
        sequence with one limit per item); one result per item."""
        self.start()
        items = list(items)
        limits = list(timeout) if isinstance(timeout, Sequence) else None
        if limits is not None and len(limits) != len(items):
            raise ValueError(f"{len(limits)} time limits for {len(items)} items")
        out: list[ItemResult | None] = [None] * len(items)
        pending = list(range(len(items)))
        stalls = 0
        while pending:
            worker = self._take()
            if isinstance(worker, str):
                for k in pending:
                    out[k] = ItemResult(error=worker, kind="internal")
                break
            try:
                attempt = worker.run([items[k] for k in pending], context,
                                     timeout if limits is None else [limits[k] for k in pending])
            except Exception as exc:  # a bug here must not leak the worker or lose the job
                worker.kill()
                attempt = _Attempt([], 0, ItemResult(error=f"internal error: {type(exc).__name__}: {exc}",
                                                     kind="internal"))
            finally:
                self._release(worker)
            done = len(attempt.results)
            for k, result in zip(pending, attempt.results):
                out[k] = result
            if attempt.failed is not None:
                out[pending[attempt.failed]] = attempt.failure
                pending = pending[done:attempt.failed] + pending[attempt.failed + 1:]
                stalls = 0
                continue
            pending = pending[done:]
            stalls = 0 if done else stalls + 1
            if stalls >= _STALLS:  # workers die before running anything: give up on these items
                for k in pending:
                    out[k] = ItemResult(error=f"no {self.spec.name} worker could run this item",
                                        kind="worker_crash")
                break
        return out  # type: ignore[return-value]

    def run_jobs(self, jobs: Sequence[Sequence[Any]], timeout: float | None, context: Any = None
                 ) -> list[list[ItemResult]]:
        """Run several jobs at once over the workers; results per job, in order."""
        self.start()
        if len(jobs) == 1:  # the common small batch: no hop through a driver thread
            return [self.run_job(jobs[0], timeout, context)]
        futures = [self._drivers.submit(self.run_job, job, timeout, context) for job in jobs]
        return [future.result() for future in futures]

    def each(self, items: Sequence[Any], timeout: float | None, context: Any = None
             ) -> Iterator[tuple[int, ItemResult]]:
        """One job per item, ``size`` at a time; yields ``(index, result)`` as they finish."""
        self.start()
        futures = {self._drivers.submit(self.run_job, [item], timeout, context): i for i, item in enumerate(items)}
        for future in as_completed(futures):
            yield futures[future], future.result()[0]

    def _stop_workers(self, workers: list[_Worker], grace: float) -> None:
        for worker in workers:
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + grace
        for worker in workers:
            worker.proc.join(remaining(deadline))
            worker.kill()  # what is left of its group, or the worker itself after the grace

    def close(self, grace: float = 5.0) -> None:
        """Stop idle workers (``grace`` to exit on their own), kill busy ones; idempotent."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            workers = list(self._workers)
            self._workers.clear()
        self._replace.put(_STOP)
        starting = self._starting
        if starting is not None:
            starting.kill()  # its start-up fails at once and the replacer sees the pool closed
        idle = []
        while True:
            try:
                idle.append(self._idle.get_nowait())
            except queue.Empty:
                break
        for worker in workers:
            if worker not in idle:
                worker.kill()  # busy: its driver returns the job's items as failed
        self._stop_workers(idle, grace)
        if self._replacer_thread is not None:
            self._replacer_thread.join(grace)
        if self._drivers is not None:
            self._drivers.shutdown(wait=False, cancel_futures=True)
        self._notify("closed")

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
