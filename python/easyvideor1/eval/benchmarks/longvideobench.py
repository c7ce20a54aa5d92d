"""LongVideoBench: referring-reasoning multiple choice; accuracy by duration group and category.

Reads ``lvb_val.json``: a list of ``{"id", "video_id", "video_path", "question",
"candidates", "correct_choice" (index), "duration_group", "question_category",
"topic_category", "level"}``. Videos: ``videos/<video_path>``. Subtitles are not
interleaved (the run records this setting).
"""

from __future__ import annotations

from pathlib import Path

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    field,
    find_file,
    find_video,
    letter_options,
    read_records,
    register,
)
from easyvideor1.eval.types import EvalItem


@register
class LongVideoBench(Benchmark):
    name = "longvideobench"
    title = "LongVideoBench"
    category_fields = ("duration_group", "question_category", "topic_category", "level")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "lvb_val.json; videos videos/<video_path>"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root, ("lvb_val.json", "lvb_val.jsonl", "*.json"), "LongVideoBench annotation (lvb_val.json)"
        )
        items = []
        for where, row in read_records(path):
            options = letter_options(field(row, "candidates", path, where, list), path, where, "candidates")
            choice = field(row, "correct_choice", path, where, int)
            video = field(row, ("video_path", "video_id"), path, where)
            items.append(
                self.choice_item(
                    field(row, "id", path, where, (str, int)), field(row, "question", path, where), options, choice,
                    (find_video(root, ("videos", ""), video),), {k: row.get(k) for k in self.category_fields},
                    path=path, where=where, answer_field="correct_choice",
                )
            )
        return items
