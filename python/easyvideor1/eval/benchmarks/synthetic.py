"""The project's synthetic task set (``evr1 data synth``): its held-out ``val.jsonl``.

Each task type is its own category; every item is scored by the reward of its problem
type (see :mod:`easyvideor1.eval.benchmarks.jsonl`), with accuracy-, IoU- and MRA-type
results reported separately.
"""

from __future__ import annotations

from pathlib import Path

from easyvideor1.eval.benchmarks.base import Benchmark, find_file, register
from easyvideor1.eval.benchmarks.jsonl import checked_samples, item_from_sample
from easyvideor1.eval.benchmarks.official import ProjectScoring
from easyvideor1.eval.types import EvalItem
from easyvideor1.rewards import canonical_problem_type


@register
class Synthetic(ProjectScoring, Benchmark):
    name = "synthetic"
    title = "Synthetic tasks (evr1 data synth)"
    category_fields = ("task", "problem_type")
    annotation = "val.jsonl written by evr1 data synth"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("val.jsonl",), "synthetic validation split (val.jsonl from evr1 data synth)")
        items = []
        for sample in checked_samples(path):
            synth = sample.extra.get("synth") if isinstance(sample.extra.get("synth"), dict) else {}
            items.append(item_from_sample(self.name, sample, {
                "task": synth.get("task"), "problem_type": canonical_problem_type(sample.problem_type)}))
        return items
