"""VideoReasonBench: vision-centric complex video reasoning; free-form answers, LLM-judged.

Format and scoring follow the official repository llyx97/video_reason_bench
(``questions/<demo>.json`` and ``eval_api.py`` / ``utils/eval_utils.py`` for the rows and the
judging, ``utils/show_results.py`` for the breakdowns; its VLMEvalKit port
``vlmeval/dataset/video_reasoning_bench.py`` reads the same fields). One JSON object per
demonstration type (``hrd``, ``file_sys``, ``cup``, ``grid``, ``card``, ``chip``), under
``questions/`` or the dataset root: ``{"<key>": {"video" (``videos/<demo>/<name>.mp4``),
"question" (the full prompt, asking for the answer after 'Final Answer:'), "answer", "dim",
"visible_time", "num_state", "num_operation", ...}}`` (a list or JSONL export of the Hub's
``<demo>/test-*.parquet`` with an ``id`` per row works too). Item ids are ``<demo>_<key>``.

Strict scoring: the text after the last "Final Answer" (case-insensitive, the colon dropped;
for tag-style responses, the ``<answer>`` span) goes to the project's judge against ``answer``
(rule-based fallback: a normalised exact match); a response with neither scores 0 without a
judge call.

Official scoring (``eval_api.py`` ``evaluate``, ``utils/eval_utils.py``): the response is cut
after the first Kimi-VL end-of-thinking marker; the text after the first "Final Answer"
(case-sensitive; spaces trimmed but the colon kept: "Final Answer: x" gives ": x") is the
answer; none, or an empty one, is wrong without a judge call. Otherwise the judge (GPT-4o, max
16 tokens) gets the official prompt with the full question, that answer and the ground truth,
and the item is right only when the reply is exactly ``Correct``. Accuracy pooled over all
questions (``show_results.py``).
``prediction_operation`` questions ship no reference answer: officially they are scored by
replaying the predicted operations in a puzzle simulator, which is not implemented, so they
are skipped and the report says how many; the official overall counts them (a sixth of the
release), so the official score here is over the other five dimensions. Accuracy overall and
per ``dim`` (``order_state`` and ``counting_state`` merged into ``infer_state`` as
``show_results.py`` does), per level (1 recall, 2 infer, 3 predict), per demo and per number
of operations (5-9, 10-14).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    OfficialVerdict,
    field,
    read_records,
    register,
)
from easyvideor1.eval.benchmarks.common import score_open
from easyvideor1.eval.benchmarks.official_judge import ask, judged
from easyvideor1.eval.types import AnnotationError, EvalItem, ItemScore

DEMOS = ("hrd", "file_sys", "cup", "grid", "card", "chip")
LEVELS = {
    "order_operation": 1,
    "counting_operation": 1,
    "infer_state": 2,
    "comparison_state": 2,
    "prediction_state": 3,
    "prediction_operation": 3,
}
MERGED_DIMS = {"order_state": "infer_state", "counting_state": "infer_state"}
_FINAL = re.compile(r"Final Answer\s*[:：]?\s*(.*?)\s*$", re.DOTALL | re.IGNORECASE)
_THINK_END = "\u25c1/think\u25b7"  # Kimi-VL's end-of-thinking marker, dropped as the official scorer does


def final_answer(response: str) -> str | None:
    """The text after the last "Final Answer" (``None`` when the response has none)."""
    if _THINK_END in response:
        response = response.split(_THINK_END, 1)[1]
    at = response.lower().rfind("final answer")
    if at < 0:
        return None
    match = _FINAL.match(response[at:])
    return match.group(1) if match else None


_OFFICIAL_FINAL = re.compile(r"Final Answer\s*(.*?)\s*$", re.DOTALL)
# The official judge prompt (utils/eval_utils.py get_judge_prompt), reproduced because it defines the score.
JUDGE_PROMPT = """You will be given a question, a model response and a ground-truth answer. Your task is to determine whether the model response is correct based on the ground-truth answer. The model response should contain all information in the ground-truth answer.

Question: {question}

Model Response: {response}

Ground-Truth Answer: {ground_truth}

