"""LiveSports-3K QA track: multiple-choice questions on sports broadcast clips.

Reads a JSON/JSONL export of the QA parquet: rows ``{"video_id", "begin", "end",
"question", "options" (list) or "A".."D" columns, "answer" (letter), "q_type"}`` and,
when present, ``path`` (the clip's file name). Clips: ``videos/<path>`` or
``videos/<video_id>_<begin>_<end>.mp4`` (the event's segment, cut beforehand).
"""

from __future__ import annotations

from pathlib import Path

from easyvideor1.eval.benchmarks.base import (
    LETTERS,
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
from easyvideor1.eval.types import EvalItem


def _seconds(value: float | int | str) -> str:
    return f"{float(value):g}"


@register
class LiveSports3KQA(Benchmark):
    name = "livesports3k_qa"
    title = "LiveSports-3K-QA"
    category_fields = ("q_type",)
    video_defaults = {"fps": 2.0, "max_frames": 64}
    annotation = "qa.json(l) (parquet export); clips videos/<video_id>_<begin>_<end>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("qa*.jsonl", "qa*.json", "*.jsonl", "*.json"), "LiveSports-3K QA annotation")
        items = []
        for where, row in read_records(path):
            raw = row.get("options") if isinstance(row, dict) else None
            if not raw:
                raw = [field(row, letter, path, where, (str, int, float)) for letter in LETTERS[:4]]
            options = letter_options(raw, path, where)
            clip = row.get("path") or (
                f"{field(row, 'video_id', path, where)}_{_seconds(field(row, 'begin', path, where, float))}"
                f"_{_seconds(field(row, 'end', path, where, float))}.mp4"
            )
            qid = row.get("q_id") if row.get("q_id") is not None else row.get("id")
            items.append(
                EvalItem(
                    benchmark=self.name,
                    id=str(qid if qid is not None else where.split()[-1]),
                    question=field(row, "question", path, where),
                    options=options,
                    problem_type="multiple choice",
                    answer=answer_letter(require_answer(row, ("answer",), path, where), options, path, where),
                    videos=(find_video(root, ("videos", ""), clip),),
                    categories={"q_type": row.get("q_type") or row.get("question_type")},
                    source=f"{path}:{where}",
                )
            )
        return items
