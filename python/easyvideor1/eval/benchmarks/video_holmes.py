"""Video-Holmes: reasoning over suspense short films, multiple choice by question type.

Reads ``test_Video-Holmes.json``: a list of ``{"video ID", "Question ID", "Question Type"
(SR, IMC, TCI, TA, MHR, PAR, CTI), "Question", "Options": {"A": ...}, "Answer"}``.
Videos: ``videos_cropped/<video ID>.mp4`` (or ``videos/``).
"""

from __future__ import annotations

from pathlib import Path

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    field,
    find_file,
    find_video,
    options_from_dict,
    read_records,
    register,
)
from easyvideor1.eval.types import EvalItem


@register
class VideoHolmes(Benchmark):
    name = "video_holmes"
    title = "Video-Holmes"
    category_fields = ("question_type",)
    video_defaults = {"fps": 1.0, "max_frames": 32}
    annotation = "test_Video-Holmes.json; videos videos_cropped/<video ID>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root, ("test_Video-Holmes.json", "*.json"), "Video-Holmes annotation (test_Video-Holmes.json)"
        )
        items = []
        for where, row in read_records(path):
            options = options_from_dict(field(row, "Options", path, where, dict), path, where, "Options")
            video = str(field(row, "video ID", path, where, (str, int)))
            items.append(
                self.choice_item(
                    field(row, "Question ID", path, where, (str, int)), field(row, "Question", path, where), options,
                    field(row, "Answer", path, where), (find_video(root, ("videos_cropped", "videos", ""), video),),
                    {"question_type": row.get("Question Type")}, path=path, where=where, answer_field="Answer",
                )
            )
        return items
