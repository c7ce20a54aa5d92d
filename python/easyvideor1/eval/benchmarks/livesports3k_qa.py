"""LiveSports-3K QA track: four-option multiple choice on sports broadcast events.

Scoring follows the official evaluation, showlab/livecc
``evaluation/livesports3kqa/distributed_evaluate_livesports3kqa.py`` (accuracy per
``q_type`` -- When / What / Who --, on the OCR questions, and overall). The data is
stdKonjac/LiveSports-3K on the Hugging Face Hub; its QA file is ``LiveSports-3K-QA.json``
(1,174 questions; earlier revisions shipped it as ``LiveSports-3K-QA.csv``, export it to
JSON). The QA column list of that file was not available to check: the loader reads the
fields the official script and the CC track use -- ``video_id``, ``event_id``, ``begin``,
``end`` (the event's span in the source video, seconds), ``q_id`` or ``question_id``,
``q_type``, ``OCR`` (0/1), ``question``, ``options`` (a list, labelled ``"A: ..."`` /
``"A. ..."`` or bare) or columns ``A``..``D``, ``answer`` (a letter or the right option's
text) -- and names any missing field.

Videos: the source video ``videos/<video>`` (the ``video`` field, as in the CC track) or
``videos/<video_id>.mp4``, with frames sampled within the event's ``[begin, end]`` only
(``EvalItem.clip``), as the official evaluation passes ``video_start``/``video_end``. A clip
cut beforehand as ``clips/<video_id>_<begin>_<end>.mp4`` is used whole instead. The
official script's own JSONL names the window ``video_start`` / ``video_end``; those are read
when ``begin`` / ``end`` are absent.

Official metric: the official script does not read generated text. It appends "Answer:" to
the prompt, takes the option whose letter token has the highest logit and counts the
question right when the first character of that option string (its letter) equals
``answer``; accuracy is correct / total over all questions (per ``q_type`` and on the OCR
questions likewise, nothing left out). From a generated response the nearest reading is the
same comparison on the response's first character (``official_item``): "C", "C. player 10"
and "C: ..." count, "(C)", "The answer is C" and "<answer>C</answer>" do not. This is a
reading of the script, not a reproduction: a likelihood-scored run can differ.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    LETTERS,
    Benchmark,
    OfficialVerdict,
    answer_letter,
    field,
    find_file,
    find_video,
    letter_options,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.benchmarks.official import grouped_official_mean
from easyvideor1.eval.benchmarks.official_groups import mean_with_group_means
from easyvideor1.eval.types import AnnotationError, EvalItem

ANNOTATIONS = ("LiveSports-3K-QA.jsonl", "LiveSports-3K-QA.json", "qa*.jsonl", "qa*.json")
_LABEL = re.compile(r"^\s*[\(\[]?([A-Ja-j])\s*[\)\].:：]\s*")


def _bare(options: list[Any]) -> list[Any]:
    """Option texts without their ``A:`` / ``A.`` / ``(A)`` labels (when all are labelled A, B, ...)."""
    labels = [_LABEL.match(o) if isinstance(o, str) else None for o in options]
    if all(labels) and [m.group(1).upper() for m in labels] == list(LETTERS[: len(options)]):
        return [o[m.end() :] for o, m in zip(options, labels)]
    return options


def _time_forms(value: float) -> list[str]:
    """``12.0`` -> ``["12.0", "12"]``: the ways a span bound appears in a clip's file name."""
    return list(dict.fromkeys([str(value), f"{value:g}"]))


@register
class LiveSports3KQA(Benchmark):
    name = "livesports3k_qa"
    protocol_version = 3  # official metric beside the strict one (2026-12)
    title = "LiveSports-3K-QA"
    official_source = "showlab/livecc evaluation/livesports3kqa/distributed_evaluate_livesports3kqa.py"
    category_fields = ("q_type", "ocr")
    video_defaults = {"fps": 2.0, "max_frames": 64}
    annotation = "LiveSports-3K-QA.json; videos videos/<video_id>.mp4, seen within [begin, end]"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ANNOTATIONS, "LiveSports-3K QA annotation (LiveSports-3K-QA.json)")
        items = []
        for where, row in read_records(path):
            raw = row.get("options") if isinstance(row, dict) else None
            if raw is None:
                raw = [field(row, letter, path, where, (str, int, float)) for letter in LETTERS[:4]]
            elif not isinstance(raw, list):
                raw = field(row, "options", path, where, list)  # names the wrong type
            options = letter_options(_bare(raw), path, where)
            video_id = str(field(row, "video_id", path, where, (str, int)))
            begin = field(row, ("begin", "video_start"), path, where, float)
            end = field(row, ("end", "video_end"), path, where, float)
            if not 0 <= begin < end:
                raise AnnotationError(
                    str(path), where, "begin/end", f"need 0 <= begin < end, got [{begin}, {end}]"
                )
            video, clip = self._video(root, row, video_id, begin, end)
            ocr = _ocr(field(row, ("OCR", "ocr"), path, where, (int, bool, str), default=None), path, where)
            items.append(
                EvalItem(
                    benchmark=self.name,
                    id=_item_id(row, video_id, where),
                    question=field(row, "question", path, where),
                    options=options,
                    problem_type="multiple choice",
                    answer=answer_letter(require_answer(row, ("answer",), path, where), options, path, where),
                    videos=(video,),
                    categories={
                        "q_type": field(row, ("q_type", "question_type"), path, where),
                        "ocr": None if ocr is None else ("OCR" if ocr else "no OCR"),
                    },
                    meta={"begin": begin, "end": end},
                    source=f"{path}:{where}",
                    clip=clip,
                )
            )
        return items

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[Any] = ()
    ) -> OfficialVerdict:
        first = response[:1]
        return OfficialVerdict(
            values={"accuracy": float(first == item.answer)},
            extracted=first or None,
            note="the official script compares the first character of the chosen option with the answer",
        )

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        headline = mean_with_group_means(records, "q_type")
        if headline is None:
            return None
        ocr = grouped_official_mean(records, "ocr", members=("OCR",))
        return {**headline, "ocr": ocr["value"] if ocr else None}

    @staticmethod
    def _video(
        root: Path, row: dict, video_id: str, begin: float, end: float
    ) -> tuple[str, tuple[float, float] | None]:
        """A pre-cut event clip (used whole), else the source video with the event's window."""
        for start in _time_forms(begin):
            for stop in _time_forms(end):
                clip = root / "clips" / f"{video_id}_{start}_{stop}.mp4"
                if clip.is_file():
                    return str(clip), None
        name = row.get("video") if isinstance(row.get("video"), str) and row.get("video") else video_id
        return find_video(root, ("videos", ""), name), (begin, end)


def _ocr(value: Any, path: Path, where: str) -> bool | None:
    if value is None:
        return None
    text = str(value).strip().lower()
    if text not in ("0", "1", "true", "false"):
        raise AnnotationError(str(path), where, "OCR", f"expected 0 or 1, got {value!r}")
    return text in ("1", "true")


def _item_id(row: dict, video_id: str, where: str) -> str:
    """``question_id`` if given, else ``<video_id>_e<event_id>_q<q_id>`` from the parts present."""
    if row.get("question_id") is not None:
        return str(row["question_id"])
    parts = [video_id]
    if row.get("event_id") is not None:
        parts.append(f"e{row['event_id']}")
    parts.append(f"q{row['q_id']}" if row.get("q_id") is not None else f"r{where.split()[-1]}")
    return "_".join(parts)
