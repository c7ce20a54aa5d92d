"""Official answer-extraction rules that several benchmarks' scorers share.

Each function reproduces one official reader as its source code behaves (quirks included); the
comment above each group names the script. Adapters call these from ``official_item``.
"""

from __future__ import annotations

import re
from typing import Any

# ---- MMMU-style readers (Video-MMMU: EvolvingLMMs-Lab/VideoMMMU lmms_eval/tasks/videommmu/utils.py,
# whose helpers follow MMMU-Benchmark/MMMU eval/eval_utils.py) ---------------------------------

# Phrases after which the open-answer reader takes the rest of a line as the answer.
_MMMU_KEY_INDICATORS = (
    "could be ",
    "so ",
    "is ",
    "thus ",
    "therefore ",
    "final ",
    "answer ",
    "result ",
    "are ",
    "in total ",
    "total ",
    "identify ",
    "recognize ",
    "calculated as ",
    "counted as ",
    "measured as ",
    "observed as ",
    "concluded as ",
    "found to be ",
    "equals ",
    "determined to be ",
    "number of ",
    "value is ",
    "adds up to ",
    "have ",
    "has ",
)
_MMMU_TRIVIAL = {":", ",", ".", "!", "?", ";", "'"}
_MMMU_NUMBER_PATTERNS = (
    re.compile(r"-?\b\d{1,3}(?:,\d{3})+\b"),  # 1,234,567
    re.compile(r"-?\d+(?:\.\d+)?[eE][+-]?\d+"),  # 1.5e3
    re.compile(r"-?(?:\d+\.\d+|\.\d+|\d+\b)(?![eE][+-]?\d+)(?![,\d])"),  # 12, 0.5, .5
)


def videommmu_choice(response: str, options: list[str]) -> str | None:
    """Video-MMMU's multiple-choice reader (``parse_multi_choice_response``, the benchmark's copy:
    no random fallback). ``None``: an empty response (the script's "API Error", left out of the
    denominator); ``"No Answere Found"`` (sic) when nothing is read; else the letter."""
    if response == "":
        return None
    letters = [chr(ord("A") + i) for i in range(len(options))]
    text = response
    for char in ",.!?;:'":
        text = text.strip(char)
    text = f" {text} "
    # Letter forms in the script's order: "A." and "A:" are both collected; "(A)", then "A ",
    # only while nothing is found; last, with more than five words, the option texts.
    period = [c for c in letters if f"{c}." in text]
    colon = [c for c in letters if f"{c}:" in text]
    candidates, mark = period + colon, "{}." if period else "{}:"
    if not candidates:
        candidates, mark = [c for c in letters if f"({c})" in text], "({})"
    if not candidates:
        candidates, mark = [c for c in letters if f"{c} " in text], " {} "
    lowered = text.lower()
    by_text = {}
    if not candidates and len(text.split()) > 5:
        by_text = {c: o.lower() for c, o in zip(letters, options) if o.lower() in lowered}
        candidates = list(by_text)
    if not candidates:
        return "No Answere Found"
    if len(candidates) == 1:
        return candidates[0]
    # Several: the one whose mark (of the form that matched first) occurs last; rfind's -1 for
    # a candidate found by another form, and the first of equal positions, as np.argmax.
    if by_text:
        positions = [lowered.rfind(by_text[c]) for c in candidates]
    else:
        positions = [text.rfind(mark.format(c)) for c in candidates]
    return candidates[positions.index(max(positions))]


def mmmu_normalize(value: str) -> list[Any]:
    """MMMU's ``normalize_str``: a number (commas dropped) rounded to 2 places, else the
    lowercased text; a single character becomes its two space-padded forms."""
    value = value.strip()
    try:
        return [round(float(value.replace(",", "")), 2)]
    except ValueError:
        pass
    value = value.lower()
    return [f" {value}", f"{value} "] if len(value) == 1 else [value]


def mmmu_open_predictions(response: str) -> list[Any] | None:
    """MMMU's ``parse_open_response``: candidate answers (texts and numbers, normalised) read
    from the tail of each line after a key phrase. ``None`` for an empty response."""
    if response == "":
        return None
    text = response.strip().strip(".").lower()
    # The script splits on ". " before a capital too, but only after lowercasing: lines only.
    lines = re.split(r"\.\s(?=[A-Z])|\n", text)
    keys = []
    for index, line in enumerate(lines):
        indicators = _MMMU_KEY_INDICATORS + (("=",) if index == len(lines) - 1 else ())
        shortest = None
        for indicator in indicators:
            if indicator in line:
                tail = line.split(indicator)[-1].strip()
                # An empty tail so far is replaced by the next one whatever its length (as the script).
                if not shortest or len(tail) < len(shortest):
                    shortest = tail
        if shortest and shortest.strip() not in _MMMU_TRIVIAL:
            keys.append(shortest)
    if not keys:
        keys = [text]
    found = list(keys)
    for key in keys:
        for pattern in _MMMU_NUMBER_PATTERNS:
            found.extend(pattern.findall(key))
    normalised: list[Any] = []
    for value in found:
        normalised.extend(mmmu_normalize(value))
    return list(dict.fromkeys(normalised))


