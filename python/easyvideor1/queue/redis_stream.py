"""``WorkQueue`` over Redis Streams: the distributed-mode transport between services.

Layout (``P`` = ``evr1:{namespace}:``, the braces being a Redis Cluster hash tag): the task
stream ``P<stream>`` with one consumer group, and beside it ``P<stream>:attempts``,
``:expiries``, ``:errors``, ``:dead`` (dead-letter stream), ``:dead-index``, ``:outstanding``,
``:results``, ``:duplicates``, ``:claim-cursor`` and ``:collected``. Nothing outside ``P`` is ever
written.

Delivery: ``get`` runs one Lua script that first takes over entries idle in the group's PEL for
longer than ``lease_s`` (XAUTOCLAIM: a consumer that crashed, or stopped renewing), then reads
new entries (XREADGROUP). ``renew`` XCLAIMs the caller's own entries (JUSTID), which restarts
their idle time, after checking in the same script that the lease is still that delivery's. A
task claimed after ``max_attempts`` deliveries is moved to the dead-letter stream with reason
``"visibility timeout expired N times"`` (the wording predates leases: a lease expired N
times). ``ack`` XACKs and deletes the entry, so the stream only ever holds undelivered and
in-flight tasks. ``nack`` re-adds the task at the tail (or dead-letters it with the given
reason). Results go to a hash with HSETNX, so a re-delivered task finished twice keeps its first
result.

Release: ``release(ids)`` deletes the collected results (and dead-index entries) and adds the ids
to the sorted set ``:collected``, scored by expiry on Redis' own clock (``TIME``: one clock for
all clients). ``put``, ``put_result`` and ``release`` trim expired markers, except those of
tasks that still have a delivered stream entry (a worker wrote its result but has not acked):
those stay another window. While marked, a result is a duplicate, a delivery is dropped (acked
and deleted, never handed out) and ``put`` answers "already collected". So the results hash
holds only uncollected results and ``:collected`` about throughput x retention ids.

Shutdown: ``close()`` only drops connections. Unacked entries stay in the PEL and are
re-delivered to other consumers once their leases expire; nothing is lost.

Failures: every command has a socket timeout; a lost connection raises
:class:`QueueUnavailableError` naming the URL (password redacted), never a hang. A missing
consumer group (NOGROUP: the stream was deleted or Redis restarted empty) is re-created on
the fly with start id ``0``, so whatever is in the stream is delivered.

Recovery after a Redis restart:

* With persistence (AOF ``appendonly yes``, or an RDB snapshot taken before the stop) the
  streams, PEL and results come back; consumers simply continue (renewals go on), and the
  in-flight entries of consumers that are gone are re-delivered once their leases expire.
* Without persistence every key is gone, results included. The producer must keep the
  payloads of the tasks whose results it has not collected yet and call
  ``queue.recover({task_id: payload, ...})`` once Redis answers again: it re-puts exactly the
  tasks Redis no longer knows (neither queued, resulted nor collected) and skips the rest, so it
  is also safe to call after a restart *with* persistence, or twice. The collected markers are
  lost too: never pass ids you have released.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import redis

from easyvideor1.logging import event, get_logger
from easyvideor1.queue import _lua
from easyvideor1.queue._redis import is_nogroup, make_client, translated
from easyvideor1.queue.base import (
    DeadLetter,
    Message,
    NackOutcome,
    PutCode,
    QueueStats,
    WorkQueue,
    key_prefix,
    redact_url,
    validate_namespace,
)

_log = get_logger(__name__)

_PUT_CODES = {"ok": PutCode.OK, "full": PutCode.FULL, "queued": PutCode.QUEUED, "resulted": PutCode.RESULTED,
              "collected": PutCode.COLLECTED}
_RELEASE_CHUNK = 1000  # ids per RELEASE script: one script blocks Redis while it runs
_NACK_CODES = {0: NackOutcome.LEASE_LOST, 1: NackOutcome.REQUEUED, 2: NackOutcome.DEAD_LETTERED}


class RedisStreamQueue(WorkQueue):
    """Redis Streams work queue; see the module docstring for layout, semantics and recovery."""

    def __init__(
        self,
        url: str,
        namespace: str,
        stream: str = "tasks",
        group: str = "workers",
        *,
        visibility_timeout_s: float = 60.0,
        lease_s: float | None = None,
        max_attempts: int = 3,
        max_in_flight: int = 10_000,
        put_timeout_s: float = 60.0,
        collected_retention_s: float | None = None,
        op_timeout_s: float = 5.0,
        connect_timeout_s: float = 2.0,
    ):
        super().__init__(
            namespace,
            visibility_timeout_s=visibility_timeout_s,
            lease_s=lease_s,
            max_attempts=max_attempts,
            max_in_flight=max_in_flight,
            put_timeout_s=put_timeout_s,
            collected_retention_s=collected_retention_s,
        )
        self.stream = validate_namespace(stream, what="stream name")
        self.group = validate_namespace(group, what="group name")
        self.url = redact_url(url)
        base = key_prefix(namespace) + self.stream
        self.keys = [base] + [f"{base}:{name.replace('_', '-')}" for name in _lua.KEY_NAMES[1:]]
        key = dict(zip(_lua.KEY_NAMES, self.keys))
        self._stream_key, self._dead_key = key["stream"], key["dead"]
        self._results_key, self._dead_index_key = key["results"], key["dead_index"]
        # A blocked XREAD must return well before the socket timeout, and often enough to
        # notice leases that expire meanwhile.
        self._idle_poll_s = min(max(self.lease_s / 4, 0.01), op_timeout_s / 2)
        self._r = make_client(url, op_timeout_s, connect_timeout_s)
        self._scripts = {
            name: self._r.register_script(getattr(_lua, name))
            for name in ("PUT", "DELIVER", "ACK", "NACK", "RENEW", "PUT_RESULT", "RELEASE", "STATS")
        }
        self._create_group()  # also proves Redis is reachable: fail at open, not at first use

    def __repr__(self) -> str:
        return f"RedisStreamQueue({self.url}, namespace={self.namespace!r}, stream={self.stream!r})"

    # ----------------------------------------------------------------- plumbing
    def _create_group(self) -> None:
        with translated(self.url, f"XGROUP CREATE {self._stream_key}"):
            try:
                self._r.xgroup_create(self._stream_key, self.group, id="0", mkstream=True)
            except redis.exceptions.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with translated(self.url, what):
            try:
                return fn(*args, **kwargs)
            except redis.exceptions.ResponseError as exc:
                if not is_nogroup(exc):
                    raise
                event(_log, "queue.group_recreated", stream=self._stream_key, group=self.group)
        self._create_group()
        with translated(self.url, what):
            return fn(*args, **kwargs)

    def _run(self, script: str, *args: Any) -> Any:
        return self._call(f"{script} script on {self._stream_key}", self._scripts[script],
                          keys=self.keys, args=list(args))

    # ----------------------------------------------------------------- primitives
    def _try_put(self, task_id: str, payload_json: str) -> tuple[PutCode, str]:
        code, stream_id = self._run("PUT", task_id, payload_json, self.max_in_flight,
                                    repr(self.collected_retention_s))
        return _PUT_CODES[code], stream_id

    def _get(self, consumer: str, count: int, deadline: float) -> list[Message]:
        min_idle_ms = int(self.lease_s * 1000)
        while True:
            leased_at = time.monotonic()  # before the delivery: the cap counts from no later than it
            out, dead, newest = self._run(
                "DELIVER", self.group, consumer, min_idle_ms, count, self.max_attempts, repr(time.time())
            )
            for task_id, reason, attempts in dead:
                event(_log, "queue.dead_letter", logging.WARNING, task_id=task_id, attempts=attempts,
                      reason=reason, namespace=self.namespace)
            now = time.monotonic()
            if out or now >= deadline:
                return [Message(sid, tid, json.loads(p), int(n), consumer, leased_at) for sid, tid, p, n in out]
            # Sleep until something newer than the newest entry is added (or the poll ends).
            block_ms = max(1, int(min(deadline - now, self._idle_poll_s) * 1000))
            self._call("XREAD", self._r.xread, {self._stream_key: newest}, count=1, block=block_ms)

    def _ack(self, message: Message) -> bool:
        return bool(self._run("ACK", self.group, message.stream_id, message.consumer, message.task_id,
                              message.attempt))

    def _nack(self, message: Message, reason: str) -> NackOutcome:
        code = self._run("NACK", self.group, message.stream_id, message.consumer, message.task_id,
                         message.attempt, reason, self.max_attempts, repr(time.time()))
        if code == 2:
            event(_log, "queue.dead_letter", logging.WARNING, task_id=message.task_id,
                  attempts=message.attempt, reason=reason, namespace=self.namespace)
        return _NACK_CODES[code]

    def _renew(self, messages: list[Message]) -> list[bool]:
        args = [a for m in messages for a in (m.stream_id, m.consumer, m.task_id, m.attempt)]
        return [bool(ok) for ok in self._run("RENEW", self.group, *args)]

    def _put_result(self, task_id: str, result_json: str) -> bool:
        return bool(self._run("PUT_RESULT", task_id, result_json, repr(self.collected_retention_s)))

    def _release(self, task_ids: list[str]) -> int:
        return sum(self._run("RELEASE", repr(self.collected_retention_s), *task_ids[i:i + _RELEASE_CHUNK])
                   for i in range(0, len(task_ids), _RELEASE_CHUNK))

    def _outcomes(self, task_ids: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
        if not task_ids:
            return {}, {}
        pipe = self._r.pipeline(transaction=False)
        pipe.hmget(self._results_key, task_ids)
        pipe.hmget(self._dead_index_key, task_ids)
        results, dead = self._call("HMGET results", pipe.execute)
        found = {t: json.loads(v) for t, v in zip(task_ids, results) if v is not None}
        return found, {t: r for t, r in zip(task_ids, dead) if r is not None}

    def _change_token(self) -> int:
        return 0  # Redis has no cheap change feed here; _pause polls with backoff instead.

    def _pause(self, remaining_s: float, poll: int, token: int) -> None:
        time.sleep(min(remaining_s, 0.005 * 2 ** min(poll, 5)))

    def _close(self) -> None:
        self._r.close()

    # ----------------------------------------------------------------- inspection
    def stats(self) -> QueueStats:
        self._check_open()
        return QueueStats(*(int(v) for v in self._run("STATS", self.group)))

    def dead_letters(self) -> list[DeadLetter]:
        self._check_open()
        entries = self._call(f"XRANGE {self._dead_key}", self._r.xrange, self._dead_key)
        return [
            DeadLetter(f["t"], json.loads(f["p"]), f["r"], int(f["n"]), float(f["at"]))
            for _, f in entries
        ]

    def purge(self) -> None:
        """Delete every key of this stream (the group is re-created on next use)."""
        self._check_open()
        self._call(f"DEL {self._stream_key}*", self._r.delete, *self.keys)
