"""MotionBench: fine-grained motion (six question types), multiple choice.

Reads ``video_info.meta.jsonl``: one line per video, ``{"key", "video_path",
"question_type", "qa": [{"uid", "question", "answer"}]}``; each question lists its options
("A. ..."). Rows whose answer is absent or ``NA`` (the hidden test split) cannot be scored:
they are left out and counted in the report's notes. Videos: ``videos/<video_path>``.
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
    split_embedded_options,
)
from easyvideor1.eval.types import AnnotationError, EvalItem


@register
class MotionBench(Benchmark):
    name = "motionbench"
    title = "MotionBench"
    category_fields = ("question_type",)
    video_defaults = {"fps": 2.0, "max_frames": 32}
    annotation = "video_info.meta.jsonl; videos videos/<video_path>"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root, ("video_info.meta.jsonl", "MotionBench/video_info.meta.jsonl"), "MotionBench metadata"
        )
        items, unlabelled = [], 0
        for where, row in read_records(path):
            qas = field(row, "qa", path, where, list)
            video = str(field(row, ("video_path", "key"), path, where, (str, int)))
            for index, qa in enumerate(qas):
                spot = f"{where} qa[{index}]"
                answer = qa.get("answer") if isinstance(qa, dict) else None
                if answer in (None, "", "NA"):
                    unlabelled += 1
                    continue
                question, options = split_embedded_options(field(qa, "question", path, spot), path, spot)
                uid = qa.get("uid")
                if uid is None:
                    raise AnnotationError(str(path), spot, "uid", "missing")
                items.append(
                    self.choice_item(
                        uid, question, options, answer, (find_video(root, ("videos", ""), video),),
                        {"question_type": qa.get("question_type") or row.get("question_type")}, path=path, where=spot,
                    )
                )
        if unlabelled:
            self.load_notes.append(
                f"{unlabelled} question(s) without a ground-truth answer (test split) were not evaluated"
            )
        return items
