"""The ``WorkQueue`` interface shared by the in-process and the Redis Streams backends.

Protocol for a worker: ``get`` leases messages; for each one write ``put_result`` first, then
``ack``. A lease lasts ``lease_s``; a worker that is still on a task extends it with ``renew``
(a heartbeat: :class:`~easyvideor1.queue.lease.LeaseRenewer` calls it every ``lease_s / 3`` for
the messages in hand). A lease neither acked, nacked nor renewed within ``lease_s`` is re-delivered
to the next ``get`` (the worker is presumed dead), so a dead worker's tasks move on about
``lease_s`` after it died, however long the tasks take. ``visibility_timeout_s`` caps one
delivery, renewals included: ``renew`` does not extend a lease past ``visibility_timeout_s``
after the delivery, so a worker that lives but is stuck loses its task then. ``lease_s``
defaults to ``visibility_timeout_s``: a consumer that never renews sees the plain visibility
timeout. Every delivery counts one attempt; once a task has used ``max_attempts`` it goes to
the dead letters with the reason of its last failure.

Results are written once per task id: a second ``put_result`` (a re-delivered task finished by
two workers) is dropped and counted in ``stats().duplicates_dropped``.

Releasing: results stay until the producer calls ``release(task_ids)`` for the ones it has
collected. That deletes them (and dead-letter index entries) and keeps a *collected* marker per
id for ``collected_retention_s`` (default ``max_attempts * visibility_timeout_s`` + 60 s), and
for as long as the task still has a delivered stream entry: meanwhile a late ``put_result`` is a
duplicate (dropped, counted), a re-delivery is dropped instead of handed out, and ``put`` raises
:class:`DuplicateTaskError` ("already collected"; ``recover`` skips it). Memory is then bounded
by throughput x retention instead of growing for the whole run.

Back-pressure: a task is *outstanding* from ``put`` until its result is written or it is
dead-lettered; ``put`` blocks while ``max_in_flight`` tasks are outstanding.

The blocking loops (``put``, ``wait_results``, ``recover``) live here once; a backend supplies
the atomic primitives (``_try_put``, ``_outcomes``...) and how to wait for a change (``_pause``).
"""

from __future__ import annotations

import enum
import json
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from easyvideor1.errors import ConfigError
from easyvideor1.queue.errors import (
    BackPressureTimeoutError,
    DuplicateTaskError,
    PayloadError,
    QueueClosedError,
    ResultTimeoutError,
    TaskDeadLetteredError,
)

_NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
REDIS_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class Message:
    """One leased delivery of a task. ``attempt`` is 1 on the first delivery."""

    stream_id: str
    task_id: str
    payload: dict[str, Any]
    attempt: int
    consumer: str
    # time.monotonic() of the lease on the leasing host (taken just before it): ``renew`` measures
    # the visibility-timeout cap from it.
    leased_at: float = field(default=0.0, compare=False)


@dataclass(frozen=True)
class DeadLetter:
    """A task that will not be retried: why, after how many deliveries, and when (epoch s)."""

    task_id: str
    payload: dict[str, Any]
    reason: str
    attempts: int
    dead_at: float


@dataclass(frozen=True)
class QueueStats:
    pending: int  # queued, not delivered yet
    in_flight: int  # delivered, not acked yet
    dead_lettered: int  # dead-letter events so far
    duplicates_dropped: int  # duplicate results dropped
    outstanding: int  # put, neither resulted nor dead-lettered (what back-pressure counts)
    results: int  # results stored
    collected: int = 0  # collected markers held (released tasks, kept for the retention window)


class NackOutcome(enum.Enum):
    REQUEUED = "requeued"
    DEAD_LETTERED = "dead_lettered"
    LEASE_LOST = "lease_lost"  # the lease expired and the task went to someone else (or died)


class PutCode(enum.Enum):
    OK = "ok"
    FULL = "full"
    QUEUED = "already queued"
    RESULTED = "already resulted"
    COLLECTED = "already collected"  # its result was released; it must not run again


def validate_namespace(namespace: str, what: str = "namespace") -> str:
    # ':' or glob characters would let one namespace's key pattern match another's keys.
    if not isinstance(namespace, str) or not _NAMESPACE_RE.match(namespace):
        raise PayloadError(f"{what} {namespace!r} must be 1-128 characters of [A-Za-z0-9_.-]")
    return namespace


def key_prefix(namespace: str) -> str:
    """Prefix of every Redis key of a run. The braces are a Redis Cluster hash tag: all keys of
    a namespace land in one slot, which the multi-key Lua scripts require there."""
    return f"evr1:{{{validate_namespace(namespace)}}}:"


