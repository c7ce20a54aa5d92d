"""``preference`` (aliases llava, critic, judge, llm judge, reward model): label match or LLM judge.

Modes (option ``mode``, default ``auto``):

``label``
    The ground truth is a label: a letter A-J, a number up to two digits, yes/no or
    true/false (true = yes, false = no). The label read from the answer must equal it,
    case-insensitively. The answer's label is, in order: the whole answer (``B``, ``(B)``,
    ``b.``), a leading label followed by punctuation or the end (``B. because...``,
    ``Yes, ...``), or the one label named as "response/answer/option/output/choice/
    candidate X" (several different ones -> none). accuracy 1 or 0; valid = a label was read.
``judge``
    The extracted answer, the question and the ground truth (as the reference) go to the
    LLM judge (:mod:`judge`, rubric ``judge_preference.j2``); accuracy = the verdict in
    [0, 1], 0 with the reason when unreadable; valid = a non-empty answer.
``auto``
    ``judge`` when a judge endpoint is configured (``base_url``), else ``label`` when the
    ground truth is a label, else a ConfigError: a reference text with no judge is never
    silently string-matched.

Options: ``mode`` and the judge keys of :class:`judge.JudgeConfig` (top level or under
``judge``).
"""

from __future__ import annotations

import re
from typing import Any

from easyvideor1.errors import ConfigError
from easyvideor1.rewards.extract import (
    GroundTruthError,
    extract_for,
    extraction_details,
    format_score,
    strip_answer_tags,
)
from easyvideor1.rewards.judge import JudgeConfig, judge
from easyvideor1.rewards.parsing import strip_markup
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

MODES = ("auto", "label", "judge")
_LABEL = r"[A-J]|\d{1,2}"  # inside a sentence only capitals count ("a cat" is no label)
_WHOLE_RE = re.compile(r"^\(?\s*([A-Ja-j]|\d{1,2}|yes|no|true|false)\s*\)?[.:!]?$", re.IGNORECASE)
_LEADING_RE = re.compile(rf"^\(?({_LABEL})\)?(?:[.):,]|\s*$)|^(?i:(yes|no|true|false))\b")
_NAMED_RE = re.compile(rf"\b(?i:response|answer|option|output|choice|candidate|assistant)\s*+"
                       rf"(?:(?:(?i:is)|:|#)\s*+)?\(?({_LABEL})\)?(?!\w)")
MAX_ANSWER_CHARS = 10_000  # a label answer is short; longer text is not searched
_SYNONYMS = {"true": "yes", "false": "no"}


def normalize_label(text: str) -> str | None:
    """``text`` as a canonical label (``B``, ``2``, ``yes``, ``no``) when it is one, else None."""
    match = _WHOLE_RE.match(strip_markup(str(text)).strip())
    return _canonical(match.group(1)) if match else None


def _canonical(label: str) -> str:
    label = label.strip().lower()
    if label.isdigit():
        return str(int(label))
    if len(label) == 1:
        return label.upper()
    return _SYNONYMS.get(label, label)


def read_label(answer: str | None) -> tuple[str | None, str]:
    """(label, rule) read from an answer, or (None, why) (rules in the module docstring)."""
    if not answer or not answer.strip():
        return None, "empty answer"
    if len(answer) > MAX_ANSWER_CHARS:
        return None, f"answer longer than {MAX_ANSWER_CHARS} characters"
    text = strip_markup(answer)
    whole = normalize_label(text)
    if whole is not None:
        return whole, "whole"
    leading = _LEADING_RE.match(text)
    if leading:
        return _canonical(leading.group(1) or leading.group(2)), "leading"
    named = {_canonical(m.group(1)) for m in _NAMED_RE.finditer(text)}
    if len(named) == 1:
        return named.pop(), "named"
    if named:
        return None, f"ambiguous: the answer names {', '.join(sorted(named))}"
    return None, "no label in the answer"


def _label_score(req: ScoreRequest, truth: str, options: dict[str, Any]) -> Score:
    extraction = extract_for(req.response, options)
    label, rule = read_label(extraction.text)
    details = extraction_details(extraction)
    details.update(mode="label", pred=label, gt=truth, rule=rule if label else None)
    if label is None:
        details["reason"] = rule
    return Score(1.0 if label == truth else 0.0, format_score(extraction, label is not None), details)


@register_scorer("preference", aliases=("llava", "critic", "judge", "llm judge", "reward model", "llm-as-judge"),
                 heavy=True, description="label match, or an LLM judge against the reference")
def score_preference(req: ScoreRequest, options: dict[str, Any]) -> Score:
    truth_text = strip_answer_tags(req.ground_truth)
    if not truth_text:
        raise GroundTruthError("preference", req.ground_truth, "empty ground truth")
    mode = str(options.get("mode", "auto")).lower()
    if mode not in MODES:
        raise ConfigError(f"preference mode must be one of {MODES}, got {mode!r}")
    config = JudgeConfig.from_options(options)
    truth_label = normalize_label(truth_text)
    if mode == "label" or (mode == "auto" and config is None):
        if truth_label is not None:
            return _label_score(req, truth_label, options)
        if mode == "label":
            raise GroundTruthError("preference", req.ground_truth, "mode 'label' needs a label "
                                   "(A-J, a number, yes/no, true/false)")
        raise ConfigError("preference: the ground truth is not a label (A-J, a number, yes/no) and no judge "
                          "endpoint is configured; set rewards.scorer_options.preference.base_url "
                          "(an OpenAI-compatible /v1 URL) to judge free-text references")
    if config is None:
        raise ConfigError("preference mode 'judge' needs a judge endpoint: set base_url")
    extraction = extract_for(req.response, options)
    details = extraction_details(extraction)
    details["mode"] = "judge"
    answer = (extraction.text or "").strip()
    if not answer:
        details["reason"] = details.get("reason") or "empty answer"
        return Score(0.0, format_score(extraction, False), details)
    verdict, judged = judge(config, "judge_preference.j2", question=req.problem or "", response=answer,
                            reference=truth_text)
    details.update(judged)
    return Score(verdict.score or 0.0, format_score(extraction, True), details)
