"""Prometheus metrics of the reward service, on a registry of its own (one per app)."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

disable_created_metrics()  # the *_created series double the output and nobody graphs them

# Scoring latency spans 10 us (a letter match) to tens of seconds (sandboxed code).
_ITEM_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 60.0)
_REQUEST_BUCKETS = (1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 60.0, 120.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
UNKNOWN = "unknown"  # label of items whose type did not resolve: user strings never become labels


class RewardMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.items = Counter("evr1_reward_items", "Items answered, by canonical problem type",
                             ["problem_type"], registry=r)
        self.failures = Counter("evr1_reward_item_failures",
                                "Items answered with an error, by problem type and reason "
                                "(invalid, scorer_error, timeout, worker_crash, internal)",
                                ["problem_type", "reason"], registry=r)
        self.timeouts = Counter("evr1_reward_item_timeouts", "Items that ran past the item timeout",
                                ["problem_type"], registry=r)
        self.item_seconds = Histogram("evr1_reward_item_seconds", "Scoring time of one item in a worker",
                                      ["problem_type"], buckets=_ITEM_BUCKETS, registry=r)
        self.requests = Counter("evr1_reward_requests", "HTTP requests, by route and status",
                                ["route", "status"], registry=r)
        self.request_seconds = Histogram("evr1_reward_request_seconds", "Time to answer a scoring request",
                                         ["route"], buckets=_REQUEST_BUCKETS, registry=r)
        self.batch_items = Histogram("evr1_reward_batch_items", "Items per scoring request",
                                     buckets=_BATCH_BUCKETS, registry=r)
        self.inflight_requests = Gauge("evr1_reward_inflight_requests", "Scoring requests in progress",
                                       registry=r)
        self.inflight_items = Gauge("evr1_reward_inflight_items", "Items accepted and not yet answered",
                                    registry=r)
        self.worker_restarts = Counter("evr1_reward_worker_restarts",
                                       "Workers replaced after a timeout or a crash", registry=r)
        self.workers_alive = Gauge("evr1_reward_workers", "Live scoring worker processes", registry=r)
        self._item_children: dict[str, object] = {}

    def observe_items(self, problem_types: list[str | None], seconds: list[float | None],
                      failures: list[str | None]) -> None:
        """Record one batch: per-item labels are tallied first so a 4k batch costs few updates."""
        counts = Tally(p or UNKNOWN for p in problem_types)
        for ptype, n in counts.items():
            self.items.labels(ptype).inc(n)
        failed = Tally((p or UNKNOWN, f) for p, f in zip(problem_types, failures) if f)
        for (ptype, reason), n in failed.items():
            self.failures.labels(ptype, reason).inc(n)
            if reason == "timeout":
                self.timeouts.labels(ptype).inc(n)
        for ptype, secs in zip(problem_types, seconds):
            if secs is not None:
                child = self._item_children.get(ptype)
                if child is None:
                    child = self._item_children[ptype] = self.item_seconds.labels(ptype or UNKNOWN)
                child.observe(secs)

    def render(self) -> bytes:
        return generate_latest(self.registry)
