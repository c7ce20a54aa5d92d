"""VCR-Bench: video chain-of-thought reasoning across seven dimensions (answer accuracy).

Format and scoring follow the official repository zhishuifeiqian/VCR-Bench
(``eval_code/input.json`` for the rows, ``eval_code/eval.py`` for answer matching,
``eval_code/cau_acc.py`` for the aggregation); the data is VLM-Reasoning/VCR-Bench on the
Hugging Face Hub. Reads ``meta_info_video.json`` (the release keeps it in ``v1/videos/``;
``meta_info_<n>_frames.json`` carries the same rows): a JSON list of ``{"id",
"video_path" (relative to the annotation's folder, e.g. ``video/<source>/<name>.mp4``),
"duration" (seconds), "dimension", "question", "multiple-choice" (bool), "choices"
({"A": ..., "D": ...}; empty strings for open questions), "answer", "reasoning"}``.
Multiple-choice questions embed their options in ``question``; the block is cut off and the
options are shown once, from ``choices``.

Scoring as ``eval.py``: an open answer that is a time interval ``[start, end]`` is right
when the predicted interval has tIoU > 0.7, a box ``[x1, y1, x2, y2]`` (source-frame
pixels) when IoU > 0.5; other open answers go to the LLM judge (rule-based fallback without
one); multiple choice is rule-scored. Accuracy overall, per dimension and per duration
bucket (0-60 s, 60-300 s, 300+ s). The CoT score (recall/precision of the annotated
``reasoning`` steps, judged by GPT-4o) is not computed.

That is the strict metric. Official (``eval.py`` ``extract_answer`` + ``match_answer``,
``cau_acc.py``): every response, multiple choice included, first goes to the judge with the
extraction prompt (``vcrbench_prompts``) and the release's question as shipped (options
embedded); then, when both the release's ``answer`` and the extracted answer are a
``[start, end]`` list of numbers, right when tIoU > 0.7; when both are ``[x1, y1, x2, y2]``
integers, right when IoU > 0.5 (an error there, e.g. a zero-area union, is wrong); else the
judge gets the scoring prompt with question, extracted and reference answers, and the item is
right when its reply is ``1`` (``cau_acc.py`` compares the string with ``'1'``; the API call is
left to the user in ``eval.py``, so surrounding whitespace is stripped here). Accuracy pooled
over all items. An item without a response is wrong without a judge call.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    OfficialVerdict,
    answer_letter,
    field,
    find_file,
    options_from_dict,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.benchmarks.common import prediction_of, reward
from easyvideor1.eval.benchmarks.official_judge import ask, judged
from easyvideor1.eval.benchmarks.vcrbench_prompts import (
    EXTRACTION_QUERY,
    EXTRACTION_RULES,
    SCORING_QUERY,
    SCORING_RULES,
)
from easyvideor1.eval.types import ACCURACY, AnnotationError, EvalItem, ItemScore

ANNOTATIONS = (
    "meta_info_video.json",
    "v1/videos/meta_info_video.json",
    "meta_info_*.json",
    "v1/videos/meta_info_*.json",
)
# Open answers scored by overlap instead of the judge (eval.py's match_answer).
THRESHOLDS = {"temporal grounding": 0.7, "spatial grounding": 0.5}


def duration_bucket(seconds: float) -> str:
    if seconds <= 60:
        return "0-60"
    return "60-300" if seconds <= 300 else "300+"


def open_answer_kind(answer: str) -> tuple[str, Any]:
    """``("temporal grounding", [s, e])``, ``("spatial grounding", box)`` or ``("open-ended", text)``."""
    text = answer.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = None
        if isinstance(value, list) and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value
        ):
            if len(value) == 2:
                return "temporal grounding", [float(v) for v in value]
            if len(value) == 4 and all(isinstance(v, int) for v in value):
                return "spatial grounding", list(value)
    return "open-ended", text


def official_interval(text: Any) -> list | None:
    """``is_valid_time_interval``: a literal list of two numbers (None otherwise)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
        return value
    return None


def official_box(text: Any) -> list[int] | None:
    """``is_valid_space_interval``: ``[a, b, c, d]`` whose comma-separated parts are integers."""
    if not isinstance(text, str) or not (text.startswith("[") and text.endswith("]")):
        return None
    parts = text[1:-1].split(",")
    if len(parts) != 4:
        return None
    try:
        return [int(part.strip()) for part in parts]
    except ValueError:
        return None


