"""Small text helpers shared by the scorers: markup stripping, text normalisation, lenient JSON.

``parse_jsonish`` accepts what models actually write around a JSON value: a Markdown code
fence, prose before/after it, Python-style single quotes, ``None``/``True``/``False`` and
trailing commas. It raises :class:`ValueError` when no JSON value can be recovered.
"""

from __future__ import annotations

import json
import re
import string
from typing import Any

from easyvideor1.rewards.extract import last_boxed

MAX_JSON_CHARS = 200_000  # longer answers are not parsed (a model babbling, not answering)

# The language tag must end in a newline: a tag run that could also be content would make
# an unclosed fence quadratic.
_FENCE_RE = re.compile(r"```(?:[\w+-]*[ \t]*\n)?(.*?)```", re.DOTALL)
_TRAILING_COMMA_RE = re.compile(r",\s*([\]}])")
_PY_LITERAL_RE = re.compile(r"\b(None|True|False)\b")
_PY_TO_JSON = {"None": "null", "True": "true", "False": "false"}
_WRAPPER_RES = (
    re.compile(r"^\*\*(.*)\*\*$", re.DOTALL),
    re.compile(r"^__(.*)__$", re.DOTALL),
    re.compile(r"^`(.*)`$", re.DOTALL),
    re.compile(r"^\$\$(.*)\$\$$", re.DOTALL),
    re.compile(r"^\$(.*)\$$", re.DOTALL),
    re.compile(r"^\\\((.*)\\\)$", re.DOTALL),
    re.compile(r"^\\\[(.*)\\\]$", re.DOTALL),
    re.compile(r"^\\text\{(.*)\}$", re.DOTALL),
    re.compile(r'^"(.*)"$', re.DOTALL),
    re.compile(r"^'(.*)'$", re.DOTALL),
)
_PUNCT_TABLE = str.maketrans({ch: " " for ch in string.punctuation + "“”‘’«»…–—"})
_SPACE_RE = re.compile(r"\s+")


def strip_markup(text: str) -> str:
    """Peel wrappers a model puts around a short answer: ``**x**``, ``$x$``, ``\\boxed{x}``, quotes."""
    text = text.strip()
    for _ in range(6):  # wrappers nest at most a few deep (``$\\boxed{**B**}$``)
        before = text
        if text.startswith(("\\boxed", "\\fbox")) and text.endswith("}"):
            inner = last_boxed(text)
            if inner is not None and len(inner) == len(text) - text.index("{") - 2:
                text = inner.strip()
        for pattern in _WRAPPER_RES:
            match = pattern.match(text)
            if match:
                text = match.group(1).strip()
        if text == before:
            break
    return text


def normalize_text(text: str) -> str:
    """Lowercase, punctuation to spaces, whitespace collapsed: for exact-text comparisons."""
    return _SPACE_RE.sub(" ", text.lower().translate(_PUNCT_TABLE)).strip()


def parse_jsonish(text: str) -> Any:
    """The JSON value in ``text`` (see the module docstring); ValueError when there is none."""
    if text is None:
        raise ValueError("no text")
    text = text.strip()
    if not text:
        raise ValueError("empty text")
    if len(text) > MAX_JSON_CHARS:
        raise ValueError(f"answer longer than {MAX_JSON_CHARS} characters")
    candidates = [text]
    fence = _FENCE_RE.search(text)
    if fence:
        candidates.insert(0, fence.group(1).strip())
    for candidate in candidates:
        value = _loads_lenient(candidate)
        if value is not _MISSING:
            return value
        span = _outer_bracket_span(candidate)
        if span is not None:
            value = _loads_lenient(candidate[span[0]:span[1]])
            if value is not _MISSING:
                return value
    raise ValueError("no JSON value found")


_MISSING = object()


def _loads_lenient(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    fixed = _TRAILING_COMMA_RE.sub(r"\1", text)
    fixed = _PY_LITERAL_RE.sub(lambda m: _PY_TO_JSON[m.group(1)], fixed)
    if "'" in fixed and '"' not in fixed:
        fixed = fixed.replace("'", '"')
    if fixed == text:
        return _MISSING
    try:
        return json.loads(fixed)
    except (ValueError, RecursionError):
        return _MISSING


def _outer_bracket_span(text: str) -> tuple[int, int] | None:
    """Span of the first balanced ``[...]`` or ``{...}`` (ignoring brackets inside strings)."""
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    if not starts:
        return None
    begin = min(starts)
    depth = 0
    quote = None
    escaped = False
    for index in range(begin, len(text)):
        char = text[index]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return begin, index + 1
    return None


def answer_and_json(text: str | None) -> tuple[str, Any | None]:
    """The unwrapped answer text and, when it holds a bracketed JSON-ish value, that value.

    ValueError for a missing or empty answer; an unparseable bracket is left to the caller's
    plain-text reading (value None)."""
    if text is None:
        raise ValueError("no answer")
    text = strip_markup(text)
    if not text:
        raise ValueError("empty answer")
    if "[" in text or "{" in text:
        try:
            return text, parse_jsonish(text)
        except ValueError:
            pass
    return text, None
