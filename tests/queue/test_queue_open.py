"""``open_queue`` URL dispatch, the in-process registry, and argument validation."""

from __future__ import annotations

import pytest
from queue_helpers import fresh_namespace

from easyvideor1.errors import ConfigError, EasyVideoR1Error
from easyvideor1.queue import (
    InProcessQueue,
    PayloadError,
    QueueUnavailableError,
    RedisStreamQueue,
    key_prefix,
    open_queue,
)


def test_url_scheme_selects_backend(redis_url):
    ns = fresh_namespace()
    with open_queue("memory://dispatch", ns) as mem, open_queue(redis_url, ns) as red:
        assert isinstance(mem, InProcessQueue) and mem.name == "dispatch"
        assert isinstance(red, RedisStreamQueue) and red.url == redis_url
        red.purge()


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "kafka://broker/topic", "", "memory://", "memory://a/b",
                                 "memory://a:b"])
def test_unsupported_url_is_a_config_error(url):
    with pytest.raises(ConfigError) as err:
        open_queue(url, "ns")
    assert isinstance(err.value, EasyVideoR1Error)
    assert url in str(err.value) and "memory://NAME" in str(err.value)


def test_unknown_scheme_error_redacts_password():
    with pytest.raises(ConfigError) as err:
        open_queue("amqp://user:hunter2@127.0.0.1/", "ns")
    assert "hunter2" not in str(err.value) and "user:***@127.0.0.1" in str(err.value)


def test_memory_handles_share_state_by_name_and_namespace():
    ns = fresh_namespace()
    a = open_queue("memory://shared", ns)
    b = open_queue("memory://shared", ns)
    other_name = open_queue("memory://elsewhere", ns)
    other_ns = open_queue("memory://shared", fresh_namespace())
    a.put("t", {"v": 1})
    assert other_name.get("w", count=5) == [] and other_ns.get("w", count=5) == []
    (m,) = b.get("w", count=5)
    assert m.payload == {"v": 1}
    b.put_result("t", "r")
    assert a.get_result("t") == "r"
    for q in (a, b, other_name, other_ns):
        q.purge()
        q.close()


def test_queue_option_validation():
    for bad in ({"max_attempts": 0}, {"max_attempts": 1.5}, {"max_in_flight": -1}, {"put_timeout_s": 0},
                {"visibility_timeout_s": True}):
        with pytest.raises(PayloadError):
            open_queue("memory://opts", "ns", **bad)
    for bad_ns in ("", "a:b", "a*", "x" * 129, None):
        with pytest.raises(PayloadError, match="namespace"):
            open_queue("memory://opts", bad_ns)
    with pytest.raises(PayloadError, match="stream name"):
        RedisStreamQueue("redis://127.0.0.1:1/0", "ns", stream="a:b")


def test_key_prefix_is_a_cluster_hash_tag_per_namespace():
    assert key_prefix("run-7") == "evr1:{run-7}:"
    with pytest.raises(PayloadError):
        key_prefix("run}7")


def test_redis_queue_rejects_non_redis_url():
    with pytest.raises(EasyVideoR1Error, match="not a Redis URL"):
        RedisStreamQueue("http://127.0.0.1:1/0", "ns")
    assert issubclass(QueueUnavailableError, EasyVideoR1Error)
