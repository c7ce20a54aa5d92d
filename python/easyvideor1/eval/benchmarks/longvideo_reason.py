"""LongVideo-Reason (eval split): long-video reasoning, multiple choice by category.

Reads ``longvideo_reason.json(l)`` (or another ``*.json(l)``): rows ``{"id", "video",
"question", "options" (list or lettered object), "answer" (letter or index), "category"
(temporal, goal and purpose, spatial, plot and narrative)}``. Videos: ``videos/<video>``.
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
class LongVideoReason(Benchmark):
    name = "longvideo_reason"
    title = "LongVideo-Reason"
    category_fields = ("category",)
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "longvideo_reason.json(l); videos videos/<video>"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("longvideo_reason.jsonl", "longvideo_reason.json", "*.jsonl", "*.json"),
                         "LongVideo-Reason annotation")
        items = []
        for where, row in read_records(path):
            raw = field(row, ("options", "candidates"), path, where, (list, dict))
            options = (options_from_dict(raw, path, where, "options") if isinstance(raw, dict)
                       else letter_options(raw, path, where))
            items.append(EvalItem(
                benchmark=self.name, id=str(field(row, "id", path, where, (str, int))),
                question=field(row, "question", path, where), options=options, problem_type="multiple choice",
                answer=answer_letter(require_answer(row, ("answer",), path, where), options, path, where),
                videos=(find_video(root, ("videos", ""), field(row, ("video", "video_path"), path, where)),),
                categories={"category": row.get("category") or row.get("type")}, source=f"{path}:{where}",
            ))
        return items
