"""Build status records, readable by every replica of the service.

The work queue holds a build's payload and, once, its final result; what it cannot say is
"running, started at T on worker W". That lives here: one JSON record per build id, in
Redis next to the queue (``evr1:{namespace}:frame-build:<id>``, expiring after
``ttl_s``) or, with a ``memory://`` queue, in a process-wide table shared by the app and
its worker threads. Records are advisory: the queue's result stays the authority for a
finished build (see ``app.py``), so a lost record never loses a build.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from typing import Any

from easyvideor1.queue import QueueUnavailableError, key_prefix
from easyvideor1.queue.base import redact_url, split_url

DEFAULT_TTL_S = 7 * 24 * 3600


class BuildBoard(ABC):
    @abstractmethod
    def set(self, build_id: str, record: dict[str, Any]) -> None: ...

    @abstractmethod
    def get(self, build_id: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def ping(self) -> None:
        """Raise QueueUnavailableError when the backend cannot be reached."""

    def update(self, build_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Merge ``fields`` into the record (creating it); returns the new record.

        Not atomic across replicas; only the worker that holds a build's lease writes to it.
        """
        record = self.get(build_id) or {"build_id": build_id}
        record.update(fields)
        self.set(build_id, record)
        return record

    def close(self) -> None:  # noqa: B027 - the in-memory board holds nothing to release
        """Release connections."""


class MemoryBuildBoard(BuildBoard):
    _tables: dict[tuple[str, str], dict[str, str]] = {}
    _lock = threading.Lock()

    def __init__(self, name: str, namespace: str):
        with self._lock:
            self._table = self._tables.setdefault((name, namespace), {})

    def set(self, build_id: str, record: dict[str, Any]) -> None:
        data = json.dumps(record)  # stored as text: readers get copies, like with Redis
        with self._lock:
            self._table[build_id] = data

    def get(self, build_id: str) -> dict[str, Any] | None:
        with self._lock:
            data = self._table.get(build_id)
        return None if data is None else json.loads(data)

    def ping(self) -> None:
        return None


class RedisBuildBoard(BuildBoard):
    def __init__(self, url: str, namespace: str, *, ttl_s: int = DEFAULT_TTL_S, op_timeout_s: float = 3.0):
        import redis

        self._redis = redis
        self.url = redact_url(url)
        self.prefix = key_prefix(namespace) + "frame-build:"
        self.ttl_s = int(ttl_s)
        self._r = redis.Redis.from_url(url, decode_responses=True, socket_timeout=op_timeout_s,
                                       socket_connect_timeout=min(2.0, op_timeout_s))

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except self._redis.exceptions.RedisError as exc:
            raise QueueUnavailableError(self.url, f"{what}: {type(exc).__name__}: {exc}") from exc

    def set(self, build_id: str, record: dict[str, Any]) -> None:
        self._call("SET build record", self._r.set, self.prefix + build_id, json.dumps(record), ex=self.ttl_s)

    def get(self, build_id: str) -> dict[str, Any] | None:
        data = self._call("GET build record", self._r.get, self.prefix + build_id)
        return None if data is None else json.loads(data)

    def ping(self) -> None:
        self._call("PING", self._r.ping)

    def close(self) -> None:
        self._r.close()


def open_build_board(queue_url: str, namespace: str) -> BuildBoard:
    """The board that lives beside the queue named by ``queue_url``."""
    kind, target = split_url(queue_url)
    if kind == "memory":
        return MemoryBuildBoard(target, namespace)
    return RedisBuildBoard(target, namespace)
