"""Work queues (tasks in, results out) and the weight-version board.

``open_queue(url, namespace)`` picks the backend from the URL, so embedded and distributed
mode differ only in configuration:

* ``memory://NAME`` -> :class:`InProcessQueue` (handles with the same name and namespace share
  one queue inside the process);
* ``redis://host:port/db`` (or ``rediss://``, ``unix://``) -> :class:`RedisStreamQueue`.

Semantics shared by both are documented in :mod:`easyvideor1.queue.base`; the Redis layout and
the recovery procedure after a Redis restart in :mod:`easyvideor1.queue.redis_stream`.
"""

from __future__ import annotations

import importlib
from typing import Any

from easyvideor1.queue.base import (
    DeadLetter,
    Message,
    NackOutcome,
    QueueStats,
    WorkQueue,
    key_prefix,
    split_url,
)
from easyvideor1.queue.errors import (
    BackPressureTimeoutError,
    DuplicateTaskError,
    PayloadError,
    QueueClosedError,
    QueueError,
    QueueUnavailableError,
    ResultTimeoutError,
    TaskDeadLetteredError,
    VersionError,
    VersionTimeoutError,
)
from easyvideor1.queue.lease import LeaseRenewer
from easyvideor1.queue.memory import InProcessQueue
from easyvideor1.queue.versions import InProcessVersionBoard, VersionBoard, WeightVersion, open_version_board

# The Redis backends import the redis client; load them on first use only (embedded mode
# must work without it).
_LAZY = {
    "RedisStreamQueue": "easyvideor1.queue.redis_stream",
    "RedisVersionBoard": "easyvideor1.queue.redis_versions",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_queue(url: str, namespace: str, **options: Any) -> WorkQueue:
    """Open the queue named by ``url`` for run ``namespace``; ``options`` go to the backend
    (``visibility_timeout_s``, ``lease_s``, ``max_attempts``, ``max_in_flight``, ``put_timeout_s``,
    ``collected_retention_s``; Redis also ``stream``, ``group``, ``op_timeout_s``,
    ``connect_timeout_s``)."""
    kind, target = split_url(url)
    if kind == "memory":
        return InProcessQueue(target, namespace, **options)
    return __getattr__("RedisStreamQueue")(target, namespace, **options)


__all__ = [
    "BackPressureTimeoutError",
    "DeadLetter",
    "DuplicateTaskError",
    "InProcessQueue",
    "InProcessVersionBoard",
    "LeaseRenewer",
    "Message",
    "NackOutcome",
    "PayloadError",
    "QueueClosedError",
    "QueueError",
    "QueueStats",
    "QueueUnavailableError",
    "RedisStreamQueue",
    "RedisVersionBoard",
    "ResultTimeoutError",
    "TaskDeadLetteredError",
    "VersionBoard",
    "VersionError",
    "VersionTimeoutError",
    "WeightVersion",
    "WorkQueue",
    "key_prefix",
    "open_queue",
    "open_version_board",
]
