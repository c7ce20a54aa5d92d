"""Video-MME: multiple choice over short/medium/long videos (accuracy by duration, domain, task).

Source: BradyFU/Video-MME (README: prompt, ``evaluation/output_test_template.json``) and the
scorer it points to, thanku-all/parse_answer ``eval_your_results.py``. Release: Hugging Face
``lmms-lab/Video-MME``, ``videomme/test-00000-of-00001.parquet`` (one row per question) and
``videos_chunked_*.zip`` (``data/<videoID>.mp4``). Parquet cannot be read here: export it
once (``pandas.read_parquet(p).to_json("test.jsonl", orient="records", lines=True)``). Rows:
``video_id`` (``"001"``), ``duration`` (short/medium/long), ``domain``, ``sub_category``,
``url``, ``videoID`` (the YouTube id, the video's file name), ``question_id`` (``"001-1"``,
unique), ``task_type``, ``question``, ``options`` (``["A. ...", ...]``), ``answer`` (a
letter). Videos: ``data/<videoID>.mp4`` (or ``videos/``).

Official score (``extract_characters_regex``): the response stripped, the answer phrases
(``The answer is``, ``Answer:``, ...) deleted, then the first capital A-D anywhere is the
answer (so ``Based on the video, B`` reads the B of "Based", ``(B)`` and ``<answer>B</answer>``
read B, a lower-case ``b`` reads nothing). A response with no capital A-D gives "" and is left
out of the denominator ("answered"); Overall is correct / answered, pooled over durations.
Two pairs of the script's phrase list miss a comma, so ``The best option is`` and
``Best answer:`` are never deleted (kept as written). The strict metric counts every item.
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
    letter_options,
    read_records,
    register,
)
from easyvideor1.eval.benchmarks.extraction import VIDEOMME_PREFIXES, first_letter_after_prefixes
from easyvideor1.eval.benchmarks.official import mean_official
from easyvideor1.eval.types import EvalItem
from easyvideor1.video.metadata import VideoMetadata

ANNOTATIONS = ("videomme/test*.jsonl", "videomme/test*.json", "test*.jsonl", "test*.json")


@register
class VideoMME(Benchmark):
    name = "videomme"
    protocol_version = 3  # official extraction and denominator (2026-12)
    title = "Video-MME"
    category_fields = ("duration", "domain", "sub_category", "task_type")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "videomme/test-*.json(l) (parquet export); videos data/<videoID>.mp4"
    official_source = "thanku-all/parse_answer eval_your_results.py (linked from BradyFU/Video-MME)"

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
                    field(row, "question_id", path, where, (str, int)),
                    field(row, "question", path, where),
                    options,
                    field(row, "answer", path, where),
                    (find_video(root, ("data", "videos", ""), video),),
                    {k: row.get(k) for k in self.category_fields},
                    path=path,
                    where=where,
                )
            )
        return items

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> OfficialVerdict:
        letter = first_letter_after_prefixes(response, VIDEOMME_PREFIXES, "ABCD")
        if not letter:
            return OfficialVerdict(excluded="no capital A-D in the response (not 'answered')")
        return OfficialVerdict(values={"accuracy": float(letter == item.answer)}, extracted=letter)

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        return mean_official(records, "accuracy", name="Overall (correct / answered)")
