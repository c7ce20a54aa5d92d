"""WorkQueue contract, part 1: delivery, leases, redelivery, attempts, dead letters, results.

Every test runs against both backends (in-process and Redis Streams on a real redis-server).
"""

from __future__ import annotations

import time

import pytest

from easyvideor1.queue import (
    DuplicateTaskError,
    NackOutcome,
    PayloadError,
    QueueStats,
    ResultTimeoutError,
    TaskDeadLetteredError,
)


def test_put_get_ack_roundtrip(queue_factory):
    q = queue_factory()
    first = q.put("a", {"x": 1, "tags": ["v", "w"]})
    second = q.put("b", {"x": 2})
    assert first != second
    assert q.stats() == QueueStats(pending=2, in_flight=0, dead_lettered=0, duplicates_dropped=0,
                                   outstanding=2, results=0)

    messages = q.get("c1", count=10, block_s=1)
    assert [(m.task_id, m.payload, m.attempt, m.consumer) for m in messages] == [
        ("a", {"x": 1, "tags": ["v", "w"]}, 1, "c1"),
        ("b", {"x": 2}, 1, "c1"),
    ]
    assert [m.stream_id for m in messages] == [first, second]
    assert q.stats().in_flight == 2 and q.stats().pending == 0

    assert q.put_result("a", {"y": 2}) is True
    assert q.ack(messages[0]) is True
    assert q.ack(messages[0]) is False  # already finished
    stats = q.stats()
    assert (stats.in_flight, stats.outstanding, stats.results) == (1, 1, 1)
    assert q.get_result("a") == {"y": 2}
    assert q.get_result("b", default="none yet") == "none yet"


def test_count_limits_batch_and_empty_get_returns_nothing(queue_factory):
    q = queue_factory()
    assert q.get("c1", count=3, block_s=0) == []
    for i in range(5):
        q.put(f"t{i}", {"i": i})
    assert [m.task_id for m in q.get("c1", count=3)] == ["t0", "t1", "t2"]
    assert [m.task_id for m in q.get("c2", count=3)] == ["t3", "t4"]
    assert q.get("c3", count=3, block_s=0.1) == []


def test_blocking_get_wakes_up_for_a_new_task(queue_factory):
    import threading

    q = queue_factory()
    producer = queue_factory()
    timer = threading.Timer(0.2, lambda: producer.put("late", {"v": 1}))
    timer.start()
    try:
        messages = q.get("c1", count=1, block_s=10)
    finally:
        timer.join()
    assert [m.task_id for m in messages] == ["late"]


def test_crashed_consumer_is_redelivered_after_visibility_timeout(queue_factory):
    q = queue_factory(visibility_timeout_s=0.3)
    patient = queue_factory(visibility_timeout_s=60)  # same queue, a getter with a long timeout
    q.put("job", {"n": 7})
    (taken,) = q.get("crashing", count=1)  # never acked: the consumer "crashed"

    assert patient.get("other", count=1, block_s=0) == []  # not idle for 60 s yet
    (again,) = q.get("other", count=1, block_s=5)
    assert (again.task_id, again.payload, again.attempt, again.consumer) == ("job", {"n": 7}, 2, "other")
    assert again.stream_id == taken.stream_id

    # The crashed consumer's lease is gone: its late ack must not finish the new delivery.
    assert q.ack(taken) is False
    assert q.nack(taken, "late failure") is NackOutcome.LEASE_LOST
    assert q.stats().in_flight == 1
    assert q.ack(again) is True
    assert q.stats().in_flight == 0


def test_visibility_timeout_expiries_dead_letter_after_max_attempts(queue_factory):
    q = queue_factory(visibility_timeout_s=0.2, max_attempts=2)
    q.put("flaky", {"k": "v"})
    attempts = []
    deadline = time.monotonic() + 10
    while len(attempts) < 2 and time.monotonic() < deadline:
        attempts += [m.attempt for m in q.get(f"c{len(attempts)}", count=1, block_s=1)]
    assert attempts == [1, 2]

    # The third claim finds max_attempts used up: dead letter instead of delivery.
    assert q.get("c9", count=1, block_s=0.6) == []
    (dead,) = q.dead_letters()
    assert (dead.task_id, dead.payload, dead.attempts) == ("flaky", {"k": "v"}, 2)
    assert dead.reason == "visibility timeout expired 2 times"
    assert dead.dead_at > 0
    stats = q.stats()
    assert (stats.dead_lettered, stats.outstanding, stats.in_flight, stats.pending) == (1, 0, 0, 0)
    with pytest.raises(TaskDeadLetteredError) as err:
        q.wait_results(["flaky"], timeout_s=5)
    assert err.value.dead == {"flaky": "visibility timeout expired 2 times"}


