"""VideoMathQA: mathematical reasoning in videos; MCQ accuracy and multi-binary (MBin) accuracy.

Format and scoring follow lmms-eval's ``tasks/videomathqa/utils.py`` and its yaml files (the
official evaluation; the data is MBZUAI/VideoMathQA on the Hugging Face Hub). The release
has two parquet files, read here as JSON/JSONL exports: ``videomathqa_mcq_test`` (420
five-option questions) and ``videomathqa_mbin_test`` (the multi-binary split: per question
one two-option row for each distractor, sharing the question's ``question_id``). Rows:
``question_id``, ``videoID``, ``question``, ``options`` (a list, labelled ``"A. ..."`` /
``"(A) ..."`` / ``"A) ..."`` or bare), ``answer`` (the letter), ``category`` (one of ten
domains) and ``length`` (short/medium/long); ``steps`` (the annotated solution) is not used.
Either file may be absent. Videos: ``videos/<videoID>.mp4`` (``.MP4``/``.mkv`` too).

Scores: ``accuracy`` over the MCQ rows and ``binary_accuracy`` over the MBin rows (both
micro averages, per category and per length too); ``mbin_accuracy`` counts a question only
if all of its binary rows are right (the official MBin score).

Official scorer: EvolvingLMMs-Lab/lmms-eval ``lmms_eval/tasks/videomathqa/utils.py``
(``extract_characters_regex``, ``videomathqa_mcq_aggregate_results``,
``videomathqa_multi_binary_aggregate_results``), reproduced by ``official_item`` /
``official_summary``: the response is stripped, the answer phrases "The best answer is",
"The correct answer is", "The answer is", "The answer" and (two strings the script joins by a
missing comma) "The best option isThe correct option is" and "Best answer:Best option:" are
deleted, a response of more than ten words without a capital A-E reads as no answer, else
the answer is the first capital A-E anywhere (so "Area is 16, C" reads "A", and a lowercase
"c" reads nothing); it is right when it equals the row's ``answer``. The MCQ score is the
micro accuracy over the MCQ rows; the MBin score the share of ``question_id`` groups whose
binary rows are all right (the two official tasks, reported together: MCQ accuracy is the
headline, ``mbin_accuracy`` rides along).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    OfficialVerdict,
    answer_letter,
    field,
    find_video,
    letter_options,
    options_from_dict,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.benchmarks.extraction import VIDEOMME_PREFIXES, first_letter_after_prefixes
from easyvideor1.eval.types import ACCURACY, AnnotationError, EvalItem

SPLITS = {
    "mcq": ("videomathqa_mcq_test.jsonl", "videomathqa_mcq_test.json", "mcq/test*.jsonl", "mcq/test*.json"),
    "mbin": (
        "videomathqa_mbin_test.jsonl",
        "videomathqa_mbin_test.json",
        "multi_binary/test*.jsonl",
        "multi_binary/test*.json",
    ),
}
_LABEL = re.compile(r"^\s*[\(\[]?([A-Ja-j])\s*[\)\].:：]\s*")
# The official prefixes: Video-MME's first six, the two joined strings included (a missing
# comma in the script).
_OFFICIAL_PREFIXES = VIDEOMME_PREFIXES[:6]


def official_letter(response: str) -> str:
    """lmms-eval's ``extract_characters_regex`` for VideoMathQA ("" when it reads nothing)."""
    # The script's "more than ten words and no capital A-E" test returns "" exactly when the
    # letter search finds nothing, so the search alone decides.
    return first_letter_after_prefixes(response, _OFFICIAL_PREFIXES, "ABCDE")


def bare_options(raw: Any, path: Path, where: str) -> tuple[str, ...]:
    """``("A. x", ...)`` from options labelled in any common way (or bare / lettered object)."""
    if isinstance(raw, dict):
        return options_from_dict(raw, path, where, "options")
    if isinstance(raw, list) and raw and all(isinstance(o, str) for o in raw):
        labels = [_LABEL.match(o) for o in raw]
        if all(labels) and [m.group(1).upper() for m in labels] == list("ABCDEFGHIJ"[: len(raw)]):
            raw = [o[m.end() :] for o, m in zip(raw, labels)]
    return letter_options(raw, path, where)


def _video(root: Path, video: str) -> str:
    found = find_video(root, ("videos", ""), video)
    upper = Path(found).with_suffix(".MP4")  # the release also ships .MP4 files
    return str(upper) if not Path(found).is_file() and upper.is_file() else found


def _find(root: Path, patterns: tuple[str, ...]) -> Path | None:
    for pattern in patterns:
        matches = sorted(root.glob(pattern))
        if matches:
            return matches[0]
    return None


