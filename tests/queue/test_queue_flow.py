"""WorkQueue contract, part 2: back-pressure, namespaces, shutdown, recovery, concurrency.

Every test runs against both backends (in-process and Redis Streams on a real redis-server).
"""

from __future__ import annotations

import random
import threading

import pytest
from queue_helpers import fresh_namespace

from easyvideor1.queue import BackPressureTimeoutError, NackOutcome, QueueClosedError


def test_back_pressure_blocks_then_times_out_with_clear_error(queue_factory):
    q = queue_factory(max_in_flight=2)
    q.put("a", {})
    q.put("b", {})
    q.get("w", count=2)  # leased but not resulted: still outstanding
    with pytest.raises(BackPressureTimeoutError) as err:
        q.put("c", {}, timeout_s=0.2)
    assert (err.value.outstanding, err.value.max_in_flight, err.value.task_id) == (2, 2, "c")
    assert "max_in_flight=2" in str(err.value)
    assert q.stats().outstanding == 2 and q.stats().pending == 0


def test_back_pressure_unblocks_when_a_result_arrives(queue_factory):
    q = queue_factory(max_in_flight=1)
    worker = queue_factory()
    q.put("a", {})
    (m,) = worker.get("w", count=1)

    def finish():
        worker.put_result("a", "done")
        worker.ack(m)

    timer = threading.Timer(0.2, finish)
    timer.start()
    try:
        q.put("b", {}, timeout_s=10)  # blocks until "a" has its result
    finally:
        timer.join()
    assert q.get_result("a") == "done"
    assert [m.task_id for m in worker.get("w", count=5)] == ["b"]


def test_back_pressure_unblocks_when_a_task_is_dead_lettered(queue_factory):
    q = queue_factory(max_in_flight=1, max_attempts=1)
    q.put("a", {})
    (m,) = q.get("w", count=1)
    timer = threading.Timer(0.2, lambda: q.nack(m, "poison"))
    timer.start()
    try:
        q.put("b", {}, timeout_s=10)
    finally:
        timer.join()
    assert [d.task_id for d in q.dead_letters()] == ["a"]


def test_namespaces_are_isolated(queue_factory):
    ns_a, ns_b = fresh_namespace(), fresh_namespace()
    qa, qb = queue_factory(ns_a), queue_factory(ns_b)
    qa.put("same-id", {"run": "a"})
    qb.put("same-id", {"run": "b"})  # the same task id in another run is a different task
    qa.put("only-a", {"run": "a"})
    qb.put_result("same-id", "b's result")

    got_b = qb.get("w", count=10)
    assert [(m.task_id, m.payload) for m in got_b] == [("same-id", {"run": "b"})]
    got_a = qa.get("w", count=10)
    assert sorted((m.task_id, m.payload["run"]) for m in got_a) == [("only-a", "a"), ("same-id", "a")]
    assert qa.get_result("same-id") is None
    assert qa.stats().results == 0 and qb.stats().results == 1


def test_close_keeps_unacked_leases_for_redelivery(queue_factory):
    worker = queue_factory(visibility_timeout_s=0.2)
    for i in range(3):
        worker.put(f"t{i}", {"i": i})
    leased = worker.get("w1", count=2)
    worker.close()
    worker.close()  # idempotent
    with pytest.raises(QueueClosedError):
        worker.get("w1")
    with pytest.raises(QueueClosedError):
        worker.put("t9", {})

    successor = queue_factory(visibility_timeout_s=0.2)
    got = []
    for _ in range(20):
        batch = successor.get("w2", count=3, block_s=0.5)
        assert all(successor.ack(m) for m in batch)
        got += batch
        if len(got) >= 3:
            break
    assert sorted(m.task_id for m in got) == ["t0", "t1", "t2"]
    by_id = {m.task_id: m.attempt for m in got}
    assert all(by_id[m.task_id] == 2 for m in leased)
    stats = successor.stats()
    assert (stats.outstanding, stats.in_flight, stats.pending) == (3, 0, 0)  # acked, no results yet


def test_recover_requeues_only_unknown_tasks(queue_factory):
    q = queue_factory()
    tasks = {f"t{i}": {"i": i} for i in range(4)}
    q.put("t1", tasks["t1"])
    (m,) = q.get("w", count=1)
    q.put_result("t1", "done")
    q.ack(m)
    q.put("t0", tasks["t0"])
    assert q.recover(tasks) == ["t2", "t3"]
    assert q.recover(tasks) == []  # idempotent
    assert sorted(m.task_id for m in q.get("w", count=10)) == ["t0", "t2", "t3"]


def test_purge_empties_the_namespace_for_every_handle(queue_factory):
    q = queue_factory(max_attempts=1)
    other = queue_factory()
    q.put("a", {})
    q.put("b", {})
    (m,) = q.get("w", count=1)
    q.nack(m, "x")
    q.put_result("z", 1)
    other.purge()
    stats = q.stats()
    assert (stats.pending, stats.in_flight, stats.dead_lettered, stats.outstanding, stats.results) == (0,) * 5
    assert q.dead_letters() == [] and q.get_result("z") is None
    q.put("a", {"again": True})  # usable after a purge
    assert [m.payload for m in other.get("w", count=5)] == [{"again": True}]


def test_concurrent_consumers_with_crashes_produce_every_result_once(queue_factory):
    """Four consumer threads, each dropping ~15% of its leases (a crash); all 120 results arrive."""
    producer = queue_factory(visibility_timeout_s=0.2, max_attempts=50, max_in_flight=40)
    ids = [f"t{i}" for i in range(120)]
    written, failures = [], []
    lock = threading.Lock()
    stop = threading.Event()

    def consume(name: str, seed: int) -> None:
        try:
            work(name, seed)
        except BaseException as exc:  # surfaced by the assertion below, not lost in the thread
            failures.append(exc)

    def work(name: str, seed: int) -> None:
        q = queue_factory(visibility_timeout_s=0.2, max_attempts=50)
        rng = random.Random(seed)
        while not stop.is_set():
            for m in q.get(name, count=4, block_s=0.1):
                if rng.random() < 0.15:
                    continue  # "crash": never ack, another consumer gets it after the timeout
                if rng.random() < 0.05:
                    if q.nack(m, "transient") not in (NackOutcome.REQUEUED, NackOutcome.LEASE_LOST):
                        raise AssertionError(f"nack of {m} dead-lettered below max_attempts")
                    continue
                if q.put_result(m.task_id, m.payload["i"] * 10):
                    with lock:
                        written.append(m.task_id)
                q.ack(m)

    threads = [threading.Thread(target=consume, args=(f"c{k}", k)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        for i, task_id in enumerate(ids):
            producer.put(task_id, {"i": i}, timeout_s=30)  # max_in_flight=40 throttles the producer
        results = producer.wait_results(ids, timeout_s=40)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == []
    assert results == {f"t{i}": i * 10 for i in range(120)}
    assert sorted(written) == sorted(ids)  # every result written exactly once
    stats = producer.stats()
    assert (stats.results, stats.outstanding, stats.dead_lettered) == (120, 0, 0)
