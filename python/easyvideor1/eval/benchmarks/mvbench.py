"""MVBench: 20 temporal tasks, multiple choice; the headline is the mean over tasks.

Reads ``json/<task>.json`` (one file per task, a list of ``{"video", "question",
"candidates", "answer"}``; the answer is the text of the right candidate). Videos are found
by file name anywhere under ``video/`` (the release nests them by source dataset).

Some tasks give ``start``/``end`` bounds; they are recorded, but frames are sampled over
the whole clip (the frame cache has no segment sampling), which the report notes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    VideoIndex,
    answer_letter,
    field,
    find_files,
    letter_options,
    read_records,
    register,
)
from easyvideor1.eval.benchmarks.common import macro_mean
from easyvideor1.eval.types import EvalItem


@register
class MVBench(Benchmark):
    name = "mvbench"
    title = "MVBench"
    category_fields = ("task",)
    video_defaults = {"fps": 2.0, "max_frames": 16, "min_frames": 16}
    annotation = "json/<task>.json; videos anywhere under video/"

    def load(self, root: Path) -> list[EvalItem]:
        videos = VideoIndex(root / "video")
        items = []
        bounded = 0
        for path in find_files(root, ("json/*.json",), "MVBench task files (json/<task>.json)"):
            task = path.stem
            for where, row in read_records(path):
                candidates = field(row, "candidates", path, where, list)
                options = letter_options(candidates, path, where, "candidates")
                answer = field(row, "answer", path, where, (str, int))
                bounds = {k: row[k] for k in ("start", "end") if row.get(k) is not None}
                bounded += bool(bounds)
                items.append(
                    EvalItem(
                        benchmark=self.name,
                        id=f"{task}/{where.split()[-1]}",
                        question=field(row, "question", path, where),
                        options=options,
                        problem_type="multiple choice",
                        answer=answer_letter(answer, options, path, where),
                        videos=(videos.find(field(row, "video", path, where)),),
                        categories={"task": task},
                        meta=bounds,
                        source=f"{path}:{where}",
                    )
                )
        if bounded:
            self.load_notes.append(
                f"{bounded} item(s) carry start/end bounds; frames were sampled over the whole "
                "video (no segment sampling in the frame cache)"
            )
        return items

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        macro_mean(summary, "task", "accuracy", name="task_mean_accuracy")
