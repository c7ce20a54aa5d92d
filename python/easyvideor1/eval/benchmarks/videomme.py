"""Video-MME: multiple choice over short/medium/long videos (accuracy by duration, domain, task).

Reads a JSON/JSONL export of ``videomme/test-00000-of-00001.parquet`` (parquet cannot be
read here: ``pandas.read_parquet(p).to_json("test.jsonl", orient="records", lines=True)``).
Rows: ``video_id``, ``duration``, ``domain``, ``sub_category``, ``videoID``,
``question_id``, ``task_type``, ``question``, ``options`` (``["A. ...", ...]``),
``answer`` (a letter). Videos: ``data/<videoID>.mp4`` (or ``videos/``).
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

ANNOTATIONS = ("videomme/test*.jsonl", "videomme/test*.json", "test*.jsonl", "test*.json")


@register
class VideoMME(Benchmark):
    name = "videomme"
    title = "Video-MME"
    category_fields = ("duration", "domain", "sub_category", "task_type")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "videomme/test-*.json(l) (parquet export); videos data/<videoID>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root, ANNOTATIONS, "Video-MME annotation (JSON/JSONL export of videomme/test-*.parquet)"
        )
        items = []
        for where, row in read_records(path):
            options = letter_options(field(row, "options", path, where, list), path, where)
            video = field(row, ("videoID", "video_id"), path, where)
            items.append(
                self.choice_item(
                    field(row, "question_id", path, where, (str, int)), field(row, "question", path, where),
                    options, field(row, "answer", path, where), (find_video(root, ("data", "videos", ""), video),),
                    {k: row.get(k) for k in self.category_fields}, path=path, where=where,
                )
            )
        return items
