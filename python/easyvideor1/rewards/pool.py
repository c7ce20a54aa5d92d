"""Reward scoring in killable worker processes: the one pool behind the in-process client
and the reward service, so a slow scorer is cut off the same way on one machine and in
the cluster.

Why processes for every scorer: the CPU-bound ones (math_verify/sympy, ROUGE, WER) need
more than one core, and the ones that already run out of process (sandboxed code,
Chromium) still need a *killable* owner, because the hard per-item limit
(``RewardConfig.timeout_s``) must be able to stop anything. Workers come from the pool's
forkserver with the scorers imported and warmed up (:mod:`easyvideor1.rewards.warmup`).

Each item's limit is :func:`~easyvideor1.rewards.registry.item_timeout`: its type's own
(``math``: 10 s, ``scorer_options.<type>.timeout_s`` overrides it) capped by
``RewardConfig.timeout_s``. The pool kills the worker at that limit; the item gets
``timeout after Xs``, nothing else of its job is lost.

Cheap items of a call travel as one job (not one per item), split across workers only when
the estimated work (per-type cost learnt from the workers' timings) gives each job about
``TARGET_JOB_S``. Items of a *limited* type (heavy ones, ``ScorerSpec.heavy``, and those with
a time limit of their own, such as ``math``: the types whose items can hold a worker for
seconds) get a job each, and while other lanes wait at most ``type_share`` of the workers
(half, at least one) run jobs of one limited type at a time (a type alone in the queue may
take more, leaving one worker free): a flood of slow or hostile items of one type waits in
its own lane while every other item is still served. Jobs wait in one queue per lane
(limited type, or all cheap types together); within a lane the calls take turns (one job of
each waiting call in turn, so a call flooding a lane delays another call's item by one job
at most), and among the lanes with a free slot the oldest head job goes first; ``size``
dispatcher threads run them (blocked on a condition when idle: no CPU). A lane
holds at most ``max_queued`` waiting items; items beyond that come back at once with the
error ``reward queue full: ...`` (kind ``queue_full``) rather than waiting without bound.
The settings come with each call, so one pool serves requests with different ones.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import Any

from easyvideor1.config.schema import RewardConfig
from easyvideor1.logging import event, get_logger
from easyvideor1.rewards.registry import item_timeout, load_scorer_modules, scorer_specs
from easyvideor1.rewards.types import ScoreRequest
from easyvideor1.workpool import ItemResult, WorkerPool, WorkerSpec, add_preload

# ScoreRequest's fields in order: (response, ground_truth, problem_type, options, problem, data_type, extra)
Payload = tuple
# (overall, accuracy, format, details, error, problem_type, seconds or None)
Result = tuple

# Below this much work per job, the extra round trips cost more than the parallelism saves.
TARGET_JOB_S = 0.01
DEFAULT_ITEM_S = 2e-4  # cost guess for a type not yet seen; refined from the workers' timings
TYPE_SHARE = 0.5  # of the workers, at most, busy with one limited type at a time
MAX_QUEUED = 16_384  # items waiting per lane; more are refused (4 x the service's largest batch)
_log = get_logger("rewards.pool")

add_preload("easyvideor1.rewards.warmup")  # declared at import: a forkserver started later has it


def payload_of(request: ScoreRequest) -> Payload:
    return (request.response, request.ground_truth, request.problem_type, request.options, request.problem,
            request.data_type, request.extra)


def _init_worker(modules: Sequence[str]) -> None:
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # the pool bounds its time (warmup.py)
    scorer_specs()  # a scorer module that cannot be imported is a start-up failure, with its reason
    load_scorer_modules(modules)


def _score_item(_state: None, payload: Payload, config: RewardConfig) -> tuple:
    from easyvideor1.rewards.client import score_prepared  # the client imports this module

    load_scorer_modules(config.extra_scorer_modules)  # cached after the first item
    r = score_prepared(ScoreRequest(*payload), config)
    return r.overall, r.accuracy, r.format, r.details, r.error, r.problem_type


def _failed(payload: Payload, reason: str | None) -> Result:
    return 0.0, 0.0, 0.0, {}, reason, payload[2], None


class _Job:
    """Items of one call that run in order on one worker, waiting in ``lane``."""

    __slots__ = ("indices", "items", "limits", "config", "lane", "seq", "call", "results", "done")

    def __init__(self, indices: list[int], items: list[Payload], limits: list[float], config: RewardConfig,
                 lane: str | None, seq: int, call: int):
        self.indices, self.items, self.limits, self.config = indices, items, limits, config
        self.lane, self.seq, self.call = lane, seq, call
        self.results: list[ItemResult] | None = None
        self.done = threading.Event()

    def finish(self, results: list[ItemResult]) -> None:
        self.results = results
        self.done.set()


class RewardPool:
    """``size`` scoring workers (None: the CPUs this process may use); ``score`` never raises
    for an item. ``modules``: extra scorer modules every worker imports at start-up;
    ``type_share``: the share of the workers one limited type may hold at once;
    ``max_queued``: waiting items per lane before new ones are refused."""

    def __init__(self, size: int | None = None, *, modules: Sequence[str] = (),
                 listener: Callable[[str], None] | None = None, target_job_s: float = TARGET_JOB_S,
                 start_timeout: float = 120.0, type_share: float = TYPE_SHARE, max_queued: int = MAX_QUEUED):
        self.size = size or len(os.sched_getaffinity(0))
        self.target_job_s = target_job_s
        self.lane_slots = max(1, int(self.size * type_share))
        self.max_queued = max(1, int(max_queued))
        spec = WorkerSpec(_init_worker, _score_item, (tuple(modules),), name="evr1-reward",
                          start_timeout=start_timeout)
        self.workers = WorkerPool(spec, self.size, listener=listener)
        self._cost: dict[str, float] = {}  # moving average of seconds per item, per type
        self._cost_lock = threading.Lock()
        self._cv = threading.Condition()
        # lane -> waiting jobs per call, the call to serve next first
        self._lanes: dict[str | None, OrderedDict[int, deque[_Job]]] = {}
        self._busy: dict[str | None, int] = {}  # jobs running, per lane
        self._queued: dict[str | None, int] = {}  # items waiting, per lane
        self._seq = itertools.count()
        self._dispatchers: list[threading.Thread] = []
        self._closed = False

    @property
    def live(self) -> int:
        return self.workers.live

    def pids(self) -> list[int]:
        return self.workers.pids()

    def start(self) -> None:
        """Start the workers now (else on the first call); raises ``WorkerStartError``."""
        self.workers.start()
        with self._cv:
            if self._dispatchers or self._closed:
                return
            for k in range(self.size):
                thread = threading.Thread(target=self._dispatch, name=f"evr1-reward-dispatch-{k}", daemon=True)
                thread.start()
                self._dispatchers.append(thread)

    def queued(self) -> dict[str | None, int]:
        """Items waiting per lane (a limited type's name, or None for the cheap types)."""
        with self._cv:
            return {lane: n for lane, n in self._queued.items() if n}

    def score(self, payloads: Sequence[Payload], heavy: Sequence[bool], config: RewardConfig
              ) -> list[tuple[Result, str | None]]:
        """Score every payload with ``config``, each within its type's limit (``item_timeout``);
        returns ``(result, failure kind or None)`` in input order (kinds: ``scorer_error``,
        ``timeout``, ``worker_crash``, ``queue_full``, ``internal``)."""
        if not payloads:
            return []
        self.start()
        specs = scorer_specs()
        limit_of: dict[str, float] = {}
        limited: dict[str, bool] = {}
        for i, p in enumerate(payloads):
            ptype = p[2]
            if ptype not in limit_of:
                limit_of[ptype] = item_timeout(ptype, config)
                spec = specs.get(ptype)
                limited[ptype] = bool(heavy[i]) or (spec is not None and spec.timeout_s is not None) \
                    or "timeout_s" in config.scorer_options.get(ptype, {})
        jobs = []
        call = next(self._seq)
        with self._cv:
            for lane, group in self._groups(payloads, heavy, limited):
                job = _Job(group, [payloads[i] for i in group], [limit_of[payloads[i][2]] for i in group], config,
                           lane, next(self._seq), call)
                jobs.append(job)
                waiting = self._queued.get(lane, 0)
                if self._closed:
                    job.finish([ItemResult(error="reward pool is closed", kind="internal")] * len(group))
                elif waiting + len(group) > self.max_queued:
                    error = (f"reward queue full: {waiting} {lane or 'cheap'} items waiting (limit "
                             f"{self.max_queued} per lane); retry later")
                    job.finish([ItemResult(error=error, kind="queue_full")] * len(group))
                else:
                    self._lanes.setdefault(lane, OrderedDict()).setdefault(call, deque()).append(job)
                    self._queued[lane] = waiting + len(group)
            self._cv.notify_all()
        results: list[Any] = [None] * len(payloads)
        for job in jobs:
            job.done.wait()
            for i, item in zip(job.indices, job.results):
                results[i] = self._result(payloads[i], item)
        self._learn_costs(results)
        return results

    def _next_job(self) -> _Job | None:
        """The oldest waiting job of a lane with a free slot (call holding ``_cv``)."""
        best = None
        waiting = [lane for lane, calls in self._lanes.items() if calls]
        busy = sum(self._busy.values())
        for lane, calls in self._lanes.items():
            # A limited type keeps to its share while others wait; alone it may use more, but
            # one worker always stays free for whatever arrives next.
            alone = waiting == [lane] and busy + 1 < self.size
            if calls and (lane is None or self._busy.get(lane, 0) < self.lane_slots or alone):
                head = next(iter(calls.values()))[0]
                if best is None or head.seq < best.seq:
                    best = head
        if best is not None:
            calls = self._lanes[best.lane]
            jobs = calls[best.call]
            jobs.popleft()
            if jobs:
                calls.move_to_end(best.call)  # the other calls' turn first
            else:
                del calls[best.call]
            self._queued[best.lane] -= len(best.items)
            self._busy[best.lane] = self._busy.get(best.lane, 0) + 1
        return best

    def _dispatch(self) -> None:
        while True:
            with self._cv:
                job = self._next_job()
                while job is None and not self._closed:
                    self._cv.wait()
                    job = self._next_job()
                if job is None:
                    return
            try:
                results = self.workers.run_job(job.items, job.limits, job.config)
            except Exception as exc:  # a bug here must cost this job's items, not the dispatcher
                results = [ItemResult(error=f"internal error: {type(exc).__name__}: {exc}", kind="internal")
                           ] * len(job.items)
            finally:
                with self._cv:
                    self._busy[job.lane] -= 1
                    self._cv.notify_all()
            job.finish(results)

    def _groups(self, payloads: Sequence[Payload], heavy: Sequence[bool], limited: dict[str, bool]
                ) -> list[tuple[str | None, list[int]]]:
        """``(lane, indices)`` per job: limited types one item per job in the type's lane, the
        cheap ones batched (dealt out by type, so each job gets a fair share) in lane None."""
        cheap = [i for i, p in enumerate(payloads) if not heavy[i] and not limited[p[2]]]
        groups: list[tuple[str | None, list[int]]] = []
        if cheap:
            work = sum(self._cost.get(payloads[i][2], DEFAULT_ITEM_S) for i in cheap)
            k = max(1, min(self.size, int(work / self.target_job_s)))
            by_type = sorted(cheap, key=lambda i: payloads[i][2])
            groups.extend((None, by_type[j::k]) for j in range(k))
        groups.extend((p[2], [i]) for i, p in enumerate(payloads) if heavy[i] or limited[p[2]])
        return groups

    @staticmethod
    def _result(payload: Payload, item: ItemResult) -> tuple[Result, str | None]:
        if item.kind is None:
            return (*item.value, item.seconds), "scorer_error" if item.value[4] else None
        if item.kind == "error":  # the scorer raised past score_prepared (SystemExit, ImportError)
            return _failed(payload, item.error), "scorer_error"
        if item.kind == "timeout":
            event(_log, "reward_item_timeout", logging.WARNING, worker=item.pid, problem_type=payload[2])
            return _failed(payload, item.error), "timeout"
        if item.kind == "worker_crash" and item.exit_code is not None:
            reason = f"worker crashed (exit code {item.exit_code}) while scoring this item"
            return _failed(payload, reason), "worker_crash"
        return _failed(payload, item.error), item.kind

    def _learn_costs(self, results: list[tuple[Result, str | None]]) -> None:
        sums: dict[str, list[float]] = {}
        for result, _kind in results:
            if result[6] is not None:
                acc = sums.setdefault(result[5], [0.0, 0])
                acc[0] += result[6]
                acc[1] += 1
        with self._cost_lock:
            for ptype, (total, n) in sums.items():
                mean = total / n
                old = self._cost.get(ptype)
                self._cost[ptype] = mean if old is None else 0.7 * old + 0.3 * mean

    def close(self, grace: float = 5.0) -> None:
        with self._cv:
            self._closed = True
            pending = [job for calls in self._lanes.values() for jobs in calls.values() for job in jobs]
            self._lanes.clear()
            self._queued.clear()
            self._cv.notify_all()
        for job in pending:
            job.finish([ItemResult(error="reward pool is closed", kind="internal")] * len(job.items))
        self.workers.close(grace)
