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
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    answer_letter,
    field,
    find_file,
    options_from_dict,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.benchmarks.common import prediction_of, reward
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


def strip_option_block(question: str, options: tuple[str, ...]) -> str:
    """The question without the ``A. ...\\nB. ...`` block the release appends to it."""
    first = options[0].split(".", 1)[1].strip()
    at = question.find(f"A. {first}")
    return question[:at].rstrip() if at > 0 else question.strip()


@register
class VCRBench(Benchmark):
    name = "vcrbench"
    protocol_version = 2  # release format / clip windows (2026-11)
    title = "VCR-Bench"
    category_fields = ("dimension", "duration")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    needs_judge = True
    annotation = "meta_info_video.json (v1/videos/); videos <annotation folder>/<video_path>"

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
            )
            if field(row, "multiple-choice", path, where, bool):
                choices = field(row, "choices", path, where, dict)
                options = options_from_dict({k: v for k, v in choices.items() if str(v).strip()}, path, where,
                                            "choices")
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
                raise AnnotationError(str(path), where, "answer", f"expected text, got {type(answer).__name__}")
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


def _resolve(bases: tuple[Path, ...], video: str) -> str:
    """The video under the first folder that has it (else under the annotation's folder)."""
    relative = video.strip().lstrip("/")
    for base in bases:
        if (base / relative).is_file():
            return str(base / relative)
    return str(bases[0] / relative)