Directly output "Correct" or "Incorrect":
"""


def official_final_answer(response: str) -> str | None:
    """``extract_final_answer``: the text after the first "Final Answer" (None: not found)."""
    if not response:
        return None
    if _THINK_END in response:
        response = response.split(_THINK_END)[1]
    match = _OFFICIAL_FINAL.search(response)
    return match.group(1) if match else None


def _operations_bucket(count: Any) -> str | None:
    if not isinstance(count, int | float) or isinstance(count, bool):
        return None
    if 5 <= count < 10:
        return "5-9"
    return "10-14" if 10 <= count < 15 else str(int(count))


@register
class VideoReasonBench(Benchmark):
    name = "videoreasonbench"
    protocol_version = 3  # official scoring (2026-12)
    title = "VideoReasonBench"
    category_fields = ("dim", "level", "demo", "num_operation")
    video_defaults = {"fps": 1.0, "max_frames": 128}
    needs_judge = True
    annotation = (
        "questions/<demo>.json (hrd, file_sys, cup, grid, card, chip); videos videos/<demo>/<name>.mp4"
    )
    official_source = "llyx97/video_reason_bench eval_api.py, utils/eval_utils.py"

    def load(self, root: Path) -> list[EvalItem]:
        files = []
        for demo in DEMOS:
            for folder in ("questions", ""):
                path = root / folder / f"{demo}.json" if folder else root / f"{demo}.json"
                if path.is_file():
                    files.append((demo, path))
                    break
        if not files:
            raise AnnotationError(
                str(root),
                None,
                None,
                "no VideoReasonBench annotation found (looked for questions/<demo>.json and <demo>.json "
                f"for demo in {', '.join(DEMOS)})",
            )
        items, skipped = [], 0
        for demo, path in files:
            for where, row in read_records(path):
                key = field(row, ("__key__", "id"), path, where, (str, int), default=None)
                key = where.split()[-1] if key is None else key
                dim = field(row, "dim", path, where)
                answer = field(row, "answer", path, where, (str, int, float), default="", allow_empty=True)
                if str(answer).strip() == "":
                    if dim != "prediction_operation":
                        raise AnnotationError(str(path), where, "answer", "missing ground-truth answer")
                    skipped += 1
                    continue
                dim = MERGED_DIMS.get(dim, dim)
                items.append(
                    EvalItem(
                        benchmark=self.name,
                        id=f"{demo}_{key}",
                        question=field(row, "question", path, where),
                        problem_type="open-ended",
                        answer=str(answer).strip(),
                        videos=(_video(root, field(row, "video", path, where)),),
                        categories={
                            "dim": dim,
                            "level": LEVELS.get(dim),
                            "demo": demo,
                            "num_operation": _operations_bucket(row.get("num_operation")),
                        },
                        meta={"visible_time": row.get("visible_time"), "num_state": row.get("num_state")},
                        source=f"{path}:{where}",
                    )
                )
        if skipped:
            self.load_notes.append(
                f"{skipped} prediction_operation question(s) not evaluated: they have no reference answer "
                "and are officially scored by simulating the predicted operations (not implemented)"
            )
        return items

    def answer_hint(self, item: EvalItem, metas: Any) -> str | None:
        return "Give the final answer after 'Final Answer:'."  # what the release's questions ask for

    def score(self, item: EvalItem, response: str, ctx: Any, metas=()) -> ItemScore:
        answer = final_answer(response)
        if answer is None and "<answer>" in response:
            return score_open(item, response, ctx)  # tag-style responses: the <answer> span
        if answer is None or not answer.strip():
            # The official scorer gives 0 without a judge call when there is no final answer.
            return ItemScore({"accuracy": 0.0}, None, {"final_answer": answer}, scoring="rule")
        return score_open(item, f"<answer>{answer}</answer>", ctx)

    @judged
    def official_item(self, item: EvalItem, response: str, ctx: Any, metas: Any = ()) -> OfficialVerdict:
        answer = official_final_answer(response)
        if not answer:
            return OfficialVerdict(
                values={"accuracy": 0.0},
                extracted=answer,
                note="no 'Final Answer' (case-sensitive): wrong without a judge call",
            )
        prompt = JUDGE_PROMPT.format(question=item.question, response=answer, ground_truth=item.answer)
        reply = ask(ctx, prompt, max_tokens=16)
        return OfficialVerdict(values={"accuracy": float(reply == "Correct")}, extracted=answer)


def _video(root: Path, video: str) -> str:
    relative = video.strip().lstrip("./")
    for candidate in (root / relative, root / "videos" / relative):
        if candidate.is_file():
            return str(candidate)
    return str(root / relative)
