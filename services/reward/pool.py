"""Worker processes that score items, with a hard per-item timeout.

Why processes for every scorer: the CPU-bound ones (math_verify/sympy, ROUGE, WER) need
more than one core, and the ones that already run out of process (sandboxed code,
Chromium) still need a *killable* owner, because a hard timeout must be able to stop
anything. A thread cannot be killed; a worker process (and its process group, which
takes a sandbox or browser child with it) can, and is then replaced. Workers come from a
forkserver that has the scorers imported and warmed up (:mod:`services.reward.preload`),
so a replacement starts warm in milliseconds and a parent with threads is never forked.

Protocol: the parent sends a list of payloads (a *job*); the worker scores them in order,
writes ``(index, start time)`` of the item in progress to shared memory, and sends results
back in pieces at most every ``FLUSH_S``. The parent's driver thread waits on the pipe and
checks the shared progress: an item running past the timeout gets the error
``timeout after Xs``, the worker is killed, and the job's remaining items go to another
worker. Cheap items of a request travel as one job (not one per item), split across
workers only when the estimated work (per-type cost learnt from the workers' timings)
gives each job about ``TARGET_JOB_S``; heavy items (``ScorerSpec.heavy``) get a job each
so they spread over the workers.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from easyvideor1.config.schema import RewardConfig
from easyvideor1.logging import event, get_logger
from easyvideor1.rewards.client import score_prepared
from easyvideor1.rewards.registry import scorer_specs
from easyvideor1.rewards.types import ScoreRequest

# (response, ground_truth, problem_type, options, problem, data_type, extra): ScoreRequest's order
Payload = tuple
# (overall, accuracy, format, details, error, problem_type, seconds or None)
Result = tuple

FLUSH_S = 0.05
# Cheap items are split across workers only when each job gets about this much work: below
# it, the extra round trips cost more than the parallelism saves.
TARGET_JOB_S = 0.01
DEFAULT_ITEM_S = 2e-4  # cost guess for a type not yet seen; refined from the workers' timings
_log = get_logger("services.reward.pool")


class WorkerStartError(RuntimeError):
    pass


def _die_with_parent() -> None:
    # The forkserver is our parent and exits with the server; a busy worker must follow it.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def worker_main(conn: Any, progress: Any, config: RewardConfig) -> None:
    """Entry point of a worker process."""
    os.setpgrp()  # own group: a kill takes the worker's sandbox/browser children with it
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        scorer_specs()
    except BaseException as exc:  # report why the pool cannot come up, then exit
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            payloads = conn.recv()
        except (EOFError, OSError):
            return  # the server is gone
        if payloads is None:
            return
        out: list[Result] = []
        last_flush = time.monotonic()
        for index, payload in enumerate(payloads):
            progress[1] = time.monotonic()  # start time first: the parent reads index, then time
            progress[0] = index
            began = time.perf_counter()
            try:
                r = score_prepared(ScoreRequest(*payload), config)
                out.append((r.overall, r.accuracy, r.format, r.details, r.error, r.problem_type,
                            time.perf_counter() - began))
            except BaseException as exc:  # SystemExit from a scorer costs one item, not the worker
                out.append((0.0, 0.0, 0.0, {}, f"{type(exc).__name__}: {exc}", payload[2], None))
            if time.monotonic() - last_flush >= FLUSH_S and index + 1 < len(payloads):
                conn.send(("partial", out))
                out, last_flush = [], time.monotonic()
        progress[1] = 0.0
        conn.send(("done", out))


@dataclass
class Outcome:
    """What one job attempt produced: results of a prefix, maybe one failed item."""

    results: list[Result]
    failed: int | None = None  # index (in the job) of the item that timed out or crashed its worker
    reason: str | None = None
    kind: str | None = None  # timeout | worker_crash | internal


class Worker:
    def __init__(self, ctx: Any, config: RewardConfig):
        self.conn, child = ctx.Pipe()
        self.progress = ctx.RawArray("d", 2)
        self.proc = ctx.Process(target=worker_main, args=(child, self.progress, config),
                                name="evr1-reward-worker", daemon=True)
        self.proc.start()
        child.close()
        self.pid: int = self.proc.pid
        self.dead = False

    def wait_ready(self, timeout: float) -> None:
        try:
            if not self.conn.poll(timeout):
                raise WorkerStartError(f"worker {self.pid} not ready after {timeout:g}s")
            kind, info = self.conn.recv()
        except (EOFError, OSError):
            self.kill()
            raise WorkerStartError(f"worker {self.pid} exited during start-up "
                                   f"(exit code {self.proc.exitcode})") from None
        except WorkerStartError:
            self.kill()
            raise
        if kind != "ready":
            self.kill()
            raise WorkerStartError(f"worker could not load the scorers: {info}")

    def run(self, payloads: list[Payload], timeout: float) -> Outcome:
        """Blocking (driver thread): score ``payloads``, enforcing ``timeout`` per item."""
        self.progress[0], self.progress[1] = 0.0, 0.0
        try:
            self.conn.send(payloads)
        except OSError:
            self.kill()
            return Outcome([])
        results: list[Result] = []
        while True:
            index, started = self.progress[0], self.progress[1]
            wait = started + timeout - time.monotonic() if started > 0 else 0.25
            if wait <= 0:
                if (self.progress[0], self.progress[1]) != (index, started):
                    continue  # moved on to the next item meanwhile
                self.kill()
                event(_log, "reward_item_timeout", logging.WARNING, worker=self.pid, timeout_s=timeout,
                      problem_type=payloads[int(index)][2])
                return Outcome(results, max(int(index), len(results)), f"timeout after {timeout:g}s",
                               "timeout")
            try:
                if not self.conn.poll(min(wait, 0.25)):
                    continue
                kind, chunk = self.conn.recv()
            except (EOFError, OSError):
                code = self.kill()
                event(_log, "reward_worker_crashed", logging.WARNING, worker=self.pid, exit_code=code)
                return Outcome(results, max(int(self.progress[0]), len(results)),
                               f"worker crashed (exit code {code}) while scoring this item", "worker_crash")
            results.extend(chunk)
            if kind == "done":
                return Outcome(results)

    def kill(self) -> int | None:
        """SIGKILL the worker's process group (the worker's pid), then reap it."""
        if not self.dead:
            self.dead = True
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # not yet its own group leader
                self.proc.kill()
            self.proc.join(10)
            self.conn.close()
        return self.proc.exitcode

    def stop(self, grace: float) -> None:
        if self.dead:
            return
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(grace)
        self.kill()


class ScoringPool:
    """``size`` worker processes shared by all requests; ``score`` never raises for an item."""

    def __init__(self, size: int, config: RewardConfig, item_timeout: float, metrics: Any = None,
                 target_job_s: float = TARGET_JOB_S, start_timeout: float = 120.0):
        self.size, self.config, self.item_timeout = size, config, item_timeout
        self.metrics, self.target_job_s, self.start_timeout = metrics, target_job_s, start_timeout
        self._cost: dict[str, float] = {}  # moving average of seconds per item, per type
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload([__name__, "services.reward.preload"])
        self._drivers = ThreadPoolExecutor(size, thread_name_prefix="evr1-reward-driver")
        self._spawner = ThreadPoolExecutor(2, thread_name_prefix="evr1-reward-spawn")
        self._workers: set[Worker] = set()
        self._idle: asyncio.Queue[Worker] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._replacing: set[asyncio.Task] = set()

    @property
    def live(self) -> int:
        return len(self._workers)

    def pids(self) -> list[int]:
        return sorted(w.pid for w in self._workers)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._idle = asyncio.Queue()
        started = await asyncio.gather(*(self._spawn() for _ in range(self.size)), return_exceptions=True)
        errors = [e for e in started if isinstance(e, BaseException)]
        if len(errors) == self.size:
            raise WorkerStartError(str(errors[0]))
        for _ in errors:
            self._schedule_replacement()

    async def _spawn(self) -> None:
        def start() -> Worker:
            worker = Worker(self._ctx, self.config)
            worker.wait_ready(self.start_timeout)
            return worker

        worker = await self._loop.run_in_executor(self._spawner, start)
        if self._closing:
            await asyncio.to_thread(worker.stop, 1.0)
            return
        self._workers.add(worker)
        self._set_alive()
        self._idle.put_nowait(worker)

    def _schedule_replacement(self) -> None:
        task = self._loop.create_task(self._replace())
        self._replacing.add(task)
        task.add_done_callback(self._replacing.discard)

    async def _replace(self) -> None:
        delay = 0.5
        while not self._closing:
            try:
                await self._spawn()
                return
            except Exception as exc:  # keep trying: the pool must heal without a restart
                event(_log, "reward_worker_start_failed", logging.ERROR, error=str(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(30.0, delay * 2)

    def _set_alive(self) -> None:
        if self.metrics is not None:
            self.metrics.workers_alive.set(len(self._workers))

    def _release(self, worker: Worker) -> None:  # on the event loop
        if worker.dead:
            self._workers.discard(worker)
            self._set_alive()
            if self.metrics is not None:
                self.metrics.worker_restarts.inc()
            if not self._closing:
                self._schedule_replacement()
        elif self._closing:
            self._workers.discard(worker)
            self._spawner.submit(worker.stop, 1.0)
        else:
            self._idle.put_nowait(worker)

    def _drive(self, worker: Worker, payloads: list[Payload]) -> Outcome:  # driver thread
        try:
            return worker.run(payloads, self.item_timeout)
        except Exception as exc:  # a bug here must not leak the worker or lose the batch
            worker.kill()
            return Outcome([], 0, f"internal error: {type(exc).__name__}: {exc}", "internal")
        finally:
            # Released from this thread, so a cancelled request can never hand out a busy worker.
            self._loop.call_soon_threadsafe(self._release, worker)

    async def _run_job(self, payloads: list[Payload]) -> list[tuple[Result, str | None]]:
        out: list[tuple[Result, str | None] | None] = [None] * len(payloads)
        pending = list(range(len(payloads)))
        stalls = 0
        while pending:
            worker = await self._idle.get()
            outcome = await self._loop.run_in_executor(
                self._drivers, self._drive, worker, [payloads[k] for k in pending])
            done = len(outcome.results)
            for k, result in zip(pending, outcome.results):
                out[k] = (result, "scorer_error" if result[4] else None)
            if outcome.failed is not None:
                failed = pending[outcome.failed]
                out[failed] = ((0.0, 0.0, 0.0, {}, outcome.reason, payloads[failed][2], None), outcome.kind)
                pending = pending[done:outcome.failed] + pending[outcome.failed + 1:]
                stalls = 0
            else:
                pending = pending[done:]
                stalls = 0 if done else stalls + 1
                if stalls >= 3:  # workers die before scoring anything: give up on these items
                    for k in pending:
                        out[k] = ((0.0, 0.0, 0.0, {}, "no worker could score this item", payloads[k][2],
                                   None), "worker_crash")
                    break
        return out  # type: ignore[return-value]

    async def score(self, payloads: list[Payload], heavy: list[bool]) -> list[tuple[Result, str | None]]:
        """Score every payload; returns ``(result, failure kind or None)`` in input order."""
        cheap = [i for i, h in enumerate(heavy) if not h]
        groups: list[list[int]] = []
        if cheap:
            work = sum(self._cost.get(payloads[i][2], DEFAULT_ITEM_S) for i in cheap)
            k = max(1, min(self.size, int(work / self.target_job_s)))
            by_type = sorted(cheap, key=lambda i: payloads[i][2])  # dealt out: each job gets a fair share
            groups.extend(by_type[j::k] for j in range(k))
        groups.extend([i] for i, h in enumerate(heavy) if h)
        outs = await asyncio.gather(*(self._safe_job([payloads[i] for i in g]) for g in groups))
        results: list[Any] = [None] * len(payloads)
        for group, out in zip(groups, outs):
            for i, r in zip(group, out):
                results[i] = r
        self._learn_costs(results)
        return results

    def _learn_costs(self, results: list[tuple[Result, str | None]]) -> None:
        sums: dict[str, list[float]] = {}
        for (result, _kind) in results:
            if result[6] is not None:
                acc = sums.setdefault(result[5], [0.0, 0])
                acc[0] += result[6]
                acc[1] += 1
        for ptype, (total, n) in sums.items():
            mean = total / n
            old = self._cost.get(ptype)
            self._cost[ptype] = mean if old is None else 0.7 * old + 0.3 * mean

    async def _safe_job(self, payloads: list[Payload]) -> list[tuple[Result, str | None]]:
        try:
            return await self._run_job(payloads)
        except Exception as exc:  # never lose the rest of the batch to a pool bug
            event(_log, "reward_job_failed", logging.ERROR, error=repr(exc))
            return [((0.0, 0.0, 0.0, {}, f"internal error: {type(exc).__name__}: {exc}", p[2], None),
                     "internal") for p in payloads]

    async def close(self, grace: float = 5.0) -> None:
        self._closing = True
        for task in list(self._replacing):
            task.cancel()
        workers = list(self._workers)
        self._workers.clear()
        await asyncio.gather(*(asyncio.to_thread(w.stop, grace) for w in workers))
        self._set_alive()
        self._drivers.shutdown(wait=False, cancel_futures=True)
        self._spawner.shutdown(wait=False, cancel_futures=True)
