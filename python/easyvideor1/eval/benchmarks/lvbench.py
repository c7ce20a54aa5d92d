"""LVBench: hour-long videos, multiple choice; categories are multi-label question types.

Reads ``video_info.meta.jsonl``: one line per video, ``{"key", "type", "qa": [{"uid",
"question", "answer", "question_type": [...], "time_reference"}]}``, options inside the
question as ``(A) ...`` lines. A question counts in each of its types. Videos:
``videos/<key>.mp4`` (or ``all_videos/``).
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
from easyvideor1.eval.types import EvalItem


@register
class LVBench(Benchmark):
    name = "lvbench"
    title = "LVBench"
    category_fields = ("question_type", "video_type")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "video_info.meta.jsonl; videos videos/<key>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("video_info.meta.jsonl", "data/video_info.meta.jsonl"), "LVBench metadata")
        items = []
        for where, row in read_records(path):
            key = str(field(row, "key", path, where, (str, int)))
            for index, qa in enumerate(field(row, "qa", path, where, list)):
                spot = f"{where} qa[{index}]"
                question, options = split_embedded_options(field(qa, "question", path, spot), path, spot)
                types = field(qa, "question_type", path, spot, (list, str))
                items.append(self.choice_item(
                    field(qa, "uid", path, spot, (str, int)), question, options, field(qa, "answer", path, spot),
                    (find_video(root, ("videos", "all_videos", ""), key),),
                    {"question_type": types if isinstance(types, list) else [types], "video_type": row.get("type")},
                    path=path, where=spot, meta={"time_reference": qa.get("time_reference")},
                ))
        return items
