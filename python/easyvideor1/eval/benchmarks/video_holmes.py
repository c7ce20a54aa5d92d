"""Video-Holmes: reasoning over suspense short films, multiple choice by question type.

Reads ``test_Video-Holmes.json``: a list of ``{"video ID", "Question ID", "Question Type"
(SR, IMC, TCI, TA, MHR, PAR, CTI), "Question", "Options": {"A": ...}, "Answer"}``.
Videos: ``videos_cropped/<video ID>.mp4`` (or ``videos/``).
"""

from __future__ import annotations

from pathlib import Path

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    answer_letter,
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
                EvalItem(
                    benchmark=self.name,
                    id=str(field(row, "Question ID", path, where, (str, int))),
                    question=field(row, "Question", path, where),
                    options=options,
                    problem_type="multiple choice",
                    answer=answer_letter(field(row, "Answer", path, where), options, path, where, "Answer"),
                    videos=(find_video(root, ("videos_cropped", "videos", ""), video),),
                    categories={"question_type": row.get("Question Type")},
                    source=f"{path}:{where}",
                )
            )
        return items
