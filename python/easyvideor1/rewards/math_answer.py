"""Math answers: symbolic equivalence with ``math_verify``.

accuracy = 1 if ``math_verify.verify(parse(gt), parse(prediction))`` else 0.
Both sides are parsed as given, then, if that yields nothing, wrapped in ``$...$`` so bare
LaTeX such as ``x^2+2x+1`` parses too (not when the text holds a word of 3+ letters that is
not a LaTeX command: prose would parse as a product of symbols). A ground truth that still
parses to nothing raises :class:`GroundTruthError`. valid = the prediction parses.

math_verify's own timeouts use ``signal.alarm``, which cannot stop sympy inside one C call
(a big-integer power), so they are disabled (``parsing_timeout=None``,
``timeout_seconds=None``) and nothing here bounds the time: the scoring pool does, by
killing the worker process (``rewards/pool.py``: math items get the per-type limit, option
``timeout_s``, 10 s by default, or the reward timeout when that is lower). No thread is
started here, so a runaway computation can never outlive its item. Before the CAS sees
either side, :func:`~easyvideor1.rewards.math_guard.check_expression` refuses expressions
whose evaluation is known to explode (huge powers and power towers, factorial towers,
numbers of more than ``max_digits`` digits, powers of sums expanding to more than
``max_terms`` terms): such an answer scores 0 at once with reason "expression too large to
evaluate: ..." (a ground truth like that is a :class:`GroundTruthError`).
Parsed ground truths are cached (``GT_CACHE_SIZE`` entries), since a group of n rollouts
shares one.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from typing import Any

from easyvideor1.rewards.extract import (
    GroundTruthError,
    extract_for,
    extraction_details,
    format_score,
    strip_answer_tags,
)
from easyvideor1.rewards.math_guard import MAX_DIGITS, MAX_TERMS, ExpressionTooLarge, check_expression
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

DEFAULT_TIMEOUT_S = 10.0  # the pool's limit for a math item (ScorerSpec.timeout_s)
GT_CACHE_SIZE = 4096
MAX_ANSWER_CHARS = 10_000  # math_verify's LaTeX parser is slow on long inputs

# A word of 3+ letters that is not a LaTeX command: inside $...$ it would turn into a
# product of single-letter symbols ("idea" -> i*d*e*a), so such text is not wrapped.
_PROSE_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_lock = threading.Lock()
_gt_cache: OrderedDict[str, list[Any]] = OrderedDict()


def _math_verify():
    # sympy-heavy import, deferred to the first math item (the pool's forkserver does it once
    # for every worker, rewards/warmup.py).
    import math_verify

    # It warns on every parse that its timeout is off, which is deliberate here (docstring).
    logging.getLogger("math_verify.parser").addFilter(_timeout_off_filter)
    return math_verify


def _timeout_off_filter(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Timeout is disabled")


def _parse(text: str) -> list[Any]:
    return _math_verify().parse(text, parsing_timeout=None)


def _parse_bare(text: str) -> list[Any]:
    """Parse; bare LaTeX (``x^2+1``) is retried inside ``$...$`` unless it reads as prose."""
    parsed = _parse(text)
    if not parsed and "$" not in text and not _PROSE_WORD_RE.search(text):
        parsed = _parse(f"${text}$")
    return parsed


def _verify(gold: list[Any], text: str) -> tuple[list[Any], bool]:
    pred = _parse_bare(text)
    return pred, bool(pred) and bool(_math_verify().verify(gold, pred, timeout_seconds=None))


def _limits(options: dict[str, Any]) -> dict[str, int]:
    return {"max_digits": int(options.get("max_digits", MAX_DIGITS)),
            "max_terms": int(options.get("max_terms", MAX_TERMS))}


def _gold(ground_truth: str, limits: dict[str, int]) -> list[Any]:
    text = strip_answer_tags(ground_truth)
    with _lock:
        cached = _gt_cache.get(text)
        if cached is not None:
            _gt_cache.move_to_end(text)
            return cached
    try:
        check_expression(text, **limits)
    except ExpressionTooLarge as exc:
        raise GroundTruthError("math", ground_truth, str(exc)) from None
    parsed = _parse_bare(text) if text else []
    if not parsed:
        raise GroundTruthError("math", ground_truth, "math_verify could not parse it")
    with _lock:
        _gt_cache[text] = parsed
        while len(_gt_cache) > GT_CACHE_SIZE:
            _gt_cache.popitem(last=False)
    return parsed


@register_scorer(
    "math",
    aliases=("math reasoning", "mathematics", "math word problem"),
    description="math_verify equivalence with the ground-truth expression",
    timeout_s=DEFAULT_TIMEOUT_S,
)
def score_math(req: ScoreRequest, options: dict[str, Any]) -> Score:
    limits = _limits(options)
    _math_verify()
    gold = _gold(req.ground_truth, limits)
    extraction = extract_for(req.response, options)
    details = extraction_details(extraction)
    details["gt"] = _shown(gold)
    text = (extraction.text or "").strip()
    if not text:
        details["reason"] = details.get("reason") or "empty answer"
        return Score(0.0, format_score(extraction, False), details)
    if len(text) > MAX_ANSWER_CHARS:
        details["reason"] = f"answer longer than {MAX_ANSWER_CHARS} characters"
        return Score(0.0, format_score(extraction, False), details)
    try:
        check_expression(text, **limits)
    except ExpressionTooLarge as exc:
        details["reason"] = str(exc)
        return Score(0.0, format_score(extraction, False), details)
    pred, equal = _verify(gold, text)
    details["pred"] = _shown(pred)
    if not pred:
        details["reason"] = "math_verify could not parse the answer"
    return Score(1.0 if equal else 0.0, format_score(extraction, bool(pred)), details)


def _shown(parsed: list[Any]) -> str | None:
    """The string form math_verify keeps next to the parsed expression, for details."""
    if not parsed:
        return None
    return str(parsed[-1]) if isinstance(parsed[-1], str) else str(parsed[0])
