"""Answer extraction shared by every scorer, and the format-score rule.

Extraction order (the first that yields something wins):

1. ``<answer>...</answer>`` tags. Only the tag *syntax* is normalised: any case and
   whitespace inside the brackets (``< Answer >``, ``</ answer>``). The content is kept
   verbatim apart from stripping surrounding whitespace. With several tags the
   ``policy`` decides: ``last`` (default), ``first``, or ``only`` (several tags -> no
   answer, ``text=None``). An opening tag runs until the next closing tag; an opening tag
   with no closing tag runs until the next opening tag or the end of the response, so a
   response cut off inside ``<answer>`` still counts as a tag whose content is the rest.
   Steps 2-4 look only at the text after the last ``</think>`` (when there is one), so
   reasoning inside ``<think>`` never becomes the answer.
2. ``\\boxed{...}`` (the last one; nested braces are balanced).
3. A phrase "the final answer is X" / "final answer: X" / "the answer is X" (last one;
   X runs to the end of its line, minus one sentence-ending full stop).
4. The text after the last ``</think>`` (``after_think``), or the whole response
   (``raw``) when there is no ``</think>``; ``none`` when that is empty.

Format score (all types): 1 when an answer tag was found AND its content is a valid answer
for the type; 0.5 when a tag was found but the content is invalid (including policy
``only`` with several tags); 0 when there is no tag. Fallback-extracted answers may still
earn accuracy but never format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from easyvideor1.errors import ConfigError, EasyVideoR1Error

POLICIES = ("last", "first", "only")

_OPEN = r"<\s*answer\s*>"
_CLOSE = r"<\s*/\s*answer\s*>"
# Content stops at a closing tag, at the next opening tag (the first one was never
# closed), or at the end of the text.
_TAG_RE = re.compile(rf"{_OPEN}(.*?)(?:{_CLOSE}|(?={_OPEN})|\Z)", re.IGNORECASE | re.DOTALL)
_STRAY_CLOSE_RE = re.compile(_CLOSE, re.IGNORECASE)
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_PHRASE_RE = re.compile(r"\banswer\s*(?:is\b\s*:?|:)[ \t]*([^\n]*)", re.IGNORECASE)
_THINK_CLOSE_RE = re.compile(r"<\s*/\s*think\s*>", re.IGNORECASE)


@dataclass(frozen=True)
class Extraction:
    """The answer found in a response and where it came from.

    ``source`` is one of ``answer_tag``, ``boxed``, ``final_answer_phrase``,
    ``after_think``, ``raw``, ``none``. ``text`` is ``None`` when nothing usable was found
    (no text at all, or policy ``only`` with several tags); ``reason`` then says why.
    """

    text: str | None
    source: str
    tag_found: bool
    tag_count: int
    reason: str | None = None


def extract_answer(response: str | None, policy: str = "last") -> Extraction:
    """Find the answer in ``response`` (see the module docstring for the order)."""
    if policy not in POLICIES:
        raise ConfigError(f"answer_tag_policy must be one of {POLICIES}, got {policy!r}")
    if not response:
        return Extraction(None, "none", False, 0, "empty response")
    tags = _TAG_RE.findall(response) if "<" in response else []
    if tags:
        if policy == "only" and len(tags) > 1:
            return Extraction(None, "answer_tag", True, len(tags),
                              f"{len(tags)} answer tags but policy 'only' allows one")
        chosen = tags[0] if policy == "first" else tags[-1]
        return Extraction(chosen.strip(), "answer_tag", True, len(tags))
    # Reasoning inside <think> is not an answer: fallbacks look only after the last </think>.
    closes = list(_THINK_CLOSE_RE.finditer(response)) if "<" in response else []
    tail = response[closes[-1].end():] if closes else response
    boxed = last_boxed(tail)
    if boxed is not None and boxed.strip():
        return Extraction(boxed.strip(), "boxed", False, 0)
    phrase = _last_phrase(tail)
    if phrase:
        return Extraction(phrase, "final_answer_phrase", False, 0)
    rest = tail.strip()
    if rest:
        return Extraction(rest, "after_think" if closes else "raw", False, 0)
    return Extraction(None, "none", False, 0, "nothing after </think>" if closes else "empty response")


class GroundTruthError(EasyVideoR1Error, ValueError):
    """A ground truth does not match its problem type's format (docs/data-format.md)."""

    def __init__(self, problem_type: str, ground_truth: str, why: str):
        shown = ground_truth if len(ground_truth) <= 80 else ground_truth[:77] + "..."
        super().__init__(f"malformed {problem_type} ground truth {shown!r}: {why}")


def extract_for(response: str | None, options: dict[str, Any]) -> Extraction:
    """:func:`extract_answer` with the policy a scorer receives in ``options``."""
    return extract_answer(response, options.get("answer_tag_policy", "last"))


def extraction_details(extraction: Extraction) -> dict[str, Any]:
    """The details every scorer reports about extraction (merged with its own values)."""
    details: dict[str, Any] = {"extracted": extraction.text, "source": extraction.source,
                               "tag_count": extraction.tag_count}
    if extraction.reason:
        details["reason"] = extraction.reason
    return details


def format_score(extraction: Extraction, valid: bool) -> float:
    """1 = tag and valid content; 0.5 = tag but invalid content; 0 = no tag."""
    if not extraction.tag_found:
        return 0.0
    return 1.0 if valid and extraction.text is not None else 0.5


def strip_answer_tags(ground_truth: str) -> str:
    """Remove an ``<answer>`` wrapper from a ground truth (content of the last tag)."""
    text = str(ground_truth)
    if "<" in text:
        tags = _TAG_RE.findall(text)
        if tags:
            return tags[-1].strip()
        text = _STRAY_CLOSE_RE.sub("", text)
    return text.strip()


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}``, braces balanced; None if absent.

    An unbalanced last box (truncated output) yields the rest of the text.
    """
    starts = [m.end() for m in _BOXED_RE.finditer(text)] if "\\" in text else []
    if not starts:
        return None
    begin = starts[-1]
    depth = 1
    for index in range(begin, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[begin:index]
    return text[begin:]


def _last_phrase(text: str) -> str | None:
    found = None
    for match in _PHRASE_RE.finditer(text):
        candidate = match.group(1).strip()
        if candidate:
            found = candidate
    # The phrase ends a sentence; its full stop is punctuation, not part of the answer.
    if found and found.endswith(".") and not found.endswith(".."):
        found = found[:-1].rstrip() or None
    return found
