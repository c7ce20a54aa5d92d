"""Outages of the parts a run depends on, said on the console as they start and as they end.

A part that stops answering (the work queue, the weights store) makes the trainer wait; the
wait is not silent. :func:`outage_started` and :func:`outage_over` log one line each, which the
console shows every time (``logging.ALWAYS_SHOWN``: not folded into "shown once" like other
warnings, not hidden behind a progress bar). :func:`watch` says so for a call that takes longer
than a part normally needs, without interrupting it. ``counters`` (a step's
``distributed/...`` metrics) count outages and the seconds they lasted.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, MutableMapping
from datetime import datetime

from easyvideor1.logging import event, get_logger

log = get_logger("outages")


def outage_started(part: str, doing: str, **fields: object) -> float:
    """Says that ``part`` does not answer and what the run does meanwhile; returns the start time."""
    event(log, "outage_started", logging.WARNING, part=part, since=datetime.now().strftime("%H:%M:%S"),
          doing=doing, **fields)
    return time.monotonic()


def outage_over(part: str, started: float, counters: MutableMapping[str, float] | None = None,
                **fields: object) -> None:
    """Says that ``part`` answers again, how long it did not and what was redone (``fields``)."""
    lasted = time.monotonic() - started
    event(log, "outage_over", logging.WARNING, part=part, lasted_s=round(lasted, 1), **fields)
    if counters is not None:
        counters["outages"] = counters.get("outages", 0) + 1
        counters["outage_s"] = counters.get("outage_s", 0.0) + lasted


@contextlib.contextmanager
def watch(part: str, doing: str, after_s: float, counters: MutableMapping[str, float] | None = None
          ) -> Iterator[None]:
    """Run the block; past ``after_s`` say ``part`` is not answering, and when it finally does."""
    began = time.monotonic()
    said: list[float] = []

    def late() -> None:
        said.append(outage_started(part, doing, waited_s=round(time.monotonic() - began, 1)))

    timer = threading.Timer(after_s, late)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
        if said:
            outage_over(part, began, counters)
