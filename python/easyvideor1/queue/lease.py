"""The worker side of leases: a heartbeat that renews the leases of the messages in hand.

A consumer ``hold``s what ``get`` gave it and ``drop``s each message once it is acked, nacked or
given up. While held, a background thread calls ``queue.renew`` every ``lease_s / 3``, so a
live worker keeps its tasks however long they take (up to the queue's ``visibility_timeout_s``),
and a dead one stops renewing and loses them about ``lease_s`` later. A message the queue did
not renew (its lease expired and went elsewhere, or it reached the cap) is dropped and counted in
``lost``; finishing it anyway is harmless, since results are stored once per task.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from easyvideor1.logging import event, get_logger
from easyvideor1.queue.base import Message, WorkQueue
from easyvideor1.queue.errors import QueueClosedError, QueueError

_log = get_logger(__name__)


def _key(message: Message) -> tuple[str, int, str]:
    return message.stream_id, message.attempt, message.consumer


class LeaseRenewer:
    """Renews the leases of the held messages from a daemon thread, started on the first ``hold``."""

    def __init__(self, queue: WorkQueue, interval_s: float | None = None):
        self.queue = queue
        # A third of the lease: two renewals may fail (a slow Redis call) before it runs out.
        self.interval_s = queue.lease_s / 3 if interval_s is None else interval_s
        self.renewals = 0  # successful renewals of one message
        self.lost = 0  # messages held but no longer renewable
        self._held: dict[tuple[str, int, str], Message] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # A lease no longer than the cap cannot be extended at all: then there is nothing to do.
    @property
    def renewable(self) -> bool:
        return self.queue.lease_s < self.queue.visibility_timeout_s

    def hold(self, messages: Iterable[Message]) -> None:
        with self._lock:
            for message in messages:
                self._held[_key(message)] = message
            if self._held and self.renewable and (self._thread is None or not self._thread.is_alive()):
                self._stop.clear()
                self._thread = threading.Thread(target=self._loop, name="queue-lease-renewer", daemon=True)
                self._thread.start()

    def drop(self, messages: Iterable[Message]) -> None:
        with self._lock:
            for message in messages:
                self._held.pop(_key(message), None)

    def held(self) -> list[Message]:
        with self._lock:
            return list(self._held.values())

    def renew_now(self) -> int:
        """One round of renewals (what the thread does each interval); returns how many were renewed."""
        held = self.held()
        if not held:
            return 0
        renewed = {_key(m) for m in self.queue.renew(held)}
        with self._lock:
            self.renewals += len(renewed)
            # A message dropped meanwhile was acked or nacked by its holder: not lost.
            gone = [m for m in held if _key(m) not in renewed and self._held.pop(_key(m), None) is not None]
            self.lost += len(gone)
        capped_before = time.monotonic() + self.queue.lease_s - self.queue.visibility_timeout_s
        for message in gone:
            why = "held for visibility_timeout_s" if message.leased_at < capped_before else "expired"
            event(_log, "queue.lease_lost", logging.WARNING, task_id=message.task_id, attempt=message.attempt,
                  consumer=message.consumer, reason=why, namespace=self.queue.namespace)
        return len(renewed)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.renew_now()
            except QueueClosedError:
                return
            except QueueError as exc:  # e.g. Redis unreachable: try again next interval
                event(_log, "queue.lease_renewal_failed", logging.WARNING, error=str(exc)[:300],
                      namespace=self.queue.namespace)
            except Exception:  # the heartbeat must outlive a bug in one round
                _log.exception("lease renewal failed")

    def close(self) -> None:
        """Stop renewing (held leases then run out); a later ``hold`` starts again."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            self._held.clear()
            self._thread = None

    def __enter__(self) -> LeaseRenewer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
