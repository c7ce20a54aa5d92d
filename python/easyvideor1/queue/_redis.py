"""Redis connection plumbing shared by the stream queue and the version board."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from easyvideor1.queue.base import REDIS_SCHEMES, redact_url
from easyvideor1.queue.errors import QueueError, QueueUnavailableError


def make_client(url: str, op_timeout_s: float, connect_timeout_s: float) -> redis.Redis:
    """A client whose every call fails fast when Redis is gone instead of hanging.

    One retry on a connection error covers a pooled socket that went stale across a Redis
    restart; timeouts are not retried, because a command may have run before the reply was lost.
    """
    if urlsplit(url).scheme not in REDIS_SCHEMES:
        raise QueueError(f"not a Redis URL: {redact_url(url)}")
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=op_timeout_s,
        socket_connect_timeout=connect_timeout_s,
        retry=Retry(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,)),
        retry_on_error=[redis.exceptions.ConnectionError],
    )


@contextlib.contextmanager
def translated(safe_url: str, what: str) -> Iterator[None]:
    """Turn redis-py errors into typed queue errors naming the (redacted) URL and the operation."""
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise QueueUnavailableError(safe_url, f"{what}: {type(exc).__name__}: {exc}") from exc
    except redis.exceptions.RedisError as exc:
        raise QueueError(f"Redis at {safe_url} refused {what}: {type(exc).__name__}: {exc}") from exc


def is_nogroup(exc: BaseException) -> bool:
    return isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("NOGROUP")
