"""Reward scoring in killable worker processes: the one pool behind the in-process client
and the reward service, so a slow scorer is cut off the same way on one machine and in
the cluster.

Why processes for every scorer: the CPU-bound ones (math_verify/sympy, ROUGE, WER) need
more than one core, and the ones that already run out of process (sandboxed code,
Chromium) still need a *killable* owner, because the hard per-item limit
(``RewardConfig.timeout_s``) must be able to stop anything. Workers come from the pool's
forkserver with the scorers imported and warmed up (:mod:`easyvideor1.rewards.warmup`).

Cheap items of a call travel as one job (not one per item), split across workers only when
the estimated work (per-type cost learnt from the workers' timings) gives each job about
``TARGET_JOB_S``; heavy items (``ScorerSpec.heavy``) get a job each so they spread over the
workers. The settings come with each call, so one pool serves requests with different ones.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from easyvideor1.config.schema import RewardConfig
from easyvideor1.logging import event, get_logger
from easyvideor1.rewards.registry import load_scorer_modules, scorer_specs
from easyvideor1.rewards.types import ScoreRequest
from easyvideor1.workpool import ItemResult, WorkerPool, WorkerSpec, add_preload

# ScoreRequest's fields in order: (response, ground_truth, problem_type, options, problem, data_type, extra)
Payload = tuple
# (overall, accuracy, format, details, error, problem_type, seconds or None)
Result = tuple

# Below this much work per job, the extra round trips cost more than the parallelism saves.
TARGET_JOB_S = 0.01
DEFAULT_ITEM_S = 2e-4  # cost guess for a type not yet seen; refined from the workers' timings
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


class RewardPool:
    """``size`` scoring workers (None: the CPUs this process may use); ``score`` never raises
    for an item. ``modules``: extra scorer modules every worker imports at start-up."""

    def __init__(self, size: int | None = None, *, modules: Sequence[str] = (),
                 listener: Callable[[str], None] | None = None, target_job_s: float = TARGET_JOB_S,
                 start_timeout: float = 120.0):
        self.size = size or len(os.sched_getaffinity(0))
        self.target_job_s = target_job_s
        spec = WorkerSpec(_init_worker, _score_item, (tuple(modules),), name="evr1-reward",
                          start_timeout=start_timeout)
        self.workers = WorkerPool(spec, self.size, listener=listener)
        self._cost: dict[str, float] = {}  # moving average of seconds per item, per type
        self._cost_lock = threading.Lock()

    @property
    def live(self) -> int:
        return self.workers.live

    def pids(self) -> list[int]:
        return self.workers.pids()

    def start(self) -> None:
        """Start the workers now (else on the first call); raises ``WorkerStartError``."""
        self.workers.start()

    def score(self, payloads: Sequence[Payload], heavy: Sequence[bool], config: RewardConfig
              ) -> list[tuple[Result, str | None]]:
        """Score every payload with ``config``, each within ``config.timeout_s``; returns
        ``(result, failure kind or None)`` in input order (kinds: ``scorer_error``,
        ``timeout``, ``worker_crash``, ``internal``)."""
        if not payloads:
            return []
        groups = self._groups(payloads, heavy)
        outs = self.workers.run_jobs([[payloads[i] for i in g] for g in groups], config.timeout_s, config)
        results: list[Any] = [None] * len(payloads)
        for group, out in zip(groups, outs):
            for i, item in zip(group, out):
                results[i] = self._result(payloads[i], item)
        self._learn_costs(results)
        return results

    def _groups(self, payloads: Sequence[Payload], heavy: Sequence[bool]) -> list[list[int]]:
        cheap = [i for i, h in enumerate(heavy) if not h]
        groups: list[list[int]] = []
        if cheap:
            work = sum(self._cost.get(payloads[i][2], DEFAULT_ITEM_S) for i in cheap)
            k = max(1, min(self.size, int(work / self.target_job_s)))
            by_type = sorted(cheap, key=lambda i: payloads[i][2])  # dealt out: each job gets a fair share
            groups.extend(by_type[j::k] for j in range(k))
        groups.extend([i] for i, h in enumerate(heavy) if h)
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
        self.workers.close(grace)
