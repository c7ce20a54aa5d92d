"""MMVU: expert-level video QA across disciplines; multiple choice and open-ended.

Reads ``validation.json``: a list of ``{"id", "video" (URL or path), "question",
"choices" ({"A": ...}; empty for open-ended), "answer", "question_type"
("multiple-choice" / "open-ended"), "metadata": {"subject", ...}}``. A video URL maps to
the local file after its ``/videos/`` part (``videos/<subject>/<n>.mp4``). Open-ended
answers are judged (LLM); without a judge the rule-based fallback is used and reported.
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
    require_answer,
)
from easyvideor1.eval.types import EvalItem


def local_video(root: Path, video: str) -> str:
    relative = video.split("/videos/", 1)[1] if "/videos/" in video else video.split("://", 1)[-1].lstrip("/")
    return find_video(root, ("videos", ""), relative)


@register
class MMVU(Benchmark):
    name = "mmvu"
    title = "MMVU"
    category_fields = ("subject", "question_type")
    video_defaults = {"fps": 1.0, "max_frames": 32}
    needs_judge = True
    annotation = "validation.json; videos videos/<subject>/<n>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root, ("validation.json", "validation.jsonl", "*.json"), "MMVU annotation (validation.json)"
        )
        items = []
        for where, row in read_records(path):
            qtype = field(row, "question_type", path, where)
            metadata = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
            answer = require_answer(row, ("answer",), path, where)
            common = dict(
                benchmark=self.name,
                id=str(field(row, "id", path, where, (str, int))),
                question=field(row, "question", path, where),
                videos=(local_video(root, field(row, "video", path, where)),),
                categories={"subject": metadata.get("subject"), "question_type": qtype},
                source=f"{path}:{where}",
            )
            if qtype == "multiple-choice":
                options = options_from_dict(field(row, "choices", path, where, dict), path, where, "choices")
                items.append(
                    EvalItem(
                        **common,
                        options=options,
                        problem_type="multiple choice",
                        answer=answer_letter(answer, options, path, where),
                    )
                )
            else:
                items.append(EvalItem(**common, problem_type="open-ended", answer=str(answer)))
        return items
