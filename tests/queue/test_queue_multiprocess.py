"""Two real worker processes on Redis; one is SIGKILLed holding leases; all results arrive once.

With plain visibility timeouts the dead worker's batch waits out the timeout; with leases a hung
but live worker keeps its batch (its heartbeat renews it) and loses it about a lease after the
SIGKILL, long before the visibility timeout.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from queue_helpers import fresh_namespace

from easyvideor1.queue import RedisStreamQueue

WORKER = Path(__file__).with_name("queue_worker.py")


def _events(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def _wait_for_event(log: Path, name: str, proc: subprocess.Popen, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for e in _events(log):
            if e["event"] == name:
                return e
        if proc.poll() is not None:
            raise AssertionError(f"worker exited with {proc.returncode} before logging {name!r}")
        time.sleep(0.05)
    raise AssertionError(f"worker did not log {name!r} within {timeout_s}s")


def _spawn(url: str, namespace: str, consumer: str, log: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), url, namespace, consumer, "--log", str(log), *extra])


def _stop(*procs: subprocess.Popen | None) -> None:
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)


def test_sigkilled_worker_loses_nothing_and_results_arrive_once(redis_url, tmp_path):
    producer = RedisStreamQueue(redis_url, fresh_namespace(), visibility_timeout_s=0.5)
    ids = [f"t{i}" for i in range(200)]
    for i, task_id in enumerate(ids):
        producer.put(task_id, {"x": i})

    log_a, log_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    # "a" works alone first, so it surely gets 10 tasks done before it hangs holding a batch.
    victim = _spawn(redis_url, producer.namespace, "a", log_a, "--visibility", "0.5", "--hang-after", "10",
                    "--work-s", "0.02")
    survivor = None
    try:
        _wait_for_event(log_a, "ready", victim, 30)
        survivor = _spawn(redis_url, producer.namespace, "b", log_b, "--visibility", "0.5")
        hung = _wait_for_event(log_a, "hung", victim, 30)
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL

        results = producer.wait_results(ids, timeout_s=60)
    finally:
        _stop(victim, survivor)
    assert survivor.returncode == 0

    assert results == {f"t{i}": {"y": 2 * i, "by": results[f"t{i}"]["by"]} for i in range(200)}
    done_a = [e for e in _events(log_a) if e["event"] == "done"]
    done_b = [e for e in _events(log_b) if e["event"] == "done"]
    assert len(done_a) >= 10 and done_b
    # Every task's result was written exactly once, by the worker that the result names.
    written = [(e["task"], who) for who, done in (("a", done_a), ("b", done_b)) for e in done if e["written"]]
    assert sorted(t for t, _ in written) == sorted(ids)
    assert all(results[t]["by"] == who for t, who in written)
    # The batch "a" held when it died was re-delivered to "b" after the visibility timeout.
    redelivered = {e["task"]: e["attempt"] for e in done_b if e["task"] in hung["tasks"]}
    assert hung["tasks"] and redelivered == {t: 2 for t in hung["tasks"]}

    stats = producer.stats()
    assert (stats.results, stats.outstanding, stats.pending, stats.in_flight, stats.dead_lettered) == (
        200, 0, 0, 0, 0)
    assert stats.duplicates_dropped == sum(not e["written"] for e in done_a + done_b)
    producer.purge()
    producer.close()


def test_leases_keep_a_hung_live_workers_batch_and_free_it_soon_after_sigkill(redis_url, tmp_path):
    # The cap is far beyond every wait here: only an expired lease can move a task.
    cap, lease = "300", "1.0"
    producer = RedisStreamQueue(redis_url, fresh_namespace(), visibility_timeout_s=300, lease_s=1.0)
    ids = [f"t{i}" for i in range(60)]
    for i, task_id in enumerate(ids):
        producer.put(task_id, {"x": i})

    log_a, log_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    options = ("--visibility", cap, "--lease", lease)
    victim = _spawn(redis_url, producer.namespace, "a", log_a, *options, "--hang-after", "10", "--work-s", "0.02")
    survivor = None
    try:
        _wait_for_event(log_a, "ready", victim, 30)
        survivor = _spawn(redis_url, producer.namespace, "b", log_b, *options)
        hung = _wait_for_event(log_a, "hung", victim, 30)
        # "a" is alive (its heartbeat thread runs while its main thread hangs): "b" finishes every
        # other task and keeps asking for many more lease periods without getting one of "a"'s.
        producer.wait_results([t for t in ids if t not in hung["tasks"]], timeout_s=60)
        time.sleep(8 * float(lease))
        assert not [e for e in _events(log_b) if e["event"] == "done" and e["task"] in hung["tasks"]]
        assert producer.stats().in_flight == len(hung["tasks"])

        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        # Far less than the 300 s visibility timeout: the dead worker's leases ran out.
        results = producer.wait_results(ids, timeout_s=60)
    finally:
        _stop(victim, survivor)
    assert survivor.returncode == 0

    assert results == {f"t{i}": {"y": 2 * i, "by": results[f"t{i}"]["by"]} for i in range(60)}
    done_a = [e for e in _events(log_a) if e["event"] == "done"]
    done_b = [e for e in _events(log_b) if e["event"] == "done"]
    written = [(e["task"], who) for who, done in (("a", done_a), ("b", done_b)) for e in done if e["written"]]
    assert sorted(t for t, _ in written) == sorted(ids)  # each task's result stored exactly once
    assert all(results[t]["by"] == who for t, who in written)
    redelivered = {e["task"]: e["attempt"] for e in done_b if e["task"] in hung["tasks"]}
    assert hung["tasks"] and redelivered == {t: 2 for t in hung["tasks"]}
    # Only the killed worker's batch was delivered twice: no live worker lost a lease.
    assert all(e["attempt"] == 1 for e in done_a + done_b if e["task"] not in hung["tasks"])
    stats = producer.stats()
    assert (stats.results, stats.outstanding, stats.pending, stats.in_flight, stats.dead_lettered,
            stats.duplicates_dropped) == (60, 0, 0, 0, 0, 0)
    producer.purge()
    producer.close()
