"""TempCompass: temporal perception (action, speed, direction, attribute change, order).

Reads ``questions/multi-choice.json``, ``yes_no.json``, ``caption_matching.json`` and
``captioning.json`` (whichever exist): ``{video_id: {dimension: [{"question", "answer"},
...]}}``. Multiple-choice questions list their options inside the question ("A. ...") and
answer with ``"A. text"``; caption matching lists ``Caption A: ...`` lines. Videos:
``videos/<video_id>.mp4``. Captioning is judged (LLM) against the reference; without a
judge ROUGE is reported under its own name.
"""

from __future__ import annotations

import re
from pathlib import Path

from easyvideor1.eval.benchmarks.base import (
    LETTERS,
    Benchmark,
    answer_letter,
    field,
    find_files,
    find_video,
    read_records,
    register,
    split_embedded_options,
)
from easyvideor1.eval.types import AnnotationError, EvalItem

TASKS = {"multi-choice": "multiple choice", "yes_no": "boolean", "caption_matching": "multiple choice",
         "captioning": "open-ended"}
_CAPTION = re.compile(r"^\s*(?:Caption|Sentence|Option)\s+([A-J])\s*[:.)]\s*(.*)$", re.IGNORECASE)


def _caption_options(text: str, path: Path, where: str) -> tuple[str, tuple[str, ...]]:
    question, options = [], []
    for line in text.splitlines():
        match = _CAPTION.match(line)
        if match and match.group(1).upper() == LETTERS[len(options)]:
            options.append(f"{LETTERS[len(options)]}. {match.group(2).strip()}")
        elif not options:
            question.append(line)
    if len(options) < 2:
        raise AnnotationError(str(path), where, "question", "expected 'Caption A: ...' lines")
    return "\n".join(question).strip(), tuple(options)


@register
class TempCompass(Benchmark):
    name = "tempcompass"
    title = "TempCompass"
    category_fields = ("task_type", "dimension")
    video_defaults = {"fps": 2.0, "max_frames": 32}
    needs_judge = True
    annotation = "questions/{multi-choice,yes_no,caption_matching,captioning}.json; videos videos/<id>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        items = []
        files = find_files(root, [f"questions/{t}.json" for t in TASKS], "TempCompass question files")
        for path in files:
            task = path.stem
            for where, entry in read_records(path):
                video_id = entry.pop("__key__", None) if isinstance(entry, dict) else None
                if not isinstance(entry, dict) or video_id is None:
                    raise AnnotationError(
                        str(path), where, None, "expected {video_id: {dimension: [questions]}}"
                    )
                for dimension, questions in entry.items():
                    if not isinstance(questions, list):
                        raise AnnotationError(str(path), where, dimension, "expected a list of questions")
                    for index, row in enumerate(questions):
                        spot = f"{where} {dimension}[{index}]"
                        items.append(self._item(root, path, spot, task, str(video_id), dimension, index, row))
        return items

    def _item(
        self,
        root: Path,
        path: Path,
        where: str,
        task: str,
        video_id: str,
        dimension: str,
        index: int,
        row: dict,
    ) -> EvalItem:
        text = field(row, "question", path, where)
        answer = field(row, "answer", path, where)
        options = None
        meta = {}
        if task == "multi-choice":
            text, options = split_embedded_options(text, path, where)
        elif task == "caption_matching":
            text, options = _caption_options(text, path, where)
            answer = re.sub(r"^\s*(?:Caption|Sentence|Option)\s+", "", answer, flags=re.IGNORECASE)
        elif task == "yes_no":
            answer = answer.strip().lower().rstrip(".")
            if answer not in ("yes", "no"):
                raise AnnotationError(str(path), where, "answer", f"expected yes or no, got {answer!r}")
        else:
            meta = {"open": "generation"}
        if options:
            answer = answer_letter(answer, options, path, where)
        return EvalItem(
            benchmark=self.name,
            id=f"{task}/{video_id}/{dimension}/{index}",
            question=text,
            options=options,
            problem_type=TASKS[task],
            answer=answer,
            videos=(find_video(root, ("videos", ""), video_id),),
            categories={"task_type": task, "dimension": dimension},
            meta=meta,
            source=f"{path}:{where}",
        )
