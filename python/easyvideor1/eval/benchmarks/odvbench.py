"""ODV-Bench: online driving-video understanding; multiple choice by category and task.

Reads ``odv_bench.json(l)`` (or another ``*.json(l)``): rows ``{"id", "video", "question",
"options" (list or lettered object), "answer" (letter or index), "category" (static
target, dynamic target, event), "task", "realtime"}``. Each question is asked on the clip
up to its ``realtime``, stored as ``videos/<video>`` (the release's clips).
"""

from __future__ import annotations

from pathlib import Path

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    answer_letter,
    field,
    find_file,
    find_video,
    letter_options,
    options_from_dict,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.types import EvalItem


@register
class ODVBench(Benchmark):
    name = "odvbench"
    title = "ODV-Bench"
    category_fields = ("category", "task")
    video_defaults = {"fps": 1.0, "max_frames": 32}
    annotation = "odv_bench.json(l); clips videos/<video>"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root, ("odv_bench.jsonl", "odv_bench.json", "*.jsonl", "*.json"), "ODV-Bench annotation"
        )
        items = []
        for where, row in read_records(path):
            raw = field(row, "options", path, where, (list, dict))
            options = (
                options_from_dict(raw, path, where, "options")
                if isinstance(raw, dict)
                else letter_options(raw, path, where)
            )
            items.append(
                EvalItem(
                    benchmark=self.name,
                    id=str(field(row, "id", path, where, (str, int))),
                    question=field(row, "question", path, where),
                    options=options,
                    problem_type="multiple choice",
                    answer=answer_letter(
                        require_answer(row, ("answer", "gt"), path, where), options, path, where
                    ),
                    videos=(find_video(root, ("videos", ""), field(row, ("video", "path"), path, where)),),
                    categories={
                        "category": row.get("category"),
                        "task": row.get("task") or row.get("task_type"),
                    },
                    meta={"realtime": row.get("realtime")},
                    source=f"{path}:{where}",
                )
            )
        return items
