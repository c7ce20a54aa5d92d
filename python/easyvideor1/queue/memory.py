"""In-process ``WorkQueue`` for the embedded mode: same semantics as the Redis backend.

State lives in a process-wide registry keyed by (name, namespace), so every handle opened on
``memory://name`` with the same namespace shares it. Leases expire by monotonic time measured
from their delivery or latest renewal against the *getter's* ``lease_s``, exactly like
XAUTOCLAIM's min-idle-time (which an XCLAIM renewal resets). Payloads
and results are stored as JSON text, so consumers get copies and non-JSON values are refused
the same way as with Redis. Collected markers expire on the monotonic clock.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any

from easyvideor1.logging import event, get_logger
from easyvideor1.queue.base import (
    DeadLetter,
    Message,
    NackOutcome,
    PutCode,
    QueueStats,
    WorkQueue,
    validate_namespace,
)

_log = get_logger(__name__)


@dataclass
class _Lease:
    consumer: str
    renewed_at: float  # the delivery or its latest renewal: the lease ends lease_s later


@dataclass
class _State:
    """One namespace of one ``memory://name``; every field is guarded by ``cond``."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    seq: int = 0  # bumped on every change; waiters compare it (see WorkQueue._change_token)
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    entries: dict[str, tuple[str, str]] = field(default_factory=dict)  # stream id -> (task, payload)
    ready: deque[str] = field(default_factory=deque)
    leases: dict[str, _Lease] = field(default_factory=dict)
    lease_heap: list[tuple[float, str]] = field(default_factory=list)  # (renewed_at, id); stale rows skipped lazily
    outstanding: set[str] = field(default_factory=set)
    results: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    expiries: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    dead_index: dict[str, str] = field(default_factory=dict)
    dead_log: list[DeadLetter] = field(default_factory=list)
    duplicates: int = 0
    collected: dict[str, float] = field(default_factory=dict)  # released task -> expiry (monotonic)
    collected_heap: list[tuple[float, str]] = field(default_factory=list)  # stale rows skipped lazily

    def reset(self) -> None:
        """Empty every table in place, so all handles sharing this state see the purge."""
        blank = _State()
        for f in fields(self):
            if f.name not in ("cond", "seq"):
                setattr(self, f.name, getattr(blank, f.name))
        self.changed()

    def changed(self) -> None:
        self.seq += 1
        self.cond.notify_all()


_REGISTRY: dict[tuple[str, str], _State] = {}
_REGISTRY_LOCK = threading.Lock()


def _shared_state(name: str, namespace: str) -> _State:
    with _REGISTRY_LOCK:
        return _REGISTRY.setdefault((name, namespace), _State())


