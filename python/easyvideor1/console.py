"""The console of the long-running commands: one progress line per job, and messages that do not break it.

On a terminal a job is a tqdm bar (position, rate, ETA, the job's key metrics as its postfix).
Anywhere else (a log file, CI, a test's pipe) a bar redrawn per item would write one carriage
return per item, so a job prints a plain line when it has moved another tenth of the way, when
``every_s`` seconds have passed, when the caller forces one (a validation result), and at the end.

``write(text)`` prints a message line above an active bar (easyvideor1/logging.py sends its
console records through it); ``job_active()`` tells the console handler that a job's bar is
the console now, so the per-step INFO events of the job go to the run's log file only.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from tqdm import tqdm

T = TypeVar("T")

_active: list[Progress] = []
_lock = threading.Lock()


def is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _library_bars() -> bool:
    """A tqdm bar of a third-party library (a vLLM model load) is being drawn."""
    return any(not getattr(bar, "disable", True) for bar in list(getattr(tqdm, "_instances", ())))


def job_active() -> bool:
    return bool(_active) or _library_bars()


def write(text: str) -> None:
    """Print a message line to stderr; above the bar when one is drawn."""
    with _lock:
        drawn = any(p._bar is not None for p in _active)
    if drawn or _library_bars():
        tqdm.write(text, file=sys.stderr)
        return
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_metrics(metrics: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


class Progress:
    """One job's progress: ``update(n, **metrics)`` / ``set(position, **metrics)``, then ``close()``
    (or use it as a context manager). ``tty=None``: a bar when stderr is a terminal."""

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        *,
        unit: str = "it",
        initial: int = 0,
        enabled: bool = True,
        tty: bool | None = None,
        every_fraction: float = 0.1,
        every_s: float = 60.0,
        started: float | None = None,
    ):
        self.desc, self.total, self.unit = desc, total, unit
        self.enabled = enabled
        self.every_fraction, self.every_s = every_fraction, every_s
        self.n = self._start_n = self._line_n = initial
        self.metrics: dict[str, Any] = {}
        self._started = time.monotonic() if started is None else started
        self._line_t = time.monotonic()
        self._line_state: tuple[Any, ...] = ()
        self.lines = 0  # plain lines printed (non-terminal mode)
        use_bar = enabled and (is_tty(sys.stderr) if tty is None else tty)
        self._bar = (
            tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit=unit,
                file=sys.stderr,
                dynamic_ncols=True,
                leave=True,
            )
            if use_bar
            else None
        )
        self._closed = False
        if enabled:  # a job that draws nothing leaves the console to the INFO events
            with _lock:
                _active.append(self)

    def update(self, n: int = 1, **metrics: Any) -> None:
        self.set(self.n + n, **metrics)

    def each(self, items: Iterable[T]) -> Iterator[T]:
        """Yield ``items``, each counted once the next is asked for (as a tqdm-wrapped loop); closes at the end."""
        try:
            for item in items:
                yield item
                self.update(1)
        finally:
            self.close()

    def set(self, position: int, *, force_line: bool = False, **metrics: Any) -> None:
        """Move to ``position`` (absolute) and merge ``metrics`` into the shown ones."""
        self.metrics.update({k: v for k, v in metrics.items() if v is not None})
        delta, self.n = position - self.n, position
        if not self.enabled or self._closed:
            return
        if self._bar is not None:
            if metrics:
                self._bar.set_postfix_str(format_metrics(self.metrics), refresh=False)
            if delta:
                self._bar.update(delta)
            else:
                self._bar.refresh()
            return
        # A forced line (a validation result) that would repeat the last one adds nothing.
        if (force_line and self._line_state != self._state()) or self._due():
            self._print_line()

    def _state(self) -> tuple[Any, ...]:
        return self.n, tuple(self.metrics.items())

    def _due(self) -> bool:
        if self.total and self.n >= self.total > self._line_n:
            return True
        if self.total and (self.n - self._line_n) / self.total >= self.every_fraction - 1e-9:
            return True
        return self.n != self._line_n and time.monotonic() - self._line_t >= self.every_s

    def line(self) -> str:
        """The plain progress line: position, rate, ETA, elapsed, metrics."""
        elapsed = time.monotonic() - self._started
        done = self.n - self._start_n
        if self.total:
            parts = [f"{self.desc} {self.n}/{self.total} ({100 * self.n / self.total:.0f}%)"]
        else:
            parts = [f"{self.desc} {self.n} {self.unit}"]
        rate = done / elapsed if done > 0 and elapsed > 0 else 0.0
        if rate >= 1:
            parts.append(f"{rate:.2f} {self.unit}/s")
        elif rate > 0:
            parts.append(f"{1 / rate:.2f} s/{self.unit}")
        if self.total and rate > 0 and self.n < self.total:
            parts.append(f"ETA {format_duration((self.total - self.n) / rate)}")
        parts.append(f"elapsed {format_duration(elapsed)}")
        if self.metrics:
            parts.append(format_metrics(self.metrics))
        return " | ".join(parts)

    def _print_line(self) -> None:
        self._line_n, self._line_t, self._line_state = self.n, time.monotonic(), self._state()
        self.lines += 1
        sys.stderr.write(self.line() + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self._closed:
            return
        if self._bar is not None:
            self._bar.close()
        elif self.enabled and self.n != self._line_n:
            self._print_line()
        self._closed = True
        with _lock:
            if self in _active:
                _active.remove(self)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# What a training step's progress shows, and under which short name.
TRAIN_KEYS = {
    "reward/overall": "reward",
    "reward/accuracy": "acc",
    "val/accuracy": "val_acc",
    "actor/pg_loss": "pg_loss",
    "response/length_mean": "len",
}


class TrainProgress:
    """The console sink of the RL loop (train/metrics.py): one progress line over the run's
    steps instead of one line per step. A validation result prints a line of its own."""

    def __init__(self, total_steps: int | None):
        self.total = total_steps if total_steps and total_steps > 0 else None
        self._created = time.monotonic()
        self._progress: Progress | None = None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        shown = {short: float(metrics[key]) for key, short in TRAIN_KEYS.items() if key in metrics}
        validation = "val/accuracy" in metrics
        if self._progress is None:
            # A first row of training metrics ends step ``step``: its time counts from here.
            initial = step if validation or step == 0 else step - 1
            self._progress = Progress(
                "train", total=self.total, unit="step", initial=initial, started=self._created
            )
        self._progress.set(step, force_line=validation, **shown)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.close()
            self._progress = None
