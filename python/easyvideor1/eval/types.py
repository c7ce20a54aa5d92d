"""What flows through an evaluation: items in, per-sample records out.

An :class:`EvalItem` is one question of one benchmark, loaded from the benchmark's own
annotation files. A record (a plain dict, one JSONL line) is what the pipeline writes for
it: the response, the scores, or the failure that prevented one. Records are plain JSON so
a results file can be read without this library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from easyvideor1.errors import EasyVideoR1Error

# Failure kinds: every one is counted in the denominator as wrong and listed in the report.
FAILURE_KINDS = ("media", "prompt", "timeout", "engine", "scoring")

# Metric kinds. Values of different kinds are never averaged together, except in a
# benchmark's own composite score where its protocol defines one (VSI-Bench overall).
ACCURACY, IOU, MRA, TEXT, COMPOSITE = "accuracy", "iou", "mra", "text", "composite"
METRIC_KINDS = (ACCURACY, IOU, MRA, TEXT, COMPOSITE)


class EvalError(EasyVideoR1Error):
    """An evaluation could not be set up (bad settings, unknown benchmark, results mismatch)."""


class AnnotationError(EvalError):
    """A benchmark annotation file is malformed; the message names file, line/row and field."""

    def __init__(self, path: str, where: str | int | None, field: str | None, message: str):
        self.path, self.where, self.field = str(path), where, field
        location = self.path if where is None else f"{self.path}:{where}"
        if field:
            location += f": field '{field}'"
        super().__init__(f"{location}: {message}")


@dataclass(frozen=True)
class EvalItem:
    """One question of one benchmark.

    ``question`` is the question text without media placeholders; ``options`` are labelled
    ``"A. text"`` (multiple choice only). ``answer`` is the ground truth in the form the
    benchmark's scorer expects (a letter, a number, ``[start, end]``, ...). ``categories``
    maps each breakdown the benchmark reports (task, duration, ...) to this item's value;
    a list value puts the item in several categories (LVBench's multi-label types).
    ``clip`` is ``(start_s, end_s)`` in seconds when the protocol samples the videos' frames
    only within that window (timestamps stay those of the source video), None for the
    whole video. ``source`` is ``file:line`` (or ``file:row N``) for error messages.
    """

    benchmark: str
    id: str
    question: str
    answer: Any
    problem_type: str
    videos: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    options: tuple[str, ...] | None = None
    categories: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    clip: tuple[float, float] | None = None

    @property
    def key(self) -> str:
        return f"{self.benchmark}/{self.id}"


@dataclass
class ItemScore:
    """An adapter's verdict on one response: ``values`` per metric name, plus details."""

    values: dict[str, float]
    prediction: Any = None
    details: dict[str, Any] = field(default_factory=dict)
    scoring: str = "rule"  # rule | judge | fallback


def failure_record(item: EvalItem, kind: str, message: str, **extra: Any) -> dict[str, Any]:
    """The record of an item that produced no usable response (counted as wrong)."""
    if kind not in FAILURE_KINDS:
        raise ValueError(f"unknown failure kind {kind!r}; known: {FAILURE_KINDS}")
    record = base_record(item)
    record.update(status="failed", failure={"kind": kind, "message": message[:2000]}, response=None,
                  prediction=None, values={}, scoring=None)
    record.update(extra)
    return record


def base_record(item: EvalItem) -> dict[str, Any]:
    return {"benchmark": item.benchmark, "id": item.id, "categories": item.categories, "answer": item.answer,
            "problem_type": item.problem_type, "meta": item.meta, "source": item.source}
