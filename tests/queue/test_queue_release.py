"""Releasing collected results: the results hash stays small, late duplicates are still dropped.

Every test runs against both backends (in-process and Redis Streams on a real redis-server);
the memory-bound test also reads the Redis keys themselves (lengths and ``MEMORY USAGE``).
"""

from __future__ import annotations

import time

import pytest
import redis
from queue_helpers import fresh_namespace

from easyvideor1.queue import (
    DuplicateTaskError,
    NackOutcome,
    PayloadError,
    QueueStats,
    RedisStreamQueue,
    WorkQueue,
)
from easyvideor1.queue._lua import KEY_NAMES


def finish(q: WorkQueue, ids: list[str], consumer: str = "w") -> None:
    """What a worker does: lease every task, write its result, then ack."""
    got = []
    while len(got) < len(ids):
        got += q.get(consumer, count=len(ids), block_s=2)
    for m in got:
        assert q.put_result(m.task_id, {"done": m.task_id}) is True
        assert q.ack(m) is True


def test_released_results_are_gone_and_late_duplicates_dropped(queue_factory):
    q = queue_factory()
    for t in ("a", "b", "c"):
        q.put(t, {"t": t})
    finish(q, ["a", "b", "c"])
    assert q.wait_results(["a", "b"], timeout_s=5) == {"a": {"done": "a"}, "b": {"done": "b"}}
    assert q.release(["a", "b"]) == 2
    assert q.get_result("a") is None and q.get_result("c") == {"done": "c"}  # c was not released
    stats = q.stats()
    assert (stats.results, stats.collected, stats.outstanding, stats.duplicates_dropped) == (1, 2, 0, 0)

    assert q.put_result("a", {"late": True}) is False  # a re-delivered copy finishing late
    stats = q.stats()
    assert (stats.results, stats.collected, stats.duplicates_dropped) == (1, 2, 1)
    assert q.get_result("a") is None
    with pytest.raises(DuplicateTaskError, match="already collected") as err:
        q.put("a", {"again": True})
    assert err.value.state == "already collected"
    assert q.recover({"a": {}, "b": {}, "c": {}, "d": {"new": True}}) == ["d"]  # never re-puts a released id


def test_redelivery_of_a_released_task_is_dropped_not_handed_out(queue_factory):
    q = queue_factory(visibility_timeout_s=0.2)
    q.put("t", {"x": 1})
    (slow,) = q.get("slow", count=1)
    assert q.put_result("t", "first") is True  # then the worker hangs before its ack
    assert q.release(["t"]) == 1
    time.sleep(0.3)  # the lease expires
    assert q.get("other", count=1, block_s=0.2) == []  # retired, not delivered again
    stats = q.stats()
    assert (stats.pending, stats.in_flight, stats.collected) == (0, 0, 1)
    assert q.ack(slow) is False  # its entry is gone
    assert q.put_result("t", "second") is False and q.stats().duplicates_dropped == 1

    q.put("u", {"x": 2})  # the usual order: result, release, then the worker's ack
    (m,) = q.get("w", count=1)
    q.put_result("u", "ok")
    assert q.release(["u"]) == 1
    assert q.ack(m) is True  # release leaves the lease's bookkeeping to the ack


def test_markers_expire_after_the_retention_window(queue_factory):
    q = queue_factory(collected_retention_s=0.2)
    for t in ("a", "b"):
        q.put(t, {})
    finish(q, ["a", "b"])
    assert q.release(["a", "b"]) == 2 and q.stats().collected == 2
    time.sleep(0.3)
    assert q.put_result("x", 1) is True  # every result (and put, release) trims expired markers
    assert q.stats().collected == 0
    q.put("a", {"second": "life"})  # forgotten: the id is new again
    assert [m.payload for m in q.get("w", count=5)] == [{"second": "life"}]


def test_marker_outlives_retention_while_the_task_has_a_delivered_entry(queue_factory):
    q = queue_factory(visibility_timeout_s=0.6, collected_retention_s=0.1)
    q.put("t", {})
    (held,) = q.get("w", count=1)
    q.put_result("t", "r")
    q.release(["t"])
    time.sleep(0.2)  # past the retention, but the entry can still be re-delivered
    assert q.put_result("t", "late") is False  # trims first: the marker was kept
    assert q.stats().collected == 1
    time.sleep(0.5)  # the lease expires: the claim retires the entry
    assert q.get("w2", count=1, block_s=0) == [] and q.stats().in_flight == 0
    time.sleep(0.15)  # one more window for a straggler, then the marker goes
    q.put_result("other", 1)
    assert q.stats().collected == 0
    assert q.ack(held) is False