class InProcessQueue(WorkQueue):
    """Thread-safe in-memory queue; ``name`` selects the shared state (``memory://name``)."""

    def __init__(self, name: str, namespace: str, **options: Any):
        super().__init__(namespace, **options)
        self.name = validate_namespace(name, what="memory queue name")
        self._s = _shared_state(self.name, self.namespace)

    def __repr__(self) -> str:
        return f"InProcessQueue(memory://{self.name}, namespace={self.namespace!r})"

    # ----------------------------------------------------------------- primitives
    def _try_put(self, task_id: str, payload_json: str) -> tuple[PutCode, str]:
        s = self._s
        with s.cond:
            if task_id in s.outstanding:
                return PutCode.QUEUED, ""
            if task_id in s.results:
                return PutCode.RESULTED, ""
            self._trim()
            if task_id in s.collected:
                return PutCode.COLLECTED, ""
            if len(s.outstanding) >= self.max_in_flight:
                return PutCode.FULL, ""
            for table in (s.attempts, s.expiries, s.errors, s.dead_index):
                table.pop(task_id, None)
            s.outstanding.add(task_id)
            stream_id = self._append(task_id, payload_json)
            s.changed()
            return PutCode.OK, stream_id

    def _append(self, task_id: str, payload_json: str) -> str:
        stream_id = f"{next(self._s.ids)}-0"
        self._s.entries[stream_id] = (task_id, payload_json)
        self._s.ready.append(stream_id)
        return stream_id

    def _get(self, consumer: str, count: int, deadline: float) -> list[Message]:
        s = self._s
        with s.cond:
            while True:
                out = self._reclaim(consumer, count)
                while s.ready and len(out) < count:
                    stream_id = s.ready.popleft()
                    if not self._retire_released(stream_id):
                        out.append(self._lease(stream_id, consumer))
                if out:
                    s.changed()
                    return out
                now = time.monotonic()
                if now >= deadline:
                    return []
                wait = deadline - now
                if s.lease_heap:  # wake when the oldest lease could expire
                    wait = min(wait, max(0.0, s.lease_heap[0][0] + self.lease_s - now))
                s.cond.wait(wait)

    def _lease(self, stream_id: str, consumer: str) -> Message:
        s = self._s
        task_id, payload_json = s.entries[stream_id]
        attempt = s.attempts[task_id] = s.attempts.get(task_id, 0) + 1
        now = time.monotonic()
        s.leases[stream_id] = _Lease(consumer, now)
        heapq.heappush(s.lease_heap, (now, stream_id))
        return Message(stream_id, task_id, json.loads(payload_json), attempt, consumer, now)

    def _reclaim(self, consumer: str, count: int) -> list[Message]:
        """Take over leases neither renewed nor finished for ``lease_s`` (caller holds the lock)."""
        s = self._s
        out: list[Message] = []
        limit = time.monotonic() - self.lease_s
        while s.lease_heap and len(out) < count and s.lease_heap[0][0] <= limit:
            renewed_at, stream_id = heapq.heappop(s.lease_heap)
            lease = s.leases.get(stream_id)
            if lease is None or lease.renewed_at != renewed_at:
                continue  # acked, nacked, renewed or re-leased since
            if self._retire_released(stream_id):
                continue
            task_id, payload_json = s.entries[stream_id]
            expired = s.expiries[task_id] = s.expiries.get(task_id, 0) + 1
            if s.attempts.get(task_id, 0) >= self.max_attempts:
                reason = f"visibility timeout expired {expired} times"
                if task_id in s.errors:
                    reason += f"; last error: {s.errors[task_id]}"
                self._bury(stream_id, reason, s.attempts[task_id])
                continue
            del s.leases[stream_id]
            out.append(self._lease(stream_id, consumer))
        return out

    def _retire_released(self, stream_id: str) -> bool:
        """Drop (never hand out) a delivery of a released task: its result was collected already."""
        s = self._s
        task_id = s.entries[stream_id][0]
        if task_id not in s.collected:
            return False
        self._remove(stream_id)
        for table in (s.attempts, s.expiries, s.errors):
            table.pop(task_id, None)
        s.changed()
        return True

    def _trim(self) -> None:
        """Drop expired collected markers, except those of tasks with a delivered entry (``attempts``
        is set exactly while one exists): it can be delivered again, so it gets another window."""
        s = self._s
        now = time.monotonic()
        while s.collected_heap and s.collected_heap[0][0] <= now:
            expiry, task_id = heapq.heappop(s.collected_heap)
            if s.collected.get(task_id) != expiry:
                continue  # re-armed since
            if task_id in s.attempts:
                self._mark_collected(task_id, now)
            else:
                del s.collected[task_id]

    def _mark_collected(self, task_id: str, now: float) -> None:
        expiry = self._s.collected[task_id] = now + self.collected_retention_s
        heapq.heappush(self._s.collected_heap, (expiry, task_id))

    def _bury(self, stream_id: str, reason: str, attempts: int) -> None:
        s = self._s
        task_id, payload_json = self._remove(stream_id)
        s.dead_log.append(DeadLetter(task_id, json.loads(payload_json), reason, attempts, time.time()))
        s.dead_index[task_id] = reason
        s.outstanding.discard(task_id)
        for table in (s.attempts, s.expiries, s.errors):
            table.pop(task_id, None)
        s.changed()
        event(_log, "queue.dead_letter", logging.WARNING, task_id=task_id, attempts=attempts,
              reason=reason, namespace=self.namespace)

    def _remove(self, stream_id: str) -> tuple[str, str]:
        self._s.leases.pop(stream_id, None)
        return self._s.entries.pop(stream_id)

    def _owns(self, message: Message) -> bool:
        lease = self._s.leases.get(message.stream_id)
        return (
            lease is not None
            and lease.consumer == message.consumer
            and self._s.attempts.get(message.task_id) == message.attempt
        )

    def _ack(self, message: Message) -> bool:
        s = self._s
        with s.cond:
            if not self._owns(message):
                return False
            self._remove(message.stream_id)
            for table in (s.attempts, s.expiries, s.errors):
                table.pop(message.task_id, None)
            s.changed()
            return True

    def _renew(self, messages: list[Message]) -> list[bool]:
        s = self._s
        with s.cond:
            now = time.monotonic()
            renewed = []
            for message in messages:
                owned = self._owns(message)
                if owned:
                    s.leases[message.stream_id].renewed_at = now
                    heapq.heappush(s.lease_heap, (now, message.stream_id))  # the old row goes stale
                renewed.append(owned)
            return renewed

    def _nack(self, message: Message, reason: str) -> NackOutcome:
        s = self._s
        with s.cond:
            if not self._owns(message):
                return NackOutcome.LEASE_LOST
            s.errors[message.task_id] = reason
            if message.attempt >= self.max_attempts:
                self._bury(message.stream_id, reason, message.attempt)
                return NackOutcome.DEAD_LETTERED
            task_id, payload_json = self._remove(message.stream_id)
            self._append(task_id, payload_json)
            s.changed()
            return NackOutcome.REQUEUED

    def _put_result(self, task_id: str, result_json: str) -> bool:
        s = self._s
        with s.cond:
            self._trim()
            if task_id in s.results or task_id in s.collected:
                s.duplicates += 1
                return False
            s.results[task_id] = result_json
            s.outstanding.discard(task_id)
            s.dead_index.pop(task_id, None)  # a late result from a slow worker still counts
            s.changed()
            return True

    def _release(self, task_ids: list[str]) -> int:
        s = self._s
        with s.cond:
            now = time.monotonic()
            released = 0
            for task_id in task_ids:
                had_result = s.results.pop(task_id, None) is not None
                if s.dead_index.pop(task_id, None) is not None or had_result:
                    self._mark_collected(task_id, now)
                    released += 1
            self._trim()
            if released:
                s.changed()
            return released

    def _outcomes(self, task_ids: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
        s = self._s
        with s.cond:
            found = {t: s.results[t] for t in task_ids if t in s.results}
            dead = {t: s.dead_index[t] for t in task_ids if t in s.dead_index}
        return {t: json.loads(v) for t, v in found.items()}, dead

    def _change_token(self) -> int:
        with self._s.cond:
            return self._s.seq

    def _pause(self, remaining_s: float, poll: int, token: int) -> None:
        s = self._s
        with s.cond:
            s.cond.wait_for(lambda: s.seq != token, timeout=remaining_s)

    def _close(self) -> None:
        # Leases stay in the shared state: another handle re-delivers them once they expire.
        with self._s.cond:
            self._s.changed()

    # ----------------------------------------------------------------- inspection
    def stats(self) -> QueueStats:
        self._check_open()
        s = self._s
        with s.cond:
            return QueueStats(
                pending=len(s.entries) - len(s.leases),
                in_flight=len(s.leases),
                dead_lettered=len(s.dead_log),
                duplicates_dropped=s.duplicates,
                outstanding=len(s.outstanding),
                results=len(s.results),
                collected=len(s.collected),
            )

    def dead_letters(self) -> list[DeadLetter]:
        self._check_open()
        with self._s.cond:
            return list(self._s.dead_log)

    def purge(self) -> None:
        self._check_open()
        with self._s.cond:
            self._s.reset()
