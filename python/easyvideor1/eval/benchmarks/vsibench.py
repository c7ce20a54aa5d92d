"""VSI-Bench: visual-spatial intelligence; MC accuracy and numeric mean relative accuracy.

Reads a JSON/JSONL export of the test parquet: rows ``{"id", "dataset", "scene_name",
"question_type", "question", "options" (list for multiple choice, null for numeric
answers), "ground_truth"}``. Videos: ``<dataset>/<scene_name>.mp4``.

Multiple-choice tasks score accuracy; numeric tasks score MRA (mean over thresholds
0.50..0.95 of |pred - gt| / gt < 1 - θ). The benchmark's own overall is the mean over
tasks of each task's score, the three relative-direction difficulties counted as one task;
it is reported as a composite, next to MC accuracy and MRA on their own.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    answer_letter,
    field,
    find_file,
    find_video,
    letter_options,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.benchmarks.common import composite
from easyvideor1.eval.types import EvalItem


def task_of(question_type: str) -> str:
    return "object_rel_direction" if question_type.startswith("object_rel_direction") else question_type


@register
class VSIBench(Benchmark):
    name = "vsibench"
    title = "VSI-Bench"
    category_fields = ("question_type", "dataset")
    video_defaults = {"fps": 1.0, "max_frames": 32}
    annotation = "test.json(l) (parquet export); videos <dataset>/<scene_name>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("test*.jsonl", "test*.json", "*.jsonl", "*.json"), "VSI-Bench annotation")
        items = []
        for where, row in read_records(path):
            dataset = field(row, "dataset", path, where)
            truth = require_answer(row, ("ground_truth",), path, where)
            raw = row.get("options")
            common = dict(
                benchmark=self.name,
                id=str(field(row, "id", path, where, (str, int))),
                question=field(row, "question", path, where),
                videos=(find_video(root, (dataset,), field(row, "scene_name", path, where)),),
                categories={"question_type": field(row, "question_type", path, where), "dataset": dataset},
                source=f"{path}:{where}",
            )
            if raw:
                options = letter_options(raw, path, where)
                items.append(
                    EvalItem(
                        **common,
                        options=options,
                        problem_type="multiple choice",
                        answer=answer_letter(truth, options, path, where, "ground_truth"),
                    )
                )
            else:
                items.append(EvalItem(**common, problem_type="regression", answer=str(truth)))
        return items

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        per_task: dict[str, list[float]] = defaultdict(list)
        for record in records:
            value = record["values"].get("accuracy", record["values"].get("mra", 0.0))
            per_task[task_of(record["categories"]["question_type"])].append(value)
        composite(summary, "overall", {task: sum(v) / len(v) for task, v in per_task.items()})
