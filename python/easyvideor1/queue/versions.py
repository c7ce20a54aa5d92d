"""Weight-version announcements: the trainer publishes, rollout engines wait and reload.

``publish(version, uri, meta)`` records where the weights of ``version`` live; versions must
strictly increase (re-publishing or going back is a :class:`VersionError`, so a late or
restarted trainer can never roll engines back). ``latest()`` reads the newest record and
``wait_for(min_version, timeout_s)`` blocks until one at least that new exists.

The Redis implementation is in :mod:`easyvideor1.queue.redis_versions`.
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, NamedTuple

from easyvideor1.logging import event, get_logger
from easyvideor1.queue.base import encode_json, split_url, validate_namespace
from easyvideor1.queue.errors import PayloadError, QueueClosedError, VersionError, VersionTimeoutError

_log = get_logger(__name__)
_MAX_VERSION = 2**53  # Lua compares versions as doubles; beyond this they stop being exact


class WeightVersion(NamedTuple):
    version: int
    uri: str
    meta: dict[str, Any]


def _record(version: int, uri: str, meta: dict[str, Any] | None) -> WeightVersion:
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < _MAX_VERSION:
        raise PayloadError(f"weight version must be an integer in [0, 2**53), got {version!r}")
    if not isinstance(uri, str) or not uri:
        raise PayloadError(f"weight version {version}: uri must be a non-empty string, got {uri!r}")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise PayloadError(f"weight version {version}: meta must be a dict, got {type(meta).__name__}")
    return WeightVersion(version, uri, meta)


class VersionBoard(ABC):
    """Latest published weight version of a run; see the module docstring."""

    def __init__(self, namespace: str, board: str):
        self.namespace = validate_namespace(namespace)
        self.board = validate_namespace(board, what="board name")
        self._closed = False

    def publish(self, version: int, uri: str, meta: dict[str, Any] | None = None) -> WeightVersion:
        self._check_open()
        record = _record(version, uri, meta)
        data = encode_json("weight-version record", f"v{version}", record._asdict())
        current = self._publish(record, data)
        if current is not None:
            raise VersionError(
                f"cannot publish weight version {version} on board {self.board!r} of namespace "
                f"{self.namespace!r}: version {current} is already published (versions must increase)"
            )
        event(_log, "weights.published", namespace=self.namespace, version=version, uri=uri)
        return record

    def latest(self) -> WeightVersion | None:
        self._check_open()
        return self._latest()[0]

    def wait_for(self, min_version: int, timeout_s: float) -> WeightVersion:
        """The latest record once its version is >= ``min_version``; VersionTimeoutError otherwise."""
        self._check_open()
        deadline = time.monotonic() + timeout_s
        while True:
            record, token = self._latest()
            if record is not None and record.version >= min_version:
                return record
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                seen = "none" if record is None else record.version
                raise VersionTimeoutError(
                    f"weight version >= {min_version} not published on board {self.board!r} of "
                    f"namespace {self.namespace!r} within {timeout_s:g}s (latest: {seen})"
                )
            self._wait_change(token, remaining)

    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"version board {self.board!r} of namespace {self.namespace!r} is closed")

    @abstractmethod
    def _publish(self, record: WeightVersion, data: str) -> int | None:
        """Store ``record`` unless a version >= it exists; return that version, or None."""

    @abstractmethod
    def _latest(self) -> tuple[WeightVersion | None, Any]:
        """The latest record and a token for ``_wait_change`` (taken atomically with it)."""

    @abstractmethod
    def _wait_change(self, token: Any, timeout_s: float) -> None: ...


class InProcessVersionBoard(VersionBoard):
    _registry: dict[tuple[str, str, str], tuple[threading.Condition, list[WeightVersion]]] = {}
    _registry_lock = threading.Lock()

    def __init__(self, name: str, namespace: str, board: str = "weights"):
        super().__init__(namespace, board)
        with self._registry_lock:
            self._cond, self._history = self._registry.setdefault(
                (validate_namespace(name, what="memory board name"), self.namespace, self.board),
                (threading.Condition(), []),
            )

    def _publish(self, record: WeightVersion, data: str) -> int | None:
        with self._cond:
            if self._history and record.version <= self._history[-1].version:
                return self._history[-1].version
            # Store a JSON round-trip copy so callers can't mutate the published meta.
            self._history.append(WeightVersion(**json.loads(data)))
            self._cond.notify_all()
            return None

    def _latest(self) -> tuple[WeightVersion | None, Any]:
        with self._cond:
            return (self._history[-1] if self._history else None), len(self._history)

    def _wait_change(self, token: Any, timeout_s: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: len(self._history) != token, timeout=timeout_s)


def open_version_board(url: str, namespace: str, board: str = "weights", **options: Any) -> VersionBoard:
    """``redis://...`` -> :class:`RedisVersionBoard`, ``memory://name`` -> :class:`InProcessVersionBoard`."""
    kind, target = split_url(url)
    if kind == "memory":
        return InProcessVersionBoard(target, namespace, board, **options)
    # Imported here so the embedded mode never needs the redis client installed.
    from easyvideor1.queue.redis_versions import RedisVersionBoard

    return RedisVersionBoard(target, namespace, board, **options)
