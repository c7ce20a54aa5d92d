"""MINERVA: complex video reasoning, five-way multiple choice.

Source: the benchmark (google-deepmind/neptune README, section MINERVA) ships only the
annotation file ``minerva.json`` and no scorer; its evaluation code is lmms-eval's
``lmms_eval/tasks/minerva/utils.py`` (which reads the same file from the Hugging Face dataset
lmms-lab-eval/minerva). ``minerva.json`` is a JSON list of ``{"key" (unique per question),
"video_id" (a YouTube id), "question", "answer", "answer_choice_0" .. "answer_choice_4",
"answer_id" (index of the right choice), "reasoning", "question_type" (the README spells it
``question type``; both are read), "split", "category"}``. Videos: ``videos/<video_id>.mp4``.

Official score (lmms-eval ``minerva_process_results``): the letter is the last match of
"answer"/"option" + "is"/":" + a letter A-E (any case, upper-cased); failing that, the last
upper-case A-E anywhere in the response once the phrases "The best answer is", "The correct
answer is", "The answer is", "Answer:", "Option:", "Therefore, the final answer is:" are
removed. A response with no letter gets a random letter (``random.choice``): its official
value here is the expectation of that guess, 1/5. Accuracy pooled over every question.
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
    letter_options,
    read_records,
    register,
)
from easyvideor1.eval.types import EvalItem

_EXPLICIT = re.compile(r"(?:answer|option)\s*(?:is|:)\s*([ABCDE])", re.IGNORECASE)
_PHRASES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "Answer:",
    "Option:",
    "Therefore, the final answer is:",
)


def official_letter(response: str) -> str:
    """The letter lmms-eval reads (``""``: none, which it replaces by a random guess)."""
    text = response.strip()
    explicit = list(_EXPLICIT.finditer(text))
    if explicit:
        return explicit[-1].group(1).upper()
    for phrase in _PHRASES:
        text = text.replace(phrase, "")
    letters = re.findall(r"[ABCDE]", text)
    return letters[-1] if letters else ""


@register
class Minerva(Benchmark):
    name = "minerva"
    title = "MINERVA"
    protocol_version = 3  # "question type" read too; official scoring (2026-12)
    category_fields = ("question_type", "category")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "minerva.json; videos videos/<video_id>.mp4"
    official_source = "EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/minerva/utils.py"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root, ("minerva.json", "minerva.jsonl", "*.json"), "MINERVA annotation (minerva.json)"
        )
        items = []
        for where, row in read_records(path):
            choices = []
            for index in range(10):
                name = f"answer_choice_{index}"
                if name not in row:
                    break
                choices.append(field(row, name, path, where, (str, int, float)))
            options = letter_options(choices, path, where, "answer_choice_0")
            answer = (
                row.get("answer_id")
                if row.get("answer_id") is not None
                else field(row, "answer", path, where)
            )
            if isinstance(answer, str) and answer.isdigit() and row.get("answer_id") is not None:
                answer = int(answer)  # lmms-eval's _gold_letter accepts an index written as text
            types = row.get("question_type", row.get("question type"))
            video = str(field(row, "video_id", path, where, (str, int)))
            items.append(
                self.choice_item(
                    field(row, "key", path, where, (str, int)),
                    field(row, "question", path, where),
                    options,
                    answer,
                    (find_video(root, ("videos", ""), video),),
                    {"question_type": types, "category": row.get("category")},
                    path=path,
                    where=where,
                    answer_field="answer_id",
                )
            )
        return items

    def official_item(self, item: EvalItem, response: str, ctx: Any, metas: Any = ()) -> OfficialVerdict:
        letter = official_letter(response)
        if not letter:
            return OfficialVerdict(
                values={"accuracy": 1 / 5},  # random.choice over the five letters A-E
                extracted=None,
                note="no letter: the official script guesses one at random (expected value 1/5)",
            )
        return OfficialVerdict(values={"accuracy": float(letter == item.answer)}, extracted=letter)
