"""Typed errors of the work queue and the weight-version board.

They live here rather than in ``easyvideor1.errors`` so the queue package is self-contained;
every one subclasses :class:`easyvideor1.errors.EasyVideoR1Error`.
"""

from __future__ import annotations

from typing import Any

from easyvideor1.errors import EasyVideoR1Error


class QueueError(EasyVideoR1Error):
    """A queue operation failed (bad input, refused command, misuse)."""


class QueueUnavailableError(QueueError):
    """The queue backend cannot be reached. ``url`` never contains a password."""

    def __init__(self, url: str, cause: BaseException | str):
        self.url = url
        super().__init__(f"queue backend {url} is unavailable: {cause}")


class QueueClosedError(QueueError):
    """The handle was closed; open a new one."""


class PayloadError(QueueError):
    """A task id, payload or result cannot be queued (empty id, not JSON-serialisable...)."""


class DuplicateTaskError(QueueError):
    """``put`` of a task id that is already queued or already has a result."""

    def __init__(self, task_id: str, state: str):
        self.task_id, self.state = task_id, state
        super().__init__(f"task {task_id!r} is {state}; use a new task id")


class BackPressureTimeoutError(QueueError):
    """``put`` waited ``timeout_s`` for a free slot while ``max_in_flight`` tasks were outstanding."""

    def __init__(self, task_id: str, outstanding: int, max_in_flight: int, timeout_s: float):
        self.task_id, self.outstanding, self.max_in_flight = task_id, outstanding, max_in_flight
        super().__init__(
            f"put({task_id!r}) timed out after {timeout_s:g}s: {outstanding} task(s) outstanding "
            f">= max_in_flight={max_in_flight}; consumers are not keeping up or results are not written"
        )


class ResultTimeoutError(QueueError):
    """``wait_results`` ran out of time. ``results`` holds what did arrive."""

    def __init__(self, missing: list[str], results: dict[str, Any], timeout_s: float):
        self.missing, self.results = missing, results
        shown = ", ".join(repr(t) for t in missing[:10]) + (" ..." if len(missing) > 10 else "")
        super().__init__(f"{len(missing)} result(s) missing after {timeout_s:g}s: {shown}")


class TaskDeadLetteredError(QueueError):
    """Some awaited tasks were dead-lettered and will never get a result."""

    def __init__(self, dead: dict[str, str], results: dict[str, Any]):
        self.dead, self.results = dead, results
        shown = "; ".join(f"{t!r}: {r}" for t, r in list(dead.items())[:10])
        super().__init__(f"{len(dead)} awaited task(s) were dead-lettered: {shown}")


class VersionError(QueueError):
    """A weight version was published out of order (not strictly increasing)."""


class VersionTimeoutError(QueueError):
    """``wait_for`` did not see the requested weight version in time."""


__all__ = [
    "BackPressureTimeoutError",
    "DuplicateTaskError",
    "PayloadError",
    "QueueClosedError",
    "QueueError",
    "QueueUnavailableError",
    "ResultTimeoutError",
    "TaskDeadLetteredError",
    "VersionError",
    "VersionTimeoutError",
]

