"""The official headline that several adapters share: the mean over the counted items, with
each group's mean alongside (how lmms-eval-style scripts print an overall score and a table)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from easyvideor1.eval.benchmarks.official import grouped_official_mean, mean_official


def mean_with_group_means(
    records: Sequence[dict[str, Any]],
    category: str,
    *,
    members: Sequence[str] | None = None,
    name: str | None = None,
) -> dict[str, Any] | None:
    """The official accuracy over the counted items (None when none is counted) with ``over``:
    each ``category`` group's mean (only ``members`` when given; {} when no item has a group)."""
    overall = mean_official(records, "accuracy", name=name)
    if overall is None:
        return None
    groups = grouped_official_mean(records, category, members=members)
    return {**overall, "over": groups["over"] if groups else {}}
