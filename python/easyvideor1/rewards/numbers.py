"""Number parsing shared by the numeric scorers; values are exact :class:`fractions.Fraction`.

Accepted: integers, decimals (``4``, ``4.0``, ``.5``), thousands separators (``1,000``),
signs (``-3``, ``−3``), scientific notation (``1.5e3``), fractions (``3/4``, ``\\frac{3}{4}``),
mixed numbers (``1 1/2``), and English number words from zero to ninety-nine combined with
``hundred``/``thousand`` (``twenty-one``, ``three hundred and five``, ``a dozen`` is *not*
accepted). Anything after the number is treated as a unit and ignored (``3 cm`` -> 3); the
percent sign is a unit too (``50%`` -> 50). When the text holds several numbers with
*different* values the answer is ambiguous and rejected, so hedging ("2 or 3") never scores.
Number words are read only when the text has no digits ("3 and four" reads as 3).
Values beyond the float range (``1e999``), exponents beyond +-400 and tokens longer than 64
characters are rejected.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from fractions import Fraction

from easyvideor1.rewards.parsing import strip_markup

_MAX_TOKEN = 64
_MAX_EXPONENT = 400  # bounds the size of the exact integers built from 1eNNN

_UNSIGNED = r"(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_SIGN = r"[-+\u2212]?"
# A number token: mixed number, fraction, or plain; not glued to a preceding word/number.
_NUMBER_RE = re.compile(
    rf"(?<![\w.,/])(?:\\[dt]?frac\{{\s*({_SIGN}{_UNSIGNED})\s*\}}\{{\s*({_SIGN}{_UNSIGNED})\s*\}}"
    rf"|({_SIGN}\d+)\s+(\d+)\s*/\s*(\d+)(?![\d.])"
    rf"|({_SIGN}{_UNSIGNED})(?:\s*/\s*({_SIGN}{_UNSIGNED}))?)"
)
_SIGN_ONLY_RE = re.compile(rf"^{_SIGN}$")

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19,
}
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90,
}
_SCALES = {"hundred": 100, "thousand": 1000}
_NUMBER_WORDS = set(_UNITS) | set(_TENS) | set(_SCALES)
_WORD_RE = re.compile(r"[a-z]+")
_DIGIT_RE = re.compile(r"\d")


@dataclass(frozen=True)
class ParsedNumber:
    """``value`` is None when no single number could be read; ``reason`` then says why."""

    value: Fraction | None
    reason: str | None = None


def parse_number(text: str | None) -> ParsedNumber:
    """Read one number from ``text`` (see the module docstring)."""
    if text is None:
        return ParsedNumber(None, "no answer")
    text = strip_markup(text)
    if not text:
        return ParsedNumber(None, "empty answer")
    if _DIGIT_RE.search(text):
        return _parse_digits(text)
    return _parse_words(text)


def to_fraction(token: str) -> Fraction | None:
    """Exact value of one plain numeric token (``1,000``, ``-2.5e3``); None when out of range."""
    token = token.replace(",", "").replace("\u2212", "-")
    if len(token) > _MAX_TOKEN:
        return None
    mantissa, _, exponent = token.lower().partition("e")
    if exponent and abs(int(exponent)) > _MAX_EXPONENT:
        return None
    if mantissa.endswith("."):
        token = mantissa[:-1] + (f"e{exponent}" if exponent else "")
    try:
        value = Fraction(token)
    except (ValueError, ZeroDivisionError):
        return None
    return value if abs(value) <= sys.float_info.max else None


def _parse_digits(text: str) -> ParsedNumber:
    values: list[Fraction] = []
    for match in _NUMBER_RE.finditer(text):
        value = _match_value(match)
        if value is None or abs(value) > sys.float_info.max:
            return ParsedNumber(None, f"not a finite number: {match.group(0)!r}")
        if value not in values:
            values.append(value)
    if not values:
        return ParsedNumber(None, "no number found")
    if len(values) > 1:
        shown = ", ".join(_show(v) for v in values[:5])
        return ParsedNumber(None, f"ambiguous: several numbers ({shown})")
    return ParsedNumber(values[0])


def _match_value(match: re.Match[str]) -> Fraction | None:
    frac_num, frac_den, whole, mixed_num, mixed_den, plain, over = match.groups()
    if frac_num is not None:
        return _divide(to_fraction(frac_num), to_fraction(frac_den))
    if whole is not None:
        base = to_fraction(whole)
        part = _divide(to_fraction(mixed_num), to_fraction(mixed_den))
        if base is None or part is None:
            return None
        return base - part if whole.lstrip().startswith(("-", "\u2212")) else base + part
    value = to_fraction(plain)
    if over is not None:
        return _divide(value, to_fraction(over))
    return value


def _divide(numerator: Fraction | None, denominator: Fraction | None) -> Fraction | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def _parse_words(text: str) -> ParsedNumber:
    words = _WORD_RE.findall(text.lower())
    runs: list[list[str]] = []
    current: list[str] = []
    for index, word in enumerate(words):
        starts_scale = word == "a" and index + 1 < len(words) and words[index + 1] in _SCALES
        if word in _NUMBER_WORDS or starts_scale or (word == "and" and current):
            current.append(word)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    values: list[int] = []
    for run in runs:
        while run and run[-1] == "and":
            run.pop()
        value = _words_value(run)
        if value is None:
            return ParsedNumber(None, f"unreadable number words: {' '.join(run)!r}")
        if value not in values:
            values.append(value)
    if not values:
        return ParsedNumber(None, "no number found")
    if len(values) > 1:
        return ParsedNumber(None, "ambiguous: several numbers (" + ", ".join(map(str, values)) + ")")
    negative = bool(re.match(r"^\s*(?:minus|negative)\b", text.lower()))
    return ParsedNumber(Fraction(-values[0] if negative else values[0]))


def _words_value(run: list[str]) -> int | None:
    """Value of e.g. ``three hundred and twenty one``; None for malformed sequences."""
    total = 0
    group = 0  # the part below the current scale
    last = None  # kind of the previous token, to reject "five seven" or "twenty thirty"
    for word in run:
        if word == "and":
            if last != "scale":
                return None
            continue
        if word == "a":
            group, last = 1, "unit"
        elif word in _UNITS:
            if last == "unit" or (last == "tens" and (_UNITS[word] == 0 or _UNITS[word] >= 10)):
                return None
            group += _UNITS[word]
            last = "unit"
        elif word in _TENS:
            if last in ("unit", "tens"):
                return None
            group += _TENS[word]
            last = "tens"
        else:
            scale = _SCALES[word]
            if scale == 100:
                if group == 0 or group >= 100:
                    return None
                group *= 100
            else:
                total += (group or 1) * 1000
                group = 0
            last = "scale"
    return total + group


def _show(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"
