"""LVBench: hour-long videos, multiple choice; categories are multi-label question types.

Source: THUDM/LVBench ``lvbench/metrics/compute_accuracy.py`` and ``lvbench/utils/answer_util.py``
(``polish_answer``); release: Hugging Face ``THUDM/LVBench`` ``video_info.meta.jsonl``.
Official score: the response is read by ``polish_answer`` (text before the first ``)``, after
a ``(``, its first word's first character, case kept: ``(B) x`` / ``B. x`` read B, ``b`` and
``The answer is B`` do not) and compared with ``answer`` exactly; ``acc`` pools every
answered question, each question type counts a question once per type it has. Item ids:
the release's ``uid`` (unique over the file).

Reads ``video_info.meta.jsonl``: one line per video, ``{"key", "type", "qa": [{"uid",
"question", "answer", "question_type": [...], "time_reference"}]}``, options inside the
question as ``(A) ...`` lines. A question counts in each of its types. Videos:
``videos/<key>.mp4`` (or ``all_videos/``).
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
from easyvideor1.eval.types import EvalItem
from easyvideor1.video.metadata import VideoMetadata


@register
class LVBench(Benchmark):
    name = "lvbench"
    protocol_version = 3  # official polish_answer reading (2026-12)
    title = "LVBench"
    category_fields = ("question_type", "video_type")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "video_info.meta.jsonl; videos videos/<key>.mp4"
    official_source = (
        "THUDM/LVBench lvbench/metrics/compute_accuracy.py (+ utils/answer_util.py polish_answer)"
    )

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("video_info.meta.jsonl", "data/video_info.meta.jsonl"), "LVBench metadata")
        items = []
        for where, row in read_records(path):
            key = str(field(row, "key", path, where, (str, int)))
            for index, qa in enumerate(field(row, "qa", path, where, list)):
                spot = f"{where} qa[{index}]"
                question, options = split_embedded_options(field(qa, "question", path, spot), path, spot)
                types = field(qa, "question_type", path, spot, (list, str))
                items.append(
                    self.choice_item(
                        field(qa, "uid", path, spot, (str, int)),
                        question,
                        options,
                        field(qa, "answer", path, spot),
                        (find_video(root, ("videos", "all_videos", ""), key),),
                        {
                            "question_type": types if isinstance(types, list) else [types],
                            "video_type": row.get("type"),
                        },
                        path=path,
                        where=spot,
                        meta={"time_reference": qa.get("time_reference")},
                    )
                )
        return items

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> OfficialVerdict:
        read = thudm_polish_answer(response)
        return OfficialVerdict(values={"accuracy": float(read == item.answer)}, extracted=read or None)
