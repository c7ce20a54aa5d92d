"""OCR (text recognition/reading): 1 - word error rate against the reference text.

accuracy = clip(1 - WER(reference, prediction), 0, 1) with ``jiwer``; option
``metric: cer`` uses the character error rate instead. Before scoring, whitespace runs are
collapsed and, unless option ``case_sensitive`` is true (default false), both texts are
lowercased; punctuation is kept (it is part of what was written).
An empty reference (nothing to read) scores 1 for an empty prediction and 0 otherwise.
valid = an answer was extracted (an empty answer is a legitimate reading of a blank image).
"""

from __future__ import annotations

import re
from typing import Any

from easyvideor1.rewards.extract import extract_for, extraction_details, format_score, strip_answer_tags
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

METRICS = ("wer", "cer")
_SPACE_RE = re.compile(r"\s+")


def _prepare(text: str, case_sensitive: bool) -> str:
    text = _SPACE_RE.sub(" ", text).strip()
    return text if case_sensitive else text.lower()


def error_rate(reference: str, prediction: str, metric: str = "wer") -> float:
    """WER or CER of ``prediction`` against a non-empty ``reference`` (may exceed 1)."""
    import jiwer  # imported on first OCR item only

    if not prediction:
        return 1.0
    return float(jiwer.cer(reference, prediction) if metric == "cer" else jiwer.wer(reference, prediction))


@register_scorer(
    "ocr",
    aliases=("text recognition", "text reading", "scene text"),
    description="1 - WER (or CER) against the reference text",
)
def score_ocr(req: ScoreRequest, options: dict[str, Any]) -> Score:
    metric = str(options.get("metric", "wer")).lower()
    if metric not in METRICS:
        raise ValueError(f"ocr option metric must be one of {METRICS}, got {metric!r}")
    case_sensitive = bool(options.get("case_sensitive", False))
    reference = _prepare(strip_answer_tags(req.ground_truth), case_sensitive)
    extraction = extract_for(req.response, options)
    details = extraction_details(extraction)
    details["metric"] = metric
    if extraction.text is None:
        details[metric] = 1.0
        return Score(0.0, format_score(extraction, False), details)
    prediction = _prepare(extraction.text, case_sensitive)
    if not reference:
        details[metric] = 0.0 if not prediction else 1.0
        return Score(1.0 if not prediction else 0.0, format_score(extraction, True), details)
    rate = error_rate(reference, prediction, metric)
    details[metric] = rate
    return Score(min(1.0, max(0.0, 1.0 - rate)), format_score(extraction, True), details)