@register
class VideoMathQA(Benchmark):
    name = "videomathqa"
    protocol_version = 3  # official metric beside the strict one (2026-12)
    title = "VideoMathQA"
    official_source = "EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/videomathqa/utils.py"
    category_fields = ("category", "length", "mode")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = (
        "videomathqa_mcq_test.json(l) and videomathqa_mbin_test.json(l) (parquet exports); "
        "videos videos/<videoID>.mp4"
    )

    def load(self, root: Path) -> list[EvalItem]:
        found = {mode: _find(root, patterns) for mode, patterns in SPLITS.items()}
        if not any(found.values()):
            looked = ", ".join(p for patterns in SPLITS.values() for p in patterns)
            raise AnnotationError(
                str(root), None, None, f"no VideoMathQA annotation found (looked for {looked})"
            )
        items: list[EvalItem] = []
        for mode, path in found.items():
            if path is None:
                self.load_notes.append(f"no {mode} file ({SPLITS[mode][0]}): its score is not computed")
                continue
            per_question: dict[str, int] = defaultdict(int)
            for where, row in read_records(path):
                options = bare_options(field(row, "options", path, where, (list, dict)), path, where)
                if mode == "mbin" and len(options) != 2:
                    raise AnnotationError(
                        str(path), where, "options", f"a multi-binary row needs 2 options, got {len(options)}"
                    )
                qid = str(field(row, "question_id", path, where, (str, int)))
                video = str(field(row, ("videoID", "video_id"), path, where, (str, int)))
                if mode == "mcq":
                    item_id = f"{qid}/mcq"
                else:
                    item_id = f"{qid}/mbin{per_question[qid]}"
                    per_question[qid] += 1
                items.append(
                    EvalItem(
                        benchmark=self.name,
                        id=item_id,
                        question=field(row, "question", path, where),
                        options=options,
                        problem_type="multiple choice",
                        answer=answer_letter(
                            require_answer(row, ("answer",), path, where), options, path, where
                        ),
                        videos=(_video(root, video),),
                        categories={
                            "category": row.get("category"),
                            "length": row.get("length"),
                            "mode": mode,
                        },
                        meta={"question": qid, "answer": str(row["answer"])},
                        source=f"{path}:{where}",
                    )
                )
        return items

    def metrics_for(self, item: EvalItem, ctx: Any) -> dict[str, str]:
        return {"accuracy" if item.id.endswith("/mcq") else "binary_accuracy": ACCURACY}

    def score(self, item, response, ctx, metas=()):
        result = super().score(item, response, ctx, metas)
        if not item.id.endswith("/mcq"):
            result.values = {"binary_accuracy": result.values["accuracy"]}
        return result

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        questions: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in records:
            if record["categories"].get("mode") == "mbin":
                questions[record["meta"]["question"]].append(record)
        if not questions:
            return
        solved = {
            q: all(r["values"].get("binary_accuracy", 0.0) == 1.0 for r in rs) for q, rs in questions.items()
        }
        summary["metrics"]["mbin_accuracy"] = _share(list(solved.values()))
        for name in ("category", "length"):
            by_value: dict[str, list[bool]] = defaultdict(list)
            for qid, rows in questions.items():
                value = rows[0]["categories"].get(name)
                if value is not None and value != "":
                    by_value[str(value)].append(solved[qid])
            for value, flags in by_value.items():
                summary["categories"].setdefault(name, {}).setdefault(value, {})["mbin_accuracy"] = _share(
                    flags
                )

    def official_item(self, item: EvalItem, response: str, ctx: Any, metas=()) -> OfficialVerdict:
        letter = official_letter(response)
        name = "accuracy" if item.id.endswith("/mcq") else "binary_accuracy"
        truth = item.meta.get("answer", item.answer)
        return OfficialVerdict(values={name: float(letter == truth)}, extracted=letter or None)

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        mcq = [r["official"]["values"]["accuracy"] for r in records if r["categories"].get("mode") == "mcq"]
        questions: dict[str, list[float]] = defaultdict(list)
        for record in records:
            if record["categories"].get("mode") == "mbin":
                questions[record["meta"]["question"]].append(record["official"]["values"]["binary_accuracy"])
        mbin = [float(all(v == 1.0 for v in rows)) for rows in questions.values()]
        parts = {"accuracy": mcq, "mbin_accuracy": mbin}
        shown = {name: {"value": sum(v) / len(v), "n": len(v)} for name, v in parts.items() if v}
        if not shown:
            return None
        headline = next(iter(shown))
        return {"metric": headline, "kind": ACCURACY, **shown[headline], "also": shown}


def _share(flags: list[bool]) -> dict[str, Any]:
    return {"kind": ACCURACY, "value": sum(flags) / len(flags), "n": len(flags), "over": "questions"}
