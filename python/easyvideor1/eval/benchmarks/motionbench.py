"""MotionBench: fine-grained motion (six question types), multiple choice.

Source: THUDM/MotionBench ``motionbench/metrics/compute_accuracy.py`` and
``motionbench/utils/answer_util.py`` (``polish_answer``, as LVBench's); release: Hugging Face
``THUDM/MotionBench`` ``video_info.meta.jsonl`` (the repo's ``data/video_info.meta.jsonl``).
Official score: the response read by ``polish_answer`` (see LVBench) equals ``answer``; the
categories are the *video's* ``question_type``. The script's ``acc`` divides by every row of
the file but the answered ``NA`` ones, so on the public file (dev and test mixed) it counts
the test rows nobody can answer as wrong; the official number here is
its ``answered_acc`` (right / answered), which equals ``acc`` when exactly the labelled rows
are answered, as on the leaderboard. Item ids: the release's ``uid``.

Reads ``video_info.meta.jsonl``: one line per video, ``{"key", "video_path",
"question_type", "qa": [{"uid", "question", "answer"}]}``; each question lists its options
("A. ..."). Rows whose answer is absent or ``NA`` (the hidden test split) cannot be scored:
they are left out and counted in the report's notes. Videos: ``videos/<video_path>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    OfficialVerdict,
    field,
    find_file,
    find_video,
    read_records,
    register,
    split_embedded_options,
)
from easyvideor1.eval.benchmarks.extraction import thudm_polish_answer
from easyvideor1.eval.benchmarks.official import mean_official
from easyvideor1.eval.types import AnnotationError, EvalItem
from easyvideor1.video.metadata import VideoMetadata


@register
class MotionBench(Benchmark):
    name = "motionbench"
    protocol_version = 3  # official polish_answer reading; video-level question type (2026-12)
    title = "MotionBench"
    category_fields = ("question_type",)
    video_defaults = {"fps": 2.0, "max_frames": 32}
    annotation = "video_info.meta.jsonl; videos videos/<video_path>"
    official_source = (
        "THUDM/MotionBench motionbench/metrics/compute_accuracy.py (answered_acc; polish_answer)"
    )

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
                        uid,
                        question,
                        options,
                        answer,
                        (find_video(root, ("videos", ""), video),),
                        {"question_type": row.get("question_type") or qa.get("question_type")},
                        path=path,
                        where=spot,
                    )
                )
        if unlabelled:
            self.load_notes.append(
                f"{unlabelled} question(s) without a ground-truth answer (test split) were not evaluated"
            )
        return items

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> OfficialVerdict:
        read = thudm_polish_answer(response)
        return OfficialVerdict(values={"accuracy": float(read == item.answer)}, extracted=read or None)

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        return mean_official(records, "accuracy", name="answered_acc")