def split_url(url: str) -> tuple[str, str]:
    """``("redis", url)`` for redis://, rediss:// and unix:// URLs, ``("memory", name)`` for
    ``memory://name``; anything else is a :class:`ConfigError` naming the URL."""
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme in REDIS_SCHEMES:
        return "redis", url
    if scheme == "memory":
        parts = urlsplit(url)
        if parts.path or parts.query or not _NAMESPACE_RE.match(parts.netloc):
            raise ConfigError(f"in-process queue URL must be memory://NAME with NAME of [A-Za-z0-9_.-], "
                              f"got {url!r}")
        return "memory", parts.netloc
    raise ConfigError(
        f"unsupported queue URL {redact_url(url) if isinstance(url, str) else url!r}: "
        "expected redis://, rediss://, unix:// or memory://NAME"
    )


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe for logs and error messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"{parts.username or ''}:***@{host}", parts.path, parts.query,
                       parts.fragment))


def check_task_id(task_id: str) -> str:
    if not isinstance(task_id, str) or not task_id:
        raise PayloadError(f"task id must be a non-empty string, got {task_id!r}")
    return task_id


def encode_json(what: str, task_id: str, value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} of task {task_id!r} is not JSON-serialisable: {exc}") from exc


RETENTION_MARGIN_S = 60.0  # on top of the longest re-delivery span: a straggler's result is late too


def _positive(name: str, value: float, kind: type | tuple[type, ...] = (int, float)) -> float:
    if not isinstance(value, kind) or isinstance(value, bool) or not value > 0:
        noun = "integer" if kind is int else "number"
        raise PayloadError(f"{name} must be a positive {noun}, got {value!r}")
    return value


