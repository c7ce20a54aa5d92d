"""Redis-only behaviour of the stream queue: key namespacing, outages, restarts, lost groups."""

from __future__ import annotations

import pytest
import redis
from queue_helpers import fresh_namespace
from servers import free_port

from easyvideor1.queue import (
    QueueUnavailableError,
    RedisStreamQueue,
    key_prefix,
    open_queue,
    open_version_board,
)


def test_every_redis_key_starts_with_the_namespace_prefix(redis_instance):
    namespaces = [fresh_namespace(), fresh_namespace()]
    for ns in namespaces:
        for stream in ("tasks", "rollouts"):
            q = RedisStreamQueue(redis_instance.url, ns, stream=stream, visibility_timeout_s=0.05,
                                 max_attempts=1)
            q.put("a", {"x": 1})
            q.put("b", {"x": 2})
            q.put("c", {"x": 3})
            a, b, c = q.get("w", count=3)
            q.put_result("a", 1)
            q.put_result("a", 1)  # duplicate counter
            q.ack(a)
            q.nack(b, "dead letter")
            q.get("w", count=1, block_s=0.3)  # c expires and is dead-lettered on the claim
            q.stats()
            q.close()
        board = open_version_board(redis_instance.url, ns)
        board.publish(1, "s3://weights/1")
        board.close()

    client = redis.Redis.from_url(redis_instance.url, decode_responses=True)
    keys = list(client.scan_iter(count=1000))
    client.close()
    prefixes = tuple(key_prefix(ns) for ns in namespaces)
    assert keys and all(k.startswith(prefixes) for k in keys), keys
    for prefix in prefixes:  # both runs wrote: the check above is not vacuous
        assert {k for k in keys if k.startswith(prefix)} >= {
            f"{prefix}tasks", f"{prefix}tasks:dead", f"{prefix}tasks:results", f"{prefix}rollouts",
            f"{prefix}weights:latest",
        }


@pytest.mark.timeout(60)
def test_redis_down_is_a_fast_typed_error_naming_the_url(redis_instance):
    q = RedisStreamQueue(redis_instance.url, fresh_namespace(), op_timeout_s=1, connect_timeout_s=1)
    q.put("a", {})
    (m,) = q.get("w", count=1)
    board = open_version_board(redis_instance.url, q.namespace, op_timeout_s=1, connect_timeout_s=1)
    redis_instance.stop()

    operations = {
        "put": lambda: q.put("b", {}),
        "get": lambda: q.get("w", count=1, block_s=1),
        "ack": lambda: q.ack(m),
        "nack": lambda: q.nack(m, "x"),
        "put_result": lambda: q.put_result("a", 1),
        "get_result": lambda: q.get_result("a"),
        "wait_results": lambda: q.wait_results(["a"], timeout_s=5),
        "stats": q.stats,
        "dead_letters": q.dead_letters,
        "recover": lambda: q.recover({"c": {}}),
        "purge": q.purge,
        "open": lambda: RedisStreamQueue(redis_instance.url, "other", connect_timeout_s=1),
        "publish": lambda: board.publish(1, "s3://w/1"),
        "wait_for": lambda: board.wait_for(1, timeout_s=5),
    }
    for name, operation in operations.items():
        with pytest.raises(QueueUnavailableError) as err:
            operation()
        assert err.value.url == redis_instance.url, name
        assert f"127.0.0.1:{redis_instance.port}" in str(err.value), name
    q.close()
    board.close()


def test_restart_without_persistence_recovers_by_reputting(redis_instance):
    producer = RedisStreamQueue(redis_instance.url, fresh_namespace(), visibility_timeout_s=0.3)
    worker = RedisStreamQueue(redis_instance.url, producer.namespace, visibility_timeout_s=0.3)
    kept = {f"t{i}": {"i": i} for i in range(4)}  # the producer keeps payloads until resulted
    for task_id, payload in kept.items():
        producer.put(task_id, payload)
    (m,) = worker.get("w", count=1)
    worker.put_result(m.task_id, m.payload["i"])
    worker.ack(m)
    collected = producer.wait_results([m.task_id], timeout_s=5)
    awaiting = {t: p for t, p in kept.items() if t not in collected}
    worker.get("w", count=1)  # in flight when Redis dies

    redis_instance.restart()  # no AOF, no snapshot: every key is gone
    assert producer.stats().outstanding == 0
    assert sorted(producer.recover(awaiting)) == ["t1", "t2", "t3"]
    assert producer.recover(awaiting) == []

    got = worker.get("w", count=10, block_s=2)  # consumer group re-created transparently
    assert sorted((x.task_id, x.attempt) for x in got) == [("t1", 1), ("t2", 1), ("t3", 1)]
    for x in got:
        worker.put_result(x.task_id, x.payload["i"])
        assert worker.ack(x)
    assert producer.wait_results(awaiting, timeout_s=5) == {"t1": 1, "t2": 2, "t3": 3}
    producer.close()
    worker.close()


def test_restart_with_persistence_resumes_without_reputting(redis_instance):
    q = RedisStreamQueue(redis_instance.url, fresh_namespace(), visibility_timeout_s=0.3)
    tasks = {f"t{i}": {"i": i} for i in range(3)}
    for task_id, payload in tasks.items():
        q.put(task_id, payload)
    q.get("crashed", count=2)  # two in flight, one pending
    client = redis.Redis.from_url(redis_instance.url)
    client.save()  # what AOF gives continuously: the data survives the restart
    client.close()

    redis_instance.restart()
    assert q.recover(tasks) == []  # everything is still known: nothing re-put
    got = []
    for _ in range(10):
        got += q.get("w", count=3, block_s=1)
        if len(got) >= 3:
            break
    assert sorted((m.task_id, m.attempt) for m in got) == [("t0", 2), ("t1", 2), ("t2", 1)]
    q.close()


def test_deleted_consumer_group_is_recreated_transparently(redis_url):
    q = RedisStreamQueue(redis_url, fresh_namespace())
    q.put("a", {"v": 1})
    client = redis.Redis.from_url(redis_url)
    assert client.xgroup_destroy(f"{key_prefix(q.namespace)}tasks", "workers") == 1
    client.close()
    assert q.stats().pending == 1  # NOGROUP -> group re-created from id 0
    assert [m.payload for m in q.get("w", count=5)] == [{"v": 1}]
    q.purge()
    q.close()


def test_unreachable_redis_error_names_url_without_password():
    port = free_port()  # nothing listens there
    url = f"redis://evr1:s3cret-pw@127.0.0.1:{port}/0"
    with pytest.raises(QueueUnavailableError) as err:
        open_queue(url, "ns", connect_timeout_s=1)
    assert "s3cret-pw" not in str(err.value) and "s3cret-pw" not in err.value.url
    assert err.value.url == f"redis://evr1:***@127.0.0.1:{port}/0"
    assert err.value.url in str(err.value)
