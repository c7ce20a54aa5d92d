"""Video-Holmes: reasoning over suspense short films, multiple choice by question type.

Source: TencentARC/Video-Holmes ``evaluate.py`` (loader, prompt, extraction, accuracy); the data
is the Hugging Face dataset TencentARC/Video-Holmes (``download.py`` snapshots it into
``Benchmark/``, then ``videos.zip`` and ``annotations.zip`` are unzipped there). Reads
``test_Video-Holmes.json``: a list of ``{"video ID", "Question ID" (1, 2, ... per video),
"Question Type" (SR, IMC, TCI, TA, MHR, PAR, CTI), "Question", "Options": {"A": ... "F": ...},
"Answer" (a letter), "Explanation"}``. Videos: ``videos_cropped/<video ID>.mp4`` (or
``videos/``, the folder ``evaluate.py`` reads).

Item ids: ``Question ID`` numbers the questions of each video, so the id is
``<video ID>_<Question ID>``.

Official score (``evaluate.py``): the last ``<answer>...</answer>`` span, stripped (the whole
response without one), is read by substring tests in a fixed order: the first of ``A`` .. ``F``
followed by a space or ``:`` or preceded by ``[``, else the first of ``A`` .. ``F`` appearing
anywhere (upper case only); nothing is ``WRONG``. Correct when equal to ``Answer``; accuracy
pooled over all questions (and per type), every question counted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    OfficialVerdict,
    field,
    find_file,
    find_video,
    options_from_dict,
    read_records,
    register,
)
from easyvideor1.eval.types import EvalItem

_ANSWER_SPAN = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
_LETTERS = "ABCDEF"


def official_choice(response: str) -> str:
    """The letter ``evaluate.py`` reads from a response (``"WRONG"`` when none)."""
    spans = _ANSWER_SPAN.findall(response)
    choice = spans[-1].strip() if spans else response
    for letter in _LETTERS:  # "X ", "X:" or "[X", tried letter by letter
        if f"{letter} " in choice or f"{letter}:" in choice or f"[{letter}" in choice:
            return letter
    for letter in _LETTERS:
        if letter in choice:
            return letter
    return "WRONG"


@register
class VideoHolmes(Benchmark):
    name = "video_holmes"
    title = "Video-Holmes"
    protocol_version = 3  # ids <video ID>_<Question ID>; official scoring (2026-12)
    category_fields = ("question_type",)
    video_defaults = {"fps": 1.0, "max_frames": 32}
    annotation = "test_Video-Holmes.json; videos videos_cropped/<video ID>.mp4"
    official_source = "TencentARC/Video-Holmes evaluate.py"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root, ("test_Video-Holmes.json", "*.json"), "Video-Holmes annotation (test_Video-Holmes.json)"
        )
        items = []
        for where, row in read_records(path):
            options = options_from_dict(field(row, "Options", path, where, dict), path, where, "Options")
            video = str(field(row, "video ID", path, where, (str, int)))
            question_id = field(row, "Question ID", path, where, (str, int))
            items.append(
                self.choice_item(
                    f"{video}_{question_id}",
                    field(row, "Question", path, where),
                    options,
                    field(row, "Answer", path, where),
                    (find_video(root, ("videos_cropped", "videos", ""), video),),
                    {"question_type": row.get("Question Type")},
                    path=path,
                    where=where,
                    answer_field="Answer",
                )
            )
        return items

    def official_item(self, item: EvalItem, response: str, ctx: Any, metas: Any = ()) -> OfficialVerdict:
        choice = official_choice(response)
        return OfficialVerdict(values={"accuracy": float(choice == item.answer)}, extracted=choice)
