"""LongVideo-Reason (test split): long-video reasoning, four-option multiple choice.

Format follows the release LongVideo-Reason/longvideo-reason (``test.jsonl``, 1,000 rows,
from NVlabs/Long-RL's ``longvideo-reason/eval.py``), with field names as read by lmms-eval's
``tasks/longvideo_reason/utils.py``: ``problem_id``, ``problem`` (the question with its
options embedded as ``A. ...`` lines), ``problem_type`` (``temporal``, ``goal``,
``spatial``, ``plot``), ``videos`` (``longvila_videos/<stem>.<mp4|webm|mkv>``), ``answer``
(``<answer>B</answer>``), ``data_type`` and ``reasoning`` (unused). Videos are found by
that path under the data folder, else by file name anywhere below it (the video archives
extract into ``longvideo_eval_subset<N>/`` folders).

A few rows of the release carry no usable option block (lmms-eval counts five); they are
kept, as upstream scores all 1,000, with the problem text shown as shipped and the answer
read as a letter; the report says how many. Scores: accuracy overall and per
``problem_type``. The strict answer letter is read by the rewards multiple-choice reader.

Official score (NVlabs/Long-RL ``eval/eval.py``, ``accuracy_reward``): first ``math_verify``
(``verify(parse(response), parse(answer))``), which never holds here: ``parse`` reads nothing
from a letter answer such as ``<answer>B</answer>`` (so it is not run); then the first
single-line ``<answer>(.*?)</answer>`` of the response (``<answer>Therefore the final answer
is: (.*?)</answer>`` when the response contains that phrase), stripped, or the whole stripped
response without a span, must equal the letter inside the answer's tags exactly (case and
punctuation count). The mean is over the items whose generation succeeded: ``eval.py`` drops
an item whose generation raised, so an item with no response is left out of the denominator.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    LETTERS,
    Benchmark,
    OfficialVerdict,
    VideoIndex,
    answer_letter,
    field,
    find_file,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.types import AnnotationError, EvalItem

ANNOTATIONS = ("test.jsonl", "test.json", "longvideo-reason/test.jsonl")
PROBLEM_TYPES = ("temporal", "goal", "spatial", "plot")
_OPTION = re.compile(r"^\s*([A-J])\.\s+(.*)$")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# eval.py's patterns have no DOTALL: a span must sit on one line.
_OFFICIAL_SPAN = re.compile(r"<answer>(.*?)</answer>")
_OFFICIAL_THEREFORE = re.compile(r"<answer>Therefore the final answer is: (.*?)</answer>")


def official_answer(response: str) -> str:
    """What ``eval.py`` compares with the ground truth."""
    pattern = _OFFICIAL_THEREFORE if "Therefore the final answer is:" in response else _OFFICIAL_SPAN
    match = pattern.search(response)
    return match.group(1).strip() if match else response.strip()


def split_problem(problem: str) -> tuple[str, tuple[str, ...] | None]:
    """``(question, ("A. x", ...))``, or ``(problem, None)`` without a clean A, B, ... block.

    Option lines may come in any order; they are sorted by letter and must be A, B, ...
    without gaps or repeats. Lines after an option that are not options continue it.
    """
    question: list[str] = []
    options: dict[str, list[str]] = {}
    current: str | None = None
    for line in problem.splitlines():
        match = _OPTION.match(line)
        if match:
            current = match.group(1)
            if current in options:
                return problem.strip(), None
            options[current] = [match.group(2).strip()]
        elif current is not None:
            if line.strip():
                options[current].append(line.strip())
        else:
            question.append(line)
    letters = sorted(options)
    if len(letters) < 2 or letters != list(LETTERS[: len(letters)]):
        return problem.strip(), None
    return "\n".join(question).strip(), tuple(f"{k}. {' '.join(options[k])}" for k in letters)


@register
class LongVideoReason(Benchmark):
    name = "longvideo_reason"
    protocol_version = 3  # official scoring (2026-12)
    title = "LongVideo-Reason"
    category_fields = ("problem_type",)
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "test.jsonl (LongVideo-Reason/longvideo-reason); videos longvila_videos/<name>"
    official_source = "NVlabs/Long-RL eval/eval.py"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ANNOTATIONS, "LongVideo-Reason annotation (test.jsonl)")
        index = VideoIndex(root)
        items, malformed = [], []
        for where, row in read_records(path):
            qid = str(field(row, "problem_id", path, where, (str, int)))
            problem_type = field(row, "problem_type", path, where)
            if problem_type not in PROBLEM_TYPES:
                raise AnnotationError(
                    str(path), where, "problem_type", f"expected one of {PROBLEM_TYPES}, got {problem_type!r}"
                )
            question, options = split_problem(field(row, "problem", path, where))
            answer = str(require_answer(row, ("answer",), path, where))
            tagged = _ANSWER_TAG.search(answer)
            answer = (tagged.group(1) if tagged else answer).strip()
            if options is None:
                malformed.append(qid)
                if len(answer) != 1 or answer.upper() not in LETTERS:
                    raise AnnotationError(
                        str(path), where, "answer", f"expected an option letter, got {answer!r}"
                    )
                answer = answer.upper()
            else:
                answer = answer_letter(answer, options, path, where)
            items.append(
                EvalItem(
                    benchmark=self.name,
                    id=qid,
                    question=question,
                    options=options,
                    problem_type="multiple choice",
                    answer=answer,
                    videos=(_video(root, index, field(row, "videos", path, where)),),
                    categories={"problem_type": problem_type},
                    source=f"{path}:{where}",
                )
            )
        if malformed:
            self.load_notes.append(
                f"{len(malformed)} question(s) without a parsable A/B/C/D option block, kept as shipped "
                f"(problem_id {', '.join(malformed[:10])}{', ...' if len(malformed) > 10 else ''})"
            )
        return items

    def official_item(self, item: EvalItem, response: str, ctx: Any, metas: Any = ()) -> OfficialVerdict:
        if not response:
            # An item without a response is one whose generation failed: eval.py drops it.
            return OfficialVerdict(excluded="no response: eval.py leaves failed generations out")
        answer = official_answer(response)
        return OfficialVerdict(values={"accuracy": float(answer == item.answer)}, extracted=answer)


def _video(root: Path, index: VideoIndex, video: str) -> str:
    relative = video.strip().lstrip("/")
    if (root / relative).is_file():
        return str(root / relative)
    found = index.find(Path(relative).name)
    return found if Path(found).is_file() else str(root / relative)
