"""ODV-Bench: online driving-video understanding; multiple choice by task and subtask.

Format and scoring follow the benchmark's own evaluation in MCG-NJU/StreamForest
(``lmms_eval/tasks/odvbench/utils.py``); the data is MCG-NJU/ODV-Bench on the Hugging Face
Hub. Reads ``ODVbench.json``: a JSON list of questions ``{"video"
(``<collection>/.../<clip>.mp4``; the collections TS_Retrieval, TOI_Recognition and
TR_Analysis ship as zips, extracted under the data folder by name), "question",
"candidates" (2 or 4 option texts), "answer" (the text of the right candidate), "task"
(static targets, dynamic targets, multi-object events), "subtask" (12), "subsubtask"
(some rows), "start", "end"}``. The release has no question id: an item's id is its
position in the file (row 0, 1, ...).

``[start, end]`` is the part of the clip the model may see (the question is asked at
``end``; many questions ask about what happens next), so frames are sampled within that
window only (``EvalItem.clip``; timestamps stay those of the clip), as the official
``odvbench_doc_to_visual`` passes ``start``/``end`` to its video reader. A row whose end is
not after its start has no usable window: its whole clip is sampled and the report counts
such rows. Scores: accuracy overall and per task, subtask and subsubtask (micro averages,
as the official aggregation).

Official scorer: MCG-NJU/StreamForest ``lmms_eval/tasks/odvbench/utils.py``
(``odvbench_process_results``, ``mcq_acc``, ``odvbench_aggregate_results``), reproduced by
``official_item``: the right letter is that of the first candidate equal to ``answer`` (none:
the row scores 0); the response is read by ``extraction.mcq_acc_process`` (a leading "X. text",
else the first standalone letter A-E in any case after punctuation is cleaned, else the
cleaned text) and must equal the letter. An empty response is left out of the denominator
(the aggregation counts only non-empty predictions); the score is the micro accuracy over
the rest, per task too (each task is one official subtask file; the group has no score of
its own).
"""

from __future__ import annotations

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
    letter_options,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.benchmarks.extraction import mcq_acc_process
from easyvideor1.eval.benchmarks.official_groups import mean_with_group_means
from easyvideor1.eval.types import AnnotationError, EvalItem

ANNOTATIONS = ("ODVbench.json", "ODVBench.json", "odvbench.json")


@register
class ODVBench(Benchmark):
    name = "odvbench"
    protocol_version = 3  # official metric beside the strict one (2026-12)
    title = "ODV-Bench"
    official_source = "MCG-NJU/StreamForest lmms_eval/tasks/odvbench/utils.py"
    category_fields = ("task", "subtask", "subsubtask")
    video_defaults = {"fps": 1.0, "max_frames": 32}
    annotation = "ODVbench.json; videos <collection>/... (the video field), seen up to its end time"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ANNOTATIONS, "ODV-Bench annotation (ODVbench.json)")
        items, unbounded = [], 0
        for where, row in read_records(path):
            candidates = field(row, "candidates", path, where, list)
            options = letter_options(candidates, path, where, "candidates")
            start = field(row, "start", path, where, float, default=0.0)
            end = field(row, "end", path, where, float, default=None)
            if start < 0 or end is not None and end < 0:
                raise AnnotationError(str(path), where, "start/end", f"negative time in [{start}, {end}]")
            clip = (start, end) if end is not None and end > start else None
            unbounded += clip is None
            source = field(row, "video", path, where)
            items.append(
                EvalItem(
                    benchmark=self.name,
                    id=where.split()[-1],
                    question=field(row, "question", path, where),
                    options=options,
                    problem_type="multiple choice",
                    answer=answer_letter(require_answer(row, ("answer",), path, where), options, path, where),
                    videos=(str(root / source.lstrip("/")),),
                    categories={k: row.get(k) for k in self.category_fields},
                    meta={"start": start, "end": end, "official_letter": _official_letter(candidates, row)},
                    source=f"{path}:{where}",
                    clip=clip,
                )
            )
        if unbounded:
            self.load_notes.append(
                f"{unbounded} item(s) have no [start, end] window with end > start; their whole clip was sampled"
            )
        return items

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[Any] = ()
    ) -> OfficialVerdict:
        if response == "":
            return OfficialVerdict(excluded="empty response (the aggregation counts non-empty ones)")
        letter, read = item.meta.get("official_letter"), mcq_acc_process(response)
        right = letter is not None and read == mcq_acc_process(letter)
        return OfficialVerdict(values={"accuracy": float(right)}, extracted=read)

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        return mean_with_group_means(records, "task")


def _official_letter(candidates: list, row: dict) -> str | None:
    """The letter of the first candidate equal to ``answer`` (the official ground truth)."""
    for letter, candidate in zip(LETTERS, candidates):
        if candidate == row.get("answer"):
            return letter
    return None