def official_time_iou(a: list, b: list) -> float:
    """``calculate_time_iou`` (0 for a zero-length union; no ordering of the ends)."""
    inter = max(0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return 0.0 if union == 0 else inter / union


def official_box_iou(a: list[int], b: list[int]) -> float:
    """``calculate_space_iou``; a zero union raises ZeroDivisionError, as in ``eval.py``."""
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    if x2 < x1 or y2 < y1:
        return 0.0
    inter = (x2 - x1) * (y2 - y1)
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def strip_option_block(question: str, options: tuple[str, ...]) -> str:
    """The question without the ``A. ...\\nB. ...`` block the release appends to it."""
    first = options[0].split(".", 1)[1].strip()
    at = question.find(f"A. {first}")
    return question[:at].rstrip() if at > 0 else question.strip()


@register
class VCRBench(Benchmark):
    name = "vcrbench"
    protocol_version = 3  # official scoring (2026-12)
    title = "VCR-Bench"
    category_fields = ("dimension", "duration")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    needs_judge = True
    annotation = "meta_info_video.json (v1/videos/); videos <annotation folder>/<video_path>"
    official_source = "zhishuifeiqian/VCR-Bench eval_code/eval.py, eval_code/cau_acc.py"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ANNOTATIONS, "VCR-Bench annotation (meta_info_video.json)")
        bases = (path.parent, root, root / "v1" / "videos")
        items = []
        for where, row in read_records(path):
            answer = require_answer(row, ("answer",), path, where)
            question = field(row, "question", path, where)
            video = field(row, "video_path", path, where)
            duration = field(row, "duration", path, where, float, default=None)
            common = dict(
                benchmark=self.name,
                id=str(field(row, "id", path, where, (str, int))),
                videos=(_resolve(bases, video),),
                categories={
                    "dimension": row.get("dimension"),
                    "duration": duration_bucket(duration) if duration is not None else None,
                },
                source=f"{path}:{where}",
                # The official judge sees the question and answer as shipped.
                meta={"raw_question": question, "raw_answer": answer},
            )
            if field(row, "multiple-choice", path, where, bool):
                choices = field(row, "choices", path, where, dict)
                options = options_from_dict(
                    {k: v for k, v in choices.items() if str(v).strip()}, path, where, "choices"
                )
                items.append(
                    EvalItem(
                        **common,
                        question=strip_option_block(question, options),
                        options=options,
                        problem_type="multiple choice",
                        answer=answer_letter(answer, options, path, where),
                    )
                )
                continue
            if not isinstance(answer, str | int | float) or isinstance(answer, bool):
                raise AnnotationError(
                    str(path), where, "answer", f"expected text, got {type(answer).__name__}"
                )
            kind, value = open_answer_kind(str(answer))
            items.append(EvalItem(**common, question=question.strip(), problem_type=kind, answer=value))
        return items

    def metrics_for(self, item: EvalItem, ctx: Any) -> dict[str, str]:
        return {"accuracy": ACCURACY}

    def score(self, item: EvalItem, response: str, ctx: Any, metas=()) -> ItemScore:
        threshold = THRESHOLDS.get(item.problem_type)
        if threshold is None:
            return super().score(item, response, ctx, metas)
        result = reward(item, response, ctx)
        overlap = result.accuracy
        details = {**result.details, "iou": overlap, "threshold": threshold}
        return ItemScore({"accuracy": float(overlap > threshold)}, prediction_of(result.details), details)

    @judged
    def official_item(self, item: EvalItem, response: str, ctx: Any, metas: Any = ()) -> OfficialVerdict:
        if not response:
            return OfficialVerdict(values={"accuracy": 0.0}, note="no response: not sent to the judge, wrong")
        question, answer = item.meta["raw_question"], item.meta["raw_answer"]
        # eval.py's get_output_wo_image defaults to max_tokens=2048.
        extracted = ask(
            ctx,
            EXTRACTION_RULES + EXTRACTION_QUERY.format(question=question, response=response),
            max_tokens=2048,
        )
        truth_interval, got_interval = official_interval(answer), official_interval(extracted)
        truth_box, got_box = official_box(answer), official_box(extracted)
        if truth_interval is not None and got_interval is not None:
            iou = official_time_iou(truth_interval, got_interval)
            return OfficialVerdict(values={"accuracy": float(iou > 0.7)}, extracted=extracted)
        if truth_box is not None and got_box is not None:
            try:
                iou = official_box_iou(truth_box, got_box)
            except ZeroDivisionError:
                return OfficialVerdict(
                    values={"accuracy": 0.0}, extracted=extracted, note="zero-area boxes: wrong"
                )
            return OfficialVerdict(values={"accuracy": float(iou > 0.5)}, extracted=extracted)
        prompt = SCORING_RULES + SCORING_QUERY.format(
            question=question, extract_answer=extracted, gt_answer=answer
        )
        reply = ask(ctx, prompt, max_tokens=2048)
        return OfficialVerdict(values={"accuracy": float(reply.strip() == "1")}, extracted=extracted)


def _resolve(bases: tuple[Path, ...], video: str) -> str:
    """The video under the first folder that has it (else under the annotation's folder)."""
    relative = video.strip().lstrip("/")
    for base in bases:
        if (base / relative).is_file():
            return str(base / relative)
    return str(bases[0] / relative)
