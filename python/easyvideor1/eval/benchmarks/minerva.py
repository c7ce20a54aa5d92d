"""MINERVA: complex video reasoning, five-way multiple choice.

Reads ``minerva.json``: a list of ``{"key", "video_id", "question", "answer_choice_0" ..
"answer_choice_4", "answer_id" (index), "answer", "question_type", "category", "split"}``.
Videos: ``videos/<video_id>.mp4``.
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
class Minerva(Benchmark):
    name = "minerva"
    title = "MINERVA"
    category_fields = ("question_type", "category")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "minerva.json; videos videos/<video_id>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root, ("minerva.json", "minerva.jsonl", "*.json"), "MINERVA annotation (minerva.json)"
        )
        items = []
        for where, row in read_records(path):
            choices = []
            for index in range(10):
                name = f"answer_choice_{index}"
                if name not in row:
                    break
                choices.append(field(row, name, path, where, (str, int, float)))
            options = letter_options(choices, path, where, "answer_choice_0")
            answer = (
                row.get("answer_id")
                if row.get("answer_id") is not None
                else field(row, "answer", path, where)
            )
            types = row.get("question_type")
            video = str(field(row, "video_id", path, where, (str, int)))
            items.append(
                self.choice_item(
                    field(row, "key", path, where, (str, int)), field(row, "question", path, where), options, answer,
                    (find_video(root, ("videos", ""), video),),
                    {"question_type": types, "category": row.get("category")},
                    path=path, where=where, answer_field="answer_id",
                )
            )
        return items
