"""VideoReasonBench: vision-centric complex reasoning; free-form answers judged per skill.

Reads ``videoreasonbench.json(l)`` (or another ``*.json(l)`` export): rows ``{"id",
"video", "question", "answer", "skill" (e.g. recall order, infer state, predict
operation), "level"}``. Answers are compared by the LLM judge; without a judge the
rule-based fallback accepts only a normalised exact match. Videos: ``videos/<video>``.
"""

from __future__ import annotations

from pathlib import Path

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    field,
    find_file,
    find_video,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.types import EvalItem


@register
class VideoReasonBench(Benchmark):
    name = "videoreasonbench"
    title = "VideoReasonBench"
    category_fields = ("skill", "level")
    video_defaults = {"fps": 2.0, "max_frames": 64}
    needs_judge = True
    annotation = "videoreasonbench.json(l); videos videos/<video>"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("videoreasonbench.jsonl", "videoreasonbench.json", "*.jsonl", "*.json"),
                         "VideoReasonBench annotation")
        items = []
        for where, row in read_records(path):
            items.append(EvalItem(
                benchmark=self.name, id=str(field(row, "id", path, where, (str, int))),
                question=field(row, "question", path, where), problem_type="open-ended",
                answer=str(require_answer(row, ("answer",), path, where)),
                videos=(find_video(root, ("videos", ""), field(row, ("video", "video_path"), path, where)),),
                categories={"skill": row.get("skill") or row.get("dim"), "level": row.get("level")},
                source=f"{path}:{where}",
            ))
        return items
