"""Open-ended answers (video QA, captions): lexical overlap with the reference.

accuracy = 1.0 when prediction and reference are equal after lowercasing, turning
punctuation into spaces and collapsing whitespace (the exact-match shortcut: short answers
like "Red." vs "red" need no overlap statistics); otherwise
accuracy = (ROUGE-1 F1 + ROUGE-2 F1 + ROUGE-L F1) / 3, with Porter stemming
(``rouge_score``). Text the English tokenizer cannot read (e.g. Chinese, where it yields no
tokens) is tokenized per character/word instead, so it still scores.
Option ``judge`` (dict, e.g. ``{"url": ..., "model": ...}``) sends the item to the LLM judge
(:func:`easyvideor1.rewards.judge.judge_open_ended`) instead of ROUGE.
valid = a non-empty answer. An empty reference raises :class:`GroundTruthError`.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from easyvideor1.rewards.extract import (
    GroundTruthError,
    extract_for,
    extraction_details,
    format_score,
    strip_answer_tags,
)
from easyvideor1.rewards.parsing import normalize_text
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
MAX_CHARS = 20_000  # ROUGE-L is quadratic; longer texts are truncated before scoring

_SCRIPT_TOKEN_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|[^\W_]+")
_LATIN_RE = re.compile(r"[A-Za-z0-9]")
_scorers: dict[str, Any] = {}
_scorers_lock = threading.Lock()


class _ScriptTokenizer:
    """Lowercased word tokens, with CJK characters as tokens of their own."""

    def tokenize(self, text: str) -> list[str]:
        return _SCRIPT_TOKEN_RE.findall(text.lower())


def _rouge(kind: str):
    scorer = _scorers.get(kind)
    if scorer is None:
        with _scorers_lock:
            scorer = _scorers.get(kind)
            if scorer is None:
                from rouge_score import rouge_scorer  # heavy import, only when first needed

                tokenizer = _ScriptTokenizer() if kind == "script" else None
                scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=kind == "english",
                                                  tokenizer=tokenizer)
                _scorers[kind] = scorer
    return scorer


def rouge_mean(prediction: str, reference: str) -> dict[str, float]:
    """ROUGE-1/2/L F1 and their mean (``rouge``) of ``prediction`` against ``reference``."""
    prediction, reference = prediction[:MAX_CHARS], reference[:MAX_CHARS]
    # The default tokenizer keeps only [a-z0-9]; a reference without any would score 0.
    scorer = _rouge("english" if _LATIN_RE.search(reference) else "script")
    scores = scorer.score(reference, prediction)
    values = {kind: float(scores[kind].fmeasure) for kind in ROUGE_TYPES}
    values["rouge"] = sum(values[kind] for kind in ROUGE_TYPES) / len(ROUGE_TYPES)
    return values


def _judge(req: ScoreRequest, prediction: str, reference: str, options: dict[str, Any]) -> Score:
    from easyvideor1.rewards.judge import judge_open_ended  # optional remote path, import on use

    return judge_open_ended(question=req.problem or "", reference=reference, prediction=prediction,
                            judge=options["judge"], timeout_s=float(options.get("timeout_s", 30.0)))


@register_scorer(
    "open-ended",
    aliases=("open ended", "video qa", "videoqa", "free-form", "freeform", "qa", "caption",
             "captioning", "description"),
    description="exact match, else mean ROUGE-1/2/L F1 (or an LLM judge)",
)
def score_open_ended(req: ScoreRequest, options: dict[str, Any]) -> Score:
    reference = strip_answer_tags(req.ground_truth)
    if not normalize_text(reference):
        raise GroundTruthError("open-ended", req.ground_truth, "empty reference answer")
    extraction = extract_for(req.response, options)
    details = extraction_details(extraction)
    prediction = (extraction.text or "").strip()
    if not prediction:
        details["reason"] = details.get("reason") or "empty answer"
        return Score(0.0, format_score(extraction, False), details)
    fmt = format_score(extraction, True)
    if options.get("judge"):
        judged = _judge(req, prediction, reference, options)
        return Score(judged.accuracy, fmt, {**details, **judged.details, "method": "judge"})
    if normalize_text(prediction) == normalize_text(reference):
        details.update(method="exact_match", rouge=1.0)
        return Score(1.0, fmt, details)
    values = rouge_mean(prediction, reference)
    details.update(method="rouge", **values)
    return Score(values["rouge"], fmt, details)
