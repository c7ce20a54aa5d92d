"""Math answers: symbolic equivalence with ``math_verify``.

accuracy = 1 if ``math_verify.verify(parse(gt), parse(prediction))`` else 0.
Both sides are parsed as given, then, if that yields nothing, wrapped in ``$...$`` so bare
LaTeX such as ``x^2+2x+1`` parses too (not when the text holds a word of 3+ letters that is
not a LaTeX command: prose would parse as a product of symbols). A ground truth that still
parses to nothing raises :class:`GroundTruthError`. valid = the prediction parses.

math_verify's own timeouts use ``signal.alarm``, which only works on the main thread, so
they are disabled (``parsing_timeout=None``, ``timeout_seconds=None``) and the limit is
enforced here instead: parse + verify run in a daemon worker thread, and when it does not
finish within option ``timeout_s`` (default 10 s) the item scores 0 with reason "timeout".
Python cannot kill a thread, so a runaway computation keeps its thread; at most
``MAX_STUCK_WORKERS`` such threads may exist, beyond which items score 0 at once with reason
"math workers saturated" instead of piling up more threads.
Parsed ground truths are cached (``GT_CACHE_SIZE`` entries), since a group of n rollouts
shares one.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from easyvideor1.rewards.extract import (
    GroundTruthError,
    extract_for,
    extraction_details,
    format_score,
    strip_answer_tags,
)
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

DEFAULT_TIMEOUT_S = 10.0
MAX_STUCK_WORKERS = 8
GT_CACHE_SIZE = 4096
MAX_ANSWER_CHARS = 10_000  # math_verify's LaTeX parser is slow on long inputs

# A word of 3+ letters that is not a LaTeX command: inside $...$ it would turn into a
# product of single-letter symbols ("idea" -> i*d*e*a), so such text is not wrapped.
_PROSE_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_stuck: list[threading.Thread] = []
_lock = threading.Lock()
_gt_cache: OrderedDict[str, list[Any]] = OrderedDict()


class MathTimeout(Exception):
    """The worker did not finish in time (or no worker could be started)."""


def call_with_timeout(fn: Callable[[], Any], timeout_s: float) -> Any:
    """Run ``fn`` in a daemon thread; raise :class:`MathTimeout` if it takes over ``timeout_s``."""
    with _lock:
        _stuck[:] = [t for t in _stuck if t.is_alive()]
        if len(_stuck) >= MAX_STUCK_WORKERS:
            raise MathTimeout("math workers saturated")
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # reported to the caller, never lost in the thread
            outcome["error"] = exc
        finally:
            finished.set()

    worker = threading.Thread(target=work, name="math-verify", daemon=True)
    worker.start()
    if not finished.wait(timeout_s):
        with _lock:
            _stuck.append(worker)
        raise MathTimeout("timeout")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _math_verify():
    # sympy-heavy import, deferred to the first math item and done on the caller's thread so
    # that a slow first import is never mistaken for a timeout.
    import math_verify

    return math_verify


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


def _gold(ground_truth: str, timeout_s: float) -> list[Any]:
    text = strip_answer_tags(ground_truth)
    with _lock:
        cached = _gt_cache.get(text)
        if cached is not None:
            _gt_cache.move_to_end(text)
            return cached
    try:
        parsed = call_with_timeout(lambda: _parse_bare(text), timeout_s) if text else []
    except MathTimeout as exc:
        raise GroundTruthError("math", ground_truth, f"parsing it hit the {exc}") from None
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
)
def score_math(req: ScoreRequest, options: dict[str, Any]) -> Score:
    timeout_s = float(options.get("timeout_s", DEFAULT_TIMEOUT_S))
    _math_verify()
    gold = _gold(req.ground_truth, timeout_s)
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
        pred, equal = call_with_timeout(lambda: _verify(gold, text), timeout_s)
    except MathTimeout as exc:
        details["reason"] = str(exc)
        return Score(0.0, format_score(extraction, False), details)
    details["pred"] = _shown(pred)
    if not pred:
        details["reason"] = "math_verify could not parse the answer"
    return Score(1.0 if equal else 0.0, format_score(extraction, bool(pred)), details)


def _shown(parsed: list[Any]) -> str | None:
    """The string form math_verify keeps next to the parsed expression, for details."""
    if not parsed:
        return None
    return str(parsed[-1]) if isinstance(parsed[-1], str) else str(parsed[0])
