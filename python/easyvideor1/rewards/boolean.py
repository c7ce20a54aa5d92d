"""Yes/no questions.

accuracy = 1 if the prediction's polarity equals the ground truth's, else 0.
The polarity is the first word of the answer (after ``**``/``$``/``\\boxed{}`` wrappers and
an optional lead-in "the answer is" / "answer:"): ``yes``/``true`` -> yes, ``no``/``false``
-> no, any case, any trailing punctuation ("Yes.", "no, it is not").
valid = such a word was found. The ground truth must read the same way, else
:class:`GroundTruthError`.
"""

from __future__ import annotations

import re
from typing import Any

from easyvideor1.rewards.extract import (
    GroundTruthError,
    extract_for,
    extraction_details,
    format_score,
    strip_answer_tags,
)
from easyvideor1.rewards.parsing import strip_markup
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

_POLARITY = {"yes": "yes", "true": "yes", "no": "no", "false": "no"}
# Each optional piece starts with a required token, so no two unbounded runs can trade
# characters (which made an earlier form quadratic on long punctuation runs).
_LEADING_RE = re.compile(
    r"^[\W_]*(?:(?:the\s+)?(?:final\s+)?answer\b[\s:\-]*(?:is\b[\W_]*)?)?(yes|no|true|false)\b",
    re.IGNORECASE,
)
_HEAD_CHARS = 200  # the polarity word must come first; no need to scan a long answer


def read_polarity(text: str | None) -> str | None:
    """``"yes"``, ``"no"`` or None."""
    if not text:
        return None
    match = _LEADING_RE.match(strip_markup(text)[:_HEAD_CHARS])
    return _POLARITY[match.group(1).lower()] if match else None


@register_scorer(
    "boolean",
    aliases=("yes/no", "yes-no", "yesno", "bool", "true/false", "binary"),
    description="yes/no answer equals the ground truth",
)
def score_boolean(req: ScoreRequest, options: dict[str, Any]) -> Score:
    truth = read_polarity(strip_answer_tags(req.ground_truth))
    if truth is None:
        raise GroundTruthError("boolean", req.ground_truth, "expected yes/no/true/false")
    extraction = extract_for(req.response, options)
    pred = read_polarity(extraction.text)
    details = extraction_details(extraction)
    details.update(pred=pred, gt=truth)
    if pred is None:
        details["reason"] = details.get("reason") or "no yes/no/true/false at the start of the answer"
    return Score(1.0 if pred == truth else 0.0, format_score(extraction, pred is not None), details)