class WorkQueue(ABC):
    """Tasks in, leased messages out, results once per task id. See the module docstring."""

    def __init__(
        self,
        namespace: str,
        *,
        visibility_timeout_s: float = 60.0,
        lease_s: float | None = None,
        max_attempts: int = 3,
        max_in_flight: int = 10_000,
        put_timeout_s: float = 60.0,
        collected_retention_s: float | None = None,
    ):
        self.namespace = validate_namespace(namespace)
        self.visibility_timeout_s = float(_positive("visibility_timeout_s", visibility_timeout_s))
        self.lease_s = self.visibility_timeout_s if lease_s is None else float(_positive("lease_s", lease_s))
        if self.lease_s > self.visibility_timeout_s:
            raise PayloadError(f"lease_s ({self.lease_s}) must be <= visibility_timeout_s "
                               f"({self.visibility_timeout_s}), the longest one delivery is held")
        self.max_attempts = int(_positive("max_attempts", max_attempts, int))
        self.max_in_flight = int(_positive("max_in_flight", max_in_flight, int))
        self.put_timeout_s = float(_positive("put_timeout_s", put_timeout_s))
        if collected_retention_s is None:
            collected_retention_s = self.max_attempts * self.visibility_timeout_s + RETENTION_MARGIN_S
        self.collected_retention_s = float(_positive("collected_retention_s", collected_retention_s))
        self._closed = False

    # ----------------------------------------------------------------- public API
    def put(self, task_id: str, payload: dict[str, Any], timeout_s: float | None = None) -> str:
        """Queue a task; returns its stream id. Blocks while the queue is full (back-pressure)."""
        stream_id = self._put(task_id, payload, timeout_s)
        if isinstance(stream_id, PutCode):
            raise DuplicateTaskError(task_id, stream_id.value)
        return stream_id

    def get(self, consumer: str, count: int = 1, block_s: float = 0.0) -> list[Message]:
        """Lease up to ``count`` messages, waiting up to ``block_s`` for the first one."""
        self._check_open()
        if not isinstance(consumer, str) or not consumer:
            raise PayloadError(f"consumer must be a non-empty string, got {consumer!r}")
        if not isinstance(count, int) or count < 1:
            raise PayloadError(f"count must be a positive integer, got {count!r}")
        if block_s < 0:
            raise PayloadError(f"block_s must be >= 0, got {block_s!r}")
        return self._get(consumer, count, time.monotonic() + block_s)

    def ack(self, message: Message) -> bool:
        """Finish a delivery. False when the lease was lost (the task was re-delivered elsewhere)."""
        self._check_open()
        return self._ack(message)

    def renew(self, messages: Iterable[Message]) -> list[Message]:
        """Extend the leases of deliveries still in hand by ``lease_s``; returns those renewed.

        A message is not renewed when its lease is gone (acked, nacked, or expired and delivered
        again) or when the renewed lease would end more than ``visibility_timeout_s`` after the
        delivery (the cap on holding one task); its lease then runs out as it stands.
        """
        self._check_open()
        messages = list(messages)
        latest = time.monotonic() + self.lease_s - self.visibility_timeout_s  # leased earlier: capped
        keep = [m for m in messages if m.leased_at >= latest]
        renewed = self._renew(keep) if keep else []
        return [m for m, ok in zip(keep, renewed) if ok]

    def nack(self, message: Message, reason: str) -> NackOutcome:
        """Give a delivery back: re-queued, or dead-lettered with ``reason`` after max attempts."""
        self._check_open()
        if not isinstance(reason, str) or not reason:
            raise PayloadError("nack needs a non-empty reason")
        return self._nack(message, reason)

    def put_result(self, task_id: str, result: Any) -> bool:
        """Store the result of a task once. False (and counted) when one was already stored."""
        self._check_open()
        return self._put_result(check_task_id(task_id), encode_json("result", task_id, result))

    def get_result(self, task_id: str, default: Any = None) -> Any:
        self._check_open()
        results, _ = self._outcomes([check_task_id(task_id)])
        return results.get(task_id, default)

    def wait_results(self, task_ids: Iterable[str], timeout_s: float) -> dict[str, Any]:
        """Wait until every task has a result. Raises :class:`ResultTimeoutError` on timeout and
        :class:`TaskDeadLetteredError` once every task is either resulted or dead-lettered."""
        self._check_open()
        missing = list(dict.fromkeys(check_task_id(t) for t in task_ids))
        results: dict[str, Any] = {}
        deadline = time.monotonic() + timeout_s
        poll = 0
        while True:
            token = self._change_token()
            found, dead = self._outcomes(missing)
            results.update(found)
            missing = [t for t in missing if t not in found]
            if all(t in dead for t in missing):
                if missing:
                    raise TaskDeadLetteredError({t: dead[t] for t in missing}, results)
                return results
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ResultTimeoutError(missing, results, timeout_s)
            self._pause(remaining, poll, token)
            poll += 1

    def release(self, task_ids: Iterable[str]) -> int:
        """Forget the outcomes of tasks whose results the caller has collected; returns how many.

        Each id with a result or a dead-letter record loses it and becomes *collected* for the
        retention window (see the module docstring): late results are dropped as duplicates and
        ``put`` refuses the id. Ids never seen, still queued or in flight, or already released
        are ignored (nothing deleted, nothing marked), so releasing too much is harmless.
        """
        self._check_open()
        ids = list(dict.fromkeys(check_task_id(t) for t in task_ids))
        return self._release(ids) if ids else 0

    def recover(self, tasks: Mapping[str, dict[str, Any]], timeout_s: float | None = None) -> list[str]:
        """Re-put every task the queue no longer knows (neither queued, resulted nor collected);
        returns their ids.

        Idempotent: tasks still queued, resulted or released are skipped, so calling it after any
        Redis restart is safe. Pass the tasks whose results you have not collected yet.
        """
        requeued = []
        for task_id, payload in tasks.items():
            if not isinstance(self._put(task_id, payload, timeout_s), PutCode):
                requeued.append(task_id)
        return requeued

    @abstractmethod
    def stats(self) -> QueueStats: ...

    @abstractmethod
    def dead_letters(self) -> list[DeadLetter]:
        """Every dead-letter event of this namespace, oldest first."""

    @abstractmethod
    def purge(self) -> None:
        """Delete all state of this namespace (tasks, results, dead letters)."""

    def close(self) -> None:
        """Release the handle. Unacked leases stay pending and are re-delivered once they expire."""
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> WorkQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- shared loop
    def _put(self, task_id: str, payload: dict[str, Any], timeout_s: float | None) -> str | PutCode:
        self._check_open()
        check_task_id(task_id)
        if not isinstance(payload, dict):
            raise PayloadError(f"payload of task {task_id!r} must be a dict, got {type(payload).__name__}")
        data = encode_json("payload", task_id, payload)
        timeout_s = self.put_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        poll = 0
        while True:
            token = self._change_token()
            code, stream_id = self._try_put(task_id, data)
            if code is PutCode.OK:
                return stream_id
            if code is not PutCode.FULL:
                return code
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BackPressureTimeoutError(task_id, self.stats().outstanding, self.max_in_flight, timeout_s)
            self._pause(remaining, poll, token)
            poll += 1

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"{type(self).__name__} for namespace {self.namespace!r} is closed")

    # ----------------------------------------------------------------- backend primitives
    @abstractmethod
    def _try_put(self, task_id: str, payload_json: str) -> tuple[PutCode, str]:
        """Atomically: refuse a known (or collected) task id, refuse when full, else queue it."""

    @abstractmethod
    def _get(self, consumer: str, count: int, deadline: float) -> list[Message]: ...

    @abstractmethod
    def _ack(self, message: Message) -> bool: ...

    @abstractmethod
    def _nack(self, message: Message, reason: str) -> NackOutcome: ...

    @abstractmethod
    def _renew(self, messages: list[Message]) -> list[bool]:
        """Atomically per message: if its lease is still this delivery's, restart its ``lease_s``."""

    @abstractmethod
    def _put_result(self, task_id: str, result_json: str) -> bool: ...

    @abstractmethod
    def _release(self, task_ids: list[str]) -> int:
        """Atomically per id: delete its result and dead-letter index entry, mark it collected."""

    @abstractmethod
    def _outcomes(self, task_ids: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
        """(decoded results, dead-letter reasons) of those of ``task_ids`` that have one."""

    @abstractmethod
    def _change_token(self) -> int:
        """Taken before a check, handed to ``_pause`` so a change in between is not missed."""

    @abstractmethod
    def _pause(self, remaining_s: float, poll: int, token: int) -> None:
        """Wait (at most ``remaining_s``) for results, capacity or tasks to change."""

    @abstractmethod
    def _close(self) -> None: ...

