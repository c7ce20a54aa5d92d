"""Multiple choice: the predicted option letter must equal the ground-truth letter.

accuracy = 1 if letter(prediction) == letter(ground truth) else 0.
valid    = the prediction names one letter among the offered options (A..J without options).

Letters A-J are read from the extracted answer in this order (first rule that applies):

1. the whole answer is a label: ``B``, ``(B)``, ``[B]``, ``B.``, ``b`` (after peeling
   ``**``/``$``/``\\boxed{}`` wrappers);
2. the answer starts with a label: ``B) red``, ``B. blue``, ``B: blue``, ``(B) red``,
   ``Option B``, ``Choice (b)``, ``Answer: B``;
3. a phrase anywhere: "the answer is B", "correct option is (C)", "answer: D";
4. the answer's text equals one option's text (case, punctuation and spacing ignored);
5. exactly one standalone capital letter A-J in the answer; "A" and "I" followed by a
   lowercase word are read as English words ("A cup", "I think"), never as labels, except
   before words that cannot follow them (and, or, nor, is, because, since, but);
6. exactly one option text contained in the answer (an option whose text lies inside a
   longer matching option's text is dropped: "dark red" beats "red"), else the answer
   contained in exactly one option's text.

Options are ``["A. red", "B. blue"]`` (labels ``A.``, ``A)``, ``(A)``, ``A:``) or bare texts,
which get letters in order. The ground truth is a letter (possibly wrapped or labelled) or
an option's text; anything else raises :class:`GroundTruthError`.
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
from easyvideor1.rewards.parsing import normalize_text, strip_markup
from easyvideor1.rewards.registry import register_scorer
from easyvideor1.rewards.types import Score, ScoreRequest

LETTERS = "ABCDEFGHIJ"

_OPTION_LABEL_RE = re.compile(r"^\s*[\(\[]?([A-Ja-j])\s*[\.\)\]:：、]\s*(.*)$", re.DOTALL)
_WHOLE_LABEL_RE = re.compile(r"^[\(\[]?([A-Ja-j])[\)\]]?[\.:)]?$")
# "A" and "I" followed by a lowercase word are English ("A cup", "I think"), unless that word
# cannot follow an article or a pronoun ("A and B", "A is correct").
_WORD_FOLLOWS = r"(?!\s+(?!(?:and|or|nor|is|because|since|but)\b)[a-z])"
# One option letter inside a sentence: bracketed (any case), a capital B-J, a capital A or I
# not used as a word, or a lowercase letter ending the text.
_LETTER = (
    rf"(?:[\(\[]([A-Ja-j])[\)\]]|([B-HJ])(?![\w'’])|([AI])(?![\w'’]){_WORD_FOLLOWS}"
    r"|([a-j])(?=\s*(?:[\.\):]\s*)?$))"
)
_LEADING_LABEL_RE = re.compile(
    rf"^(?:(?i:option|choice|answer)\s*(?:(?i:is)\s*)?(?:[:\-]\s*)?{_LETTER}"
    r"|[\(\[]([A-Ja-j])[\)\]]"
    r"|([A-J])\s*[\.\):：](?!\d))"
)
_PHRASE_RE = re.compile(
    rf"\b(?i:answer|option|choice)\s*(?:(?i:is|would be|should be)\s*)?(?::\s*)?(?:(?i:option)\s+)?{_LETTER}"
)
_LOOSE_LETTER_RE = re.compile(rf"(?<![\w'’])(?:([B-HJ])|([AI]){_WORD_FOLLOWS})(?![\w'’])")


def label_options(options: list[str] | tuple[str, ...] | None) -> list[tuple[str, str]]:
    """``[(letter, text), ...]`` for labelled or bare option strings (bare: A, B, ... in order)."""
    if not options:
        return []
    options = [str(o) for o in options][: len(LETTERS)]
    parsed = [_OPTION_LABEL_RE.match(o) for o in options]
    letters = [m.group(1).upper() for m in parsed if m]
    if len(letters) == len(options) and len(set(letters)) == len(letters):
        return [(m.group(1).upper(), m.group(2).strip()) for m in parsed if m]
    return [(LETTERS[i], o.strip()) for i, o in enumerate(options)]


def read_choice(text: str | None, labelled: list[tuple[str, str]]) -> tuple[str | None, str]:
    """``(letter, rule)`` read from an answer; letter None with the reason as ``rule``."""
    if text is None:
        return None, "no answer"
    text = strip_markup(text)
    if not text:
        return None, "empty answer"
    match = _WHOLE_LABEL_RE.match(text)
    if match:
        return match.group(1).upper(), "letter"
    match = _LEADING_LABEL_RE.match(text)
    if match:
        return next(g for g in match.groups() if g).upper(), "leading_label"
    match = _PHRASE_RE.search(text)
    if match:
        return next(g for g in match.groups() if g).upper(), "phrase"
    normalized = normalize_text(text)
    for letter, option_text in labelled:
        if normalized and normalized == normalize_text(option_text):
            return letter, "option_text"
    loose = {next(g for g in m.groups() if g) for m in _LOOSE_LETTER_RE.finditer(text)}
    if len(loose) == 1:
        return loose.pop(), "standalone_letter"
    if len(loose) > 1:
        return None, "ambiguous: several letters (" + ", ".join(sorted(loose)) + ")"
    letter = _contained_option(normalized, labelled)
    if letter:
        return letter, "option_text_contained"
    return None, "no option letter or option text found"


def _contained_option(normalized: str, labelled: list[tuple[str, str]]) -> str | None:
    if not normalized:
        return None
    padded = f" {normalized} "
    texts = [(letter, normalize_text(t)) for letter, t in labelled]
    inside = [(letter, t) for letter, t in texts if t and f" {t} " in padded]
    # An option whose words are part of a longer matching option is not a separate match.
    inside = [(letter, t) for letter, t in inside
              if not any(t != other and f" {t} " in f" {other} " for _, other in inside)]
    if len(inside) == 1:
        return inside[0][0]
    if inside:
        return None
    around = [letter for letter, t in texts if t and padded in f" {t} "]
    return around[0] if len(around) == 1 else None


@register_scorer(
    "multiple choice",
    aliases=("mc", "choice", "multiple-choice", "multiple_choice", "single choice", "mcq"),
    description="option letter A-J equals the ground-truth letter",
)
def score_multiple_choice(req: ScoreRequest, options: dict[str, Any]) -> Score:
    labelled = label_options(req.options)
    offered = [letter for letter, _ in labelled] or list(LETTERS)
    truth = strip_answer_tags(req.ground_truth)
    truth_letter, _ = read_choice(truth, labelled)
    if truth_letter is None or truth_letter not in offered:
        raise GroundTruthError("multiple choice", req.ground_truth,
                               f"expected one letter among {''.join(offered)} or an option text")
    extraction = extract_for(req.response, options)
    letter, rule = read_choice(extraction.text, labelled)
    details = extraction_details(extraction)
    details.update(pred=letter, gt=truth_letter, rule=rule if letter else None)
    valid = letter is not None and letter in offered
    if letter is None:
        details["reason"] = rule
    elif not valid:
        details["reason"] = f"letter {letter} is not among the offered options {''.join(offered)}"
    accuracy = 1.0 if valid and letter == truth_letter else 0.0
    return Score(accuracy, format_score(extraction, valid), details)
