"""Finding the code in a response, for the code rewards (``code``, ``svg-code``, ``html-code``).

Order (the first that yields code wins):

1. Inside the ``<answer>`` tag (``answer_tag_policy`` picks the tag): a fenced block
   (````` ```svg ``` ````` etc.; a block tagged with the language or an alias wins over an
   untagged one, the last of each kind), else the tag's whole content when it looks like
   code of that language (SVG: contains ``<svg``; HTML: contains a tag; Python: parses).
2. Outside the tag (the text after the last ``</think>``): the last fenced block, chosen
   as in 1.
3. Raw markup in that text: first ``<svg`` to last ``</svg>`` (SVG), the last ``<html ...>...</html>``
   / a ``<!DOCTYPE html>`` document (HTML). Python without a tag or fence: the whole text.
4. The tag's content as it is (it is the attempt, even if it is not valid code).

Format rule (all types): 1 when the code came from inside an answer tag and is valid for
the type, 0.5 when a tag exists but its content is not valid code, 0 without a tag
(code found outside the tag still earns accuracy, never format).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from easyvideor1.rewards.extract import extract_answer

LANGUAGES = {
    "python": ("python", "py", "python3", "py3"),
    "svg": ("svg", "xml", "svg+xml", "image/svg+xml"),
    "html": ("html", "htm", "xhtml", "html5"),
}
MAX_CODE_CHARS = 1_000_000  # longer code is rejected unread: no renderer or sandbox sees it

_FENCE_RE = re.compile(r"```[ \t]*+([^\s`]*+)[^\n]*+\n(.*?)(?:```|\Z)", re.DOTALL)  # possessive: linear
_THINK_CLOSE_RE = re.compile(r"<\s*/\s*think\s*>", re.IGNORECASE)
_SVG_OPEN_RE = re.compile(r"<svg\b", re.IGNORECASE)
_SVG_CLOSE_RE = re.compile(r"</svg\s*+>", re.IGNORECASE)
_HTML_RE = re.compile(r"(?:<!doctype\s+html\b|<html\b).*?(?:</html\s*>|\Z)", re.IGNORECASE | re.DOTALL)
_TAG_RE = re.compile(r"<[a-zA-Z!/]")


@dataclass(frozen=True)
class CodeExtraction:
    """``code`` is None when nothing usable was found (``reason`` says why)."""

    code: str | None
    source: str  # answer_tag_fence | answer_tag | fence | raw_markup | raw | none
    tag_found: bool
    in_tag: bool
    reason: str | None = None

    def format_score(self, valid: bool) -> float:
        if not self.tag_found:
            return 0.0
        return 1.0 if self.in_tag and valid and self.code is not None else 0.5

    def details(self) -> dict:
        out = {"source": self.source, "code_chars": len(self.code) if self.code is not None else 0}
        if self.reason:
            out["reason"] = self.reason
        return out


def looks_like(text: str, language: str) -> bool:
    if language == "svg":
        return "<svg" in text.lower()
    if language == "html":
        return _TAG_RE.search(text) is not None
    try:  # the parser only (no execution); its nesting limits bound hostile input
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return bool(text.strip())


def pick_fence(text: str, language: str) -> str | None:
    """Content of the last fenced block tagged with ``language`` (or an alias), else of the
    last untagged block; None when neither exists."""
    names = LANGUAGES[language]
    tagged = untagged = None
    for match in _FENCE_RE.finditer(text):
        lang = match.group(1).strip().lower()
        if lang in names:
            tagged = match.group(2)
        elif not lang:
            untagged = match.group(2)
    found = tagged if tagged is not None else untagged
    return found.strip("\n") if found is not None else None


def _raw_svg(text: str) -> str | None:
    """From the first ``<svg`` to the last ``</svg>`` (nested <svg> elements stay whole)."""
    opening = _SVG_OPEN_RE.search(text)
    closings = list(_SVG_CLOSE_RE.finditer(text, opening.end())) if opening else []
    return text[opening.start():closings[-1].end()] if closings else None


def _raw_html(text: str) -> str | None:
    matches = list(_HTML_RE.finditer(text))
    return matches[-1].group(0) if matches else None


def extract_code(response: str | None, language: str, policy: str = "last") -> CodeExtraction:
    """Find the ``language`` code in ``response`` (see the module docstring)."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {sorted(LANGUAGES)}, got {language!r}")
    if not response or not response.strip():
        return CodeExtraction(None, "none", False, False, "empty response")
    if len(response) > MAX_CODE_CHARS:
        return CodeExtraction(None, "none", False, False,
                              f"response longer than {MAX_CODE_CHARS} characters")
    extraction = extract_answer(response, policy)
    tag = extraction.tag_found
    if tag and extraction.text:
        fenced = pick_fence(extraction.text, language)
        if fenced is not None and fenced.strip():
            return CodeExtraction(fenced, "answer_tag_fence", True, True)
        if looks_like(extraction.text, language):
            return CodeExtraction(extraction.text, "answer_tag", True, True)
    closes = list(_THINK_CLOSE_RE.finditer(response))
    tail = response[closes[-1].end():] if closes else response
    fenced = pick_fence(tail, language)
    if fenced is not None and fenced.strip():
        return CodeExtraction(fenced, "fence", tag, False)
    if language in ("svg", "html"):
        markup = _raw_svg(tail) if language == "svg" else _raw_html(tail)
        if markup is not None:
            return CodeExtraction(markup, "raw_markup", tag, False)
    elif not tag and tail.strip():
        return CodeExtraction(tail.strip(), "raw", False, False)
    if tag and extraction.text:  # no code anywhere else: the tag's content is the attempt
        return CodeExtraction(extraction.text, "answer_tag", True, True)
    why = extraction.reason or f"no {language} code found"
    return CodeExtraction(None, "none", tag, False, why)