def mmmu_open_correct(answer: str, predictions: list[Any]) -> bool:
    """MMMU's ``eval_open``: a text answer is right when it occurs inside a predicted text, a
    number when it equals a predicted number."""
    golds = mmmu_normalize(answer)
    for prediction in predictions:
        if isinstance(prediction, str):
            if any(isinstance(g, str) and g in prediction for g in golds):
                return True
        elif prediction in golds:
            return True
    return False


# ---- THUDM's letter reader (THUDM/LVBench lvbench/utils/answer_util.py and THUDM/MotionBench
# motionbench/utils/answer_util.py, the same ``polish_answer``) -----------------------------------


def thudm_polish_answer(response: str) -> str:
    """``polish_answer``: the text before the first ``)``, then after a ``(``, then its first
    space-separated word; its first character (case kept), or "" when nothing is left. So
    ``(B) x`` and ``B. x`` read ``B``, ``The answer is B`` reads ``T``."""
    text = response.strip().split(")")[0].strip()
    if "(" in text:
        text = text.split("(")[1].strip()
    text = text.split(" ")[0]
    return text[0] if text else text


# ---- Video-MME family readers: the first capital option letter after dropping answer phrases
# (BradyFU/Video-MME's thanku-all/parse_answer eval_your_results.py; MME-Benchmarks/Video-MME-v2
# evaluation/test_video_mme_v2.py; lmms-eval tasks/longvideobench/utils.py) -----------------------


def first_letter_after_prefixes(response: str, prefixes: tuple[str, ...], letters: str) -> str:
    """Strip, delete every prefix phrase, then: "" when more than ten words hold no letter of
    ``letters``; else the first such (capital) letter anywhere, or "" when there is none."""
    text = response.strip()
    for prefix in prefixes:
        text = text.replace(prefix, "")
    found = re.search(f"[{letters}]", text)
    if found is None:
        return ""
    return found.group(0)


# eval_your_results.py's list: two pairs lack a comma, so Python joins them into one phrase each
# ("The best option isThe correct option is", "Best answer:Best option:"), which never occur.
VIDEOMME_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option isThe correct option is",
    "Best answer:Best option:",
    "Answer:",
    "Option:",
    "The correct answer",
    "The correct option",
)
LONGVIDEOBENCH_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option is",
    "The correct option is",
    "Best answer:",
    "Best option:",
)
# Video-MME-v2's list is LongVideoBench's, in the same order, between two more phrases each side.
VIDEOMME_V2_PREFIXES = ("Final Answer:", *LONGVIDEOBENCH_PREFIXES, "Answer:", "Option:")


# ---- lmms-eval's ``mcq_acc`` reader (MVBench-style tasks; ODV-Bench: MCG-NJU/StreamForest
# lmms_eval/tasks/odvbench/utils.py) -------------------------------------------------------------

_MCQ_ACC_PUNCT = tuple(';/[]"{}()=+\\_-><@`,?!')  # the script's list, in its order
_MCQ_ACC_COMMA = re.compile(r"(\d)(,)(\d)")
# The script's "(?!<=\d)" is a lookahead (a typo for a lookbehind) that never blocks a match: every
# "." not followed by a digit goes, at most 32 of them (re.UNICODE passed where sub takes a count).
_MCQ_ACC_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
_MCQ_ACC_OPTION = re.compile(r"^([A-E])\.\s*(.+)$", re.IGNORECASE)
_MCQ_ACC_LETTER = re.compile(r"\b([A-E])\b", re.IGNORECASE)


def mcq_acc_process(text: str) -> str:
    """``process`` of lmms-eval's ``mcq_acc``: a leading "X. text" gives X; else the text is
    cleaned of punctuation and lowercased, and its first standalone letter A-E (any case) is
    the answer, or the cleaned text itself when it has none. Two texts match when equal."""
    option = _MCQ_ACC_OPTION.match(text.strip())
    if option:
        return option.group(1).upper()
    cleaned = text.replace("\n", " ").replace("\t", " ").strip()
    spaced = cleaned
    for mark in _MCQ_ACC_PUNCT:
        # The test looks at the original text, the replacement applies to the running one.
        if f"{mark} " in cleaned or f" {mark}" in cleaned or _MCQ_ACC_COMMA.search(cleaned):
            spaced = spaced.replace(mark, "")
        else:
            spaced = spaced.replace(mark, " ")
    spaced = _MCQ_ACC_PERIOD.sub("", spaced, count=32)
    spaced = spaced.strip("'").strip('"').strip(")").strip("(").strip().lower()
    letter = _MCQ_ACC_LETTER.search(spaced)
    return letter.group(1).upper() if letter else spaced
