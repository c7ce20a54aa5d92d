"""Types shared by every scorer, the dispatcher, the service and the clients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ScoreRequest:
    """One item to score. ``problem_type`` is already canonical when a scorer sees it."""

    response: str
    ground_truth: str
    problem_type: str
    options: tuple[str, ...] | None = None
    problem: str | None = None
    data_type: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Score:
    """What a scorer returns: accuracy and format in [0, 1] plus free-form details."""

    accuracy: float
    format: float
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RewardResult:
    """What the dispatcher returns for one item. ``error`` set means it scored 0."""

    overall: float
    accuracy: float
    format: float
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    problem_type: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall,
            "accuracy": self.accuracy,
            "format": self.format,
            "details": self.details,
            "error": self.error,
        }