def test_nack_requeues_then_dead_letters_with_reason(queue_factory):
    q = queue_factory(max_attempts=3)
    q.put("bad", {"video": "v.mp4"})
    seen = []
    for i in range(3):
        (m,) = q.get("w", count=1, block_s=1)
        seen.append(m.attempt)
        outcome = q.nack(m, f"decode failed #{i + 1}")
        assert outcome is (NackOutcome.DEAD_LETTERED if i == 2 else NackOutcome.REQUEUED)
    assert seen == [1, 2, 3]
    (dead,) = q.dead_letters()
    assert (dead.task_id, dead.reason, dead.attempts, dead.payload) == ("bad", "decode failed #3", 3,
                                                                         {"video": "v.mp4"})
    assert q.get("w", count=1, block_s=0) == []
    with pytest.raises(PayloadError):
        q.nack(m, "")


def test_expiry_after_nack_reports_last_error(queue_factory):
    q = queue_factory(visibility_timeout_s=0.2, max_attempts=2)
    q.put("t", {})
    (m,) = q.get("w", count=1)
    assert q.nack(m, "reward server 503") is NackOutcome.REQUEUED
    (m2,) = q.get("w", count=1, block_s=1)
    assert m2.attempt == 2  # never acked: expires, then the next claim dead-letters it
    assert q.get("w", count=1, block_s=0.6) == []
    (dead,) = q.dead_letters()
    assert dead.reason == "visibility timeout expired 1 times; last error: reward server 503"
    assert dead.attempts == 2


def test_redelivered_duplicate_result_is_dropped_and_counted(queue_factory):
    q = queue_factory(visibility_timeout_s=0.2)
    q.put("t", {"x": 3})
    (slow,) = q.get("slow", count=1)
    (fast,) = q.get("fast", count=1, block_s=5)  # re-delivered while "slow" still works on it
    assert q.put_result("t", {"y": 6, "by": "fast"}) is True
    assert q.ack(fast) is True
    assert q.put_result("t", {"y": 6, "by": "slow"}) is False
    assert q.ack(slow) is False
    assert q.get_result("t") == {"y": 6, "by": "fast"}
    stats = q.stats()
    assert (stats.duplicates_dropped, stats.results, stats.outstanding, stats.in_flight) == (1, 1, 0, 0)


def test_wait_results_collects_and_times_out_naming_missing(queue_factory):
    q = queue_factory()
    for t in ("a", "b", "c"):
        q.put(t, {})
    q.put_result("a", 1)
    q.put_result("b", [2, "two"])
    assert q.wait_results(["a", "b", "a"], timeout_s=1) == {"a": 1, "b": [2, "two"]}
    with pytest.raises(ResultTimeoutError) as err:
        q.wait_results(["a", "b", "c"], timeout_s=0.2)
    assert err.value.missing == ["c"]
    assert err.value.results == {"a": 1, "b": [2, "two"]}
    assert "'c'" in str(err.value)


def test_late_result_of_dead_lettered_task_still_counts(queue_factory):
    q = queue_factory(max_attempts=1)
    q.put("t", {})
    (m,) = q.get("w", count=1)
    assert q.nack(m, "gave up") is NackOutcome.DEAD_LETTERED
    assert q.put_result("t", "late but valid") is True
    assert q.wait_results(["t"], timeout_s=1) == {"t": "late but valid"}


def test_duplicate_put_is_refused_but_dead_task_can_be_requeued(queue_factory):
    q = queue_factory(max_attempts=1)
    q.put("t", {"v": 1})
    with pytest.raises(DuplicateTaskError, match="already queued"):
        q.put("t", {"v": 1})
    (m,) = q.get("w", count=1)
    assert q.nack(m, "boom") is NackOutcome.DEAD_LETTERED
    q.put("t", {"v": 2})  # an operator retrying a dead letter
    (m2,) = q.get("w", count=1)
    assert (m2.payload, m2.attempt) == ({"v": 2}, 1)
    q.put_result("t", "ok")
    assert q.ack(m2) is True
    with pytest.raises(DuplicateTaskError, match="already resulted"):
        q.put("t", {"v": 3})


@pytest.mark.parametrize(
    ("task_id", "payload", "needle"),
    [
        ("", {}, "task id"),
        (None, {}, "task id"),
        ("t", ["not", "a", "dict"], "must be a dict"),
        ("t", {"f": float("nan")}, "not JSON-serialisable"),
        ("t", {"o": object()}, "not JSON-serialisable"),
    ],
)
def test_bad_task_input_is_a_typed_error(queue_factory, task_id, payload, needle):
    q = queue_factory()
    with pytest.raises(PayloadError, match=needle):
        q.put(task_id, payload)
    with pytest.raises(PayloadError, match="not JSON-serialisable"):
        q.put_result("t", {1, 2})
    assert q.stats().pending == 0


def test_bad_get_arguments_are_typed_errors(queue_factory):
    q = queue_factory()
    for kwargs in ({"consumer": ""}, {"consumer": "c", "count": 0}, {"consumer": "c", "block_s": -1}):
        with pytest.raises(PayloadError):
            q.get(**kwargs)
    with pytest.raises(PayloadError, match="visibility_timeout_s"):
        queue_factory(visibility_timeout_s=0)
