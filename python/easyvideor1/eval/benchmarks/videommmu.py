"""Video-MMMU: knowledge acquisition from lecture videos (Perception, Comprehension, Adaptation).

Reads JSON/JSONL exports of the three parquet configs, ``<Track>.json(l)`` (or
``<Track>/*.json(l)``): rows ``{"id", "question", "options" (list), "answer",
"question_type" ("multiple-choice" or "open"), "image" (optional relative path)}``.
Videos: ``videos/<Track>/<id>.mp4`` (or ``<Track>/<id>.mp4``). The discipline is read from
the id (``<split>_<Discipline>_<n>``). Open answers: the judge, else the rule-based fallback
(exact text or equal number). The Δknowledge metric needs a run without the video and is
not computed here (compare two runs instead).
"""

from __future__ import annotations

import re
from pathlib import Path

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    answer_letter,
    field,
    find_video,
    letter_options,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.types import AnnotationError, EvalItem

TRACKS = ("Perception", "Comprehension", "Adaptation")
_DISCIPLINE = re.compile(r"^[A-Za-z]+_(.+?)_\d+$")


@register
class VideoMMMU(Benchmark):
    name = "videommmu"
    title = "Video-MMMU"
    category_fields = ("track", "discipline")
    video_defaults = {"fps": 1.0, "max_frames": 32}
    needs_judge = True
    annotation = "<Track>.json(l) per track (parquet exports); videos videos/<Track>/<id>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        files = [
            (t, p)
            for t in TRACKS
            for p in (sorted(root.glob(f"{t}.json*")) + sorted(root.glob(f"{t}/*.json*")))
            if p.is_file()
        ]
        if not files:
            raise AnnotationError(
                str(root),
                None,
                None,
                "no Video-MMMU track files (Perception/Comprehension/Adaptation .json or .jsonl)",
            )
        items = []
        for track, path in files:
            for where, row in read_records(path):
                qid = str(field(row, "id", path, where, (str, int)))
                match = _DISCIPLINE.match(qid)
                answer = require_answer(row, ("answer",), path, where)
                image = row.get("image") if isinstance(row.get("image"), str) else None
                common = dict(
                    benchmark=self.name,
                    id=f"{track}/{qid}",
                    question=field(row, "question", path, where),
                    videos=(find_video(root, (f"videos/{track}", track, "videos"), qid),),
                    images=(str(path.parent / image),) if image else (),
                    categories={"track": track, "discipline": match.group(1) if match else None},
                    source=f"{path}:{where}",
                )
                options = row.get("options")
                if options and str(row.get("question_type", "multiple-choice")).startswith("multiple"):
                    labelled = letter_options(options, path, where)
                    items.append(
                        EvalItem(
                            **common,
                            options=labelled,
                            problem_type="multiple choice",
                            answer=answer_letter(answer, labelled, path, where),
                        )
                    )
                else:
                    items.append(EvalItem(**common, problem_type="open-ended", answer=str(answer)))
        return items
