"""WorkQueue contract, leases: a renewed lease stays with its live holder, an unrenewed one moves on
after ``lease_s`` (long before ``visibility_timeout_s``), and renewals stop at that cap.

Every test runs against both backends (in-process and Redis Streams on a real redis-server).
"""

from __future__ import annotations

import time

import pytest

from easyvideor1.queue import LeaseRenewer, PayloadError

LEASE = 1.0  # long enough that a loaded machine still renews (every LEASE / 3) in time
CAP = 120.0  # far beyond every wait below: only an expired lease can move a task


def _wait_until(check, budget_s: float, what: str) -> None:
    deadline = time.monotonic() + budget_s
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {budget_s}s"
        time.sleep(0.02)


def test_live_holder_keeps_its_task_while_a_dead_ones_task_moves_on(queue_factory):
    q = queue_factory(visibility_timeout_s=CAP, lease_s=LEASE)
    other = queue_factory(visibility_timeout_s=CAP, lease_s=LEASE)
    q.put("kept", {"x": 1})
    q.put("abandoned", {"x": 2})
    (kept,) = q.get("alive", count=1)
    (abandoned,) = q.get("dead", count=1)  # "dead" never renews nor acks
    with LeaseRenewer(q) as renewer:
        renewer.hold([kept])
        # Nothing renews "abandoned": the next getter takes it once its lease ran out.
        (taken,) = other.get("other", count=1, block_s=CAP / 2)
        assert (taken.task_id, taken.payload, taken.attempt) == ("abandoned", {"x": 2}, 2)
        assert other.put_result("abandoned", {"y": 4}) is True
        assert other.ack(taken) is True
        # "kept" stays with "alive" for many lease periods, however often others ask.
        started = time.monotonic()
        while time.monotonic() - started < 6 * LEASE:
            assert other.get("other", count=1, block_s=LEASE / 2) == []
        assert renewer.held() == [kept] and renewer.lost == 0 and renewer.renewals >= 1
        assert q.put_result("kept", {"y": 2}) is True
        assert q.ack(kept) is True
        renewer.drop([kept])
    assert q.put_result("abandoned", {"y": 4, "late": True}) is False  # the dead one's late result
    assert q.ack(abandoned) is False
    assert q.wait_results(["kept", "abandoned"], timeout_s=5) == {"kept": {"y": 2}, "abandoned": {"y": 4}}
    stats = q.stats()
    assert (stats.results, stats.duplicates_dropped, stats.in_flight, stats.pending, stats.outstanding) == (
        2, 1, 0, 0, 0)


def test_renew_keeps_only_the_current_delivery(queue_factory):
    q = queue_factory(visibility_timeout_s=CAP, lease_s=0.2)
    q.put("t", {})
    (first,) = q.get("a", count=1)
    assert q.renew([first]) == [first]
    (second,) = q.get("b", count=1, block_s=30)  # "a" stopped renewing
    assert (second.stream_id, second.attempt) == (first.stream_id, 2)
    assert q.renew([first]) == []  # a late heartbeat of "a" must not take the task back
    assert q.renew([second, first]) == [second]
    assert q.ack(first) is False
    assert q.ack(second) is True
    assert q.renew([second]) == []  # finished: nothing to renew
    assert q.stats().in_flight == 0


def test_renewals_stop_at_the_visibility_timeout(queue_factory):
    q = queue_factory(visibility_timeout_s=2.0, lease_s=0.2)
    q.put("stuck", {})
    (m,) = q.get("w", count=1)
    assert q.renew([m]) == [m]
    time.sleep(2.0)  # past the cap (minus one lease): a renewal would hold it longer than allowed
    assert q.renew([m]) == []
    assert q.ack(m) is True  # still its own until another getter claims it

    q.put("stuck-too", {})
    (m2,) = q.get("w", count=1)
    with LeaseRenewer(q) as renewer:
        renewer.hold([m2])
        # The heartbeat runs until the cap; then the lease runs out and the task moves on.
        (again,) = q.get("other", count=1, block_s=60)
        assert (again.task_id, again.attempt) == ("stuck-too", 2)
        _wait_until(lambda: not renewer.held(), 30, "the renewer giving the task up")
        assert renewer.lost == 1


def test_renewer_counts_only_leases_it_lost(queue_factory):
    q = queue_factory(visibility_timeout_s=CAP, lease_s=LEASE)
    for t in ("a", "b"):
        q.put(t, {})
    a, b = q.get("w", count=2)
    with LeaseRenewer(q) as renewer:
        renewer.hold([a, b])
        assert q.ack(a) is True
        renewer.drop([a])  # finished by its holder: not lost
        assert q.ack(b) is True  # finished but still held: the next round finds it gone
        renewer.renew_now()
        assert renewer.held() == [] and renewer.lost == 1


def test_lease_defaults_to_the_visibility_timeout_and_may_not_exceed_it(queue_factory):
    q = queue_factory(visibility_timeout_s=5)
    assert q.lease_s == 5
    q.put("t", {})
    (m,) = q.get("w", count=1)
    assert q.renew([m]) == []  # the lease is the whole cap: nothing left to extend
    assert LeaseRenewer(q).renewable is False
    with pytest.raises(PayloadError, match="lease_s"):
        queue_factory(visibility_timeout_s=1, lease_s=2)
    with pytest.raises(PayloadError, match="lease_s"):
        queue_factory(lease_s=0)