def test_release_of_unknown_queued_or_in_flight_ids_is_harmless(queue_factory):
    q = queue_factory()
    assert q.release([]) == 0
    assert q.release(["never-seen"]) == 0
    q.put("leased", {})
    q.put("queued", {})
    (m,) = q.get("w", count=1)
    assert q.release(["queued", "leased", "never-seen"]) == 0  # no outcome yet: nothing marked
    assert q.stats() == QueueStats(pending=1, in_flight=1, dead_lettered=0, duplicates_dropped=0, outstanding=2,
                                   results=0, collected=0)
    assert q.put_result(m.task_id, "r") is True and q.ack(m)
    (rest,) = q.get("w", count=1)
    assert rest.task_id == "queued"
    q.put_result("queued", "r")
    assert q.release(["queued", "queued", "leased"]) == 2  # duplicates in the list count once
    assert q.release(["queued", "leased"]) == 0  # already released
    with pytest.raises(PayloadError, match="task id"):
        q.release(["ok", ""])


def test_release_of_a_dead_lettered_task_accepts_the_dead_letter(queue_factory):
    q = queue_factory(max_attempts=1)
    q.put("t", {})
    (m,) = q.get("w", count=1)
    assert q.nack(m, "boom") is NackOutcome.DEAD_LETTERED
    assert q.release(["t"]) == 1
    assert q.put_result("t", "too late") is False  # the producer gave up on it
    with pytest.raises(DuplicateTaskError, match="already collected"):
        q.put("t", {})
    assert [d.task_id for d in q.dead_letters()] == ["t"]  # the dead-letter log itself is kept


def test_release_is_isolated_per_namespace(queue_factory):
    one, two = queue_factory(), queue_factory(namespace=fresh_namespace())
    for q in (one, two):
        q.put("t", {})
        finish(q, ["t"])
    assert one.release(["t"]) == 1
    assert two.get_result("t") == {"done": "t"} and two.stats().collected == 0
    assert two.put_result("t", "dup") is False and one.stats().duplicates_dropped == 0
    assert two.release(["t"]) == 1


def test_large_release_spans_several_scripts(queue_factory):
    q = queue_factory()
    ids = [f"t{i}" for i in range(2500)]
    for t in ids:
        q.put_result(t, 0)
    assert q.release(ids) == 2500
    assert (q.stats().results, q.stats().collected) == (0, 2500)


def test_retention_option_default_and_validation(queue_factory):
    assert queue_factory(visibility_timeout_s=2, max_attempts=4).collected_retention_s == 4 * 2 + 60
    with pytest.raises(PayloadError, match="collected_retention_s"):
        queue_factory(collected_retention_s=0)


def _sizes(q: WorkQueue, client: redis.Redis | None) -> dict[str, int]:
    """Entries held per per-task structure, plus total bytes for Redis."""
    if client is None:  # (lease_heap drops acked rows lazily, a visibility timeout later: bounded by time)
        s = q._s
        return {name: len(getattr(s, name)) for name in (
            "entries", "ready", "leases", "outstanding", "results", "attempts", "expiries", "errors",
            "dead_index", "collected", "collected_heap")}
    sizes, total = {}, 0
    length = {"stream": client.xlen, "dead": client.xlen, "outstanding": client.scard, "collected": client.zcard}
    for name, key in zip(KEY_NAMES, q.keys):
        if name not in ("duplicates", "claim_cursor"):  # two small strings
            sizes[name] = length.get(name, client.hlen)(key)  # 0 for a missing key
        total += client.memory_usage(key, samples=0) or 0
    sizes["bytes"] = total
    return sizes


def _run(q: WorkQueue, client: redis.Redis | None, rounds: int, batch: int, pause_s: float) -> dict[str, int]:
    """``rounds`` producer steps (put, work, wait, release); the peak of every size, measured
    right after each release (when the most is held)."""
    peak: dict[str, int] = {}
    for r in range(rounds):
        ids = [f"step{r}-q{k}-" + "x" * 40 for k in range(batch)]  # realistic id length
        for t in ids:
            q.put(t, {"question": t})
        finish(q, ids)
        assert len(q.wait_results(ids, timeout_s=5)) == batch
        assert q.release(ids) == batch
        for name, value in _sizes(q, client).items():
            peak[name] = max(peak.get(name, 0), value)
        time.sleep(pause_s)  # longer than the retention: the previous step's markers expire
    return peak


def test_long_run_keeps_memory_bounded(queue_factory, backend_url):
    client = redis.Redis.from_url(backend_url, decode_responses=True) if backend_url.startswith("redis") else None
    batch, retention = 20, 0.03
    short = queue_factory(namespace=fresh_namespace(), collected_retention_s=retention)
    long = queue_factory(namespace=fresh_namespace(), collected_retention_s=retention)
    assert isinstance(short, RedisStreamQueue) == (client is not None)
    small = _run(short, client, 10, batch, retention * 1.5)
    large = _run(long, client, 100, batch, retention * 1.5)  # 10x the tasks

    counts = {k: v for k, v in large.items() if k != "bytes"}
    assert counts["results"] == 0 and counts["collected"] == batch  # one step's markers at most
    assert all(v <= batch for v in counts.values()), counts
    assert counts == {k: v for k, v in small.items() if k != "bytes"}
    if client is not None:
        assert large["bytes"] <= small["bytes"] * 1.25 + 1024, (small, large)
        client.close()
    stats = long.stats()
    assert (stats.results, stats.outstanding, stats.pending, stats.in_flight) == (0, 0, 0, 0)
