"""LongVideoBench: referring-reasoning multiple choice; accuracy by duration group and category.

Source: the evaluation the benchmark's repository (longvideobench/LongVideoBench README) points
to, lmms-eval ``lmms_eval/tasks/longvideobench/utils.py``; release: Hugging Face
``longvideobench/LongVideoBench`` ``lvb_val.json`` (``lvb_test_wo_gt.json`` has no
``correct_choice`` and is not loaded), ``videos/<video_path>``. Official score
(``parse_multi_choice_response``): answer phrases deleted, the first capital A-E anywhere;
when there is none (or more than ten words hold none) the script picks a *random* option
(here seeded by the item id, so a run is reproducible; the expectation is that of the
script). ``Overall`` weights every duration group and question category by its size, each
item belonging to one of each: the pooled accuracy. Item ids: the release's ``id``
(``<video_id>_<n>``).

Reads ``lvb_val.json``: a list of ``{"id", "video_id", "video_path", "question",
"candidates", "correct_choice" (index), "duration_group", "question_category",
"topic_category", "level"}``. Videos: ``videos/<video_path>``. Subtitles are not
interleaved (the run records this setting).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    LETTERS,
    Benchmark,
    OfficialVerdict,
    field,
    find_file,
    find_video,
    letter_options,
    read_records,
    register,
)
from easyvideor1.eval.benchmarks.extraction import LONGVIDEOBENCH_PREFIXES, first_letter_after_prefixes
from easyvideor1.eval.benchmarks.official import mean_official
from easyvideor1.eval.types import EvalItem
from easyvideor1.video.metadata import VideoMetadata


@register
class LongVideoBench(Benchmark):
    name = "longvideobench"
    protocol_version = 3  # official reading (random letter when none) (2026-12)
    title = "LongVideoBench"
    category_fields = ("duration_group", "question_category", "topic_category", "level")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "lvb_val.json; videos videos/<video_path>"
    official_source = (
        "EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/longvideobench/utils.py (per the LongVideoBench README)"
    )

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root, ("lvb_val.json", "lvb_val.jsonl", "*.json"), "LongVideoBench annotation (lvb_val.json)"
        )
        items = []
        for where, row in read_records(path):
            options = letter_options(field(row, "candidates", path, where, list), path, where, "candidates")
            choice = field(row, "correct_choice", path, where, int)
            video = field(row, ("video_path", "video_id"), path, where)
            items.append(
                self.choice_item(
                    field(row, "id", path, where, (str, int)),
                    field(row, "question", path, where),
                    options,
                    choice,
                    (find_video(root, ("videos", ""), video),),
                    {k: row.get(k) for k in self.category_fields},
                    path=path,
                    where=where,
                    answer_field="correct_choice",
                )
            )
        return items

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> OfficialVerdict:
        letters = LETTERS[: len(item.options or ())]
        read = first_letter_after_prefixes(response, LONGVIDEOBENCH_PREFIXES, "ABCDE")
        note = None
        if not read:
            read = random.Random(f"longvideobench/{item.id}").choice(letters)
            note = "no capital A-E: the official parser picks a random option"
        return OfficialVerdict(values={"accuracy": float(read == item.answer)}, extracted=read, note=note)

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        return mean_official(records, "accuracy", name="Overall")
