"""VideoMathQA: mathematical reasoning in videos; MCQ accuracy and multi-binary (MBin) accuracy.

Reads ``videomathqa.json(l)`` (or another ``*.json(l)`` export): rows ``{"id", "video",
"question", "options" (list or lettered object), "answer" (letter or index),
"category"}``. Each question is asked once with all options (MCQ) and, for MBin, once per
distractor with just the right option and that distractor (in a fixed order that puts the
right option first for even and second for odd pairs); an MBin question is right only if
every pair is. Videos: ``videos/<video>``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    LETTERS,
    Benchmark,
    answer_letter,
    field,
    find_file,
    find_video,
    letter_options,
    options_from_dict,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.types import ACCURACY, EvalItem


@register
class VideoMathQA(Benchmark):
    name = "videomathqa"
    title = "VideoMathQA"
    category_fields = ("category", "mode")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "videomathqa.json(l); videos videos/<video>"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("videomathqa.jsonl", "videomathqa.json", "*.jsonl", "*.json"),
                         "VideoMathQA annotation")
        items = []
        for where, row in read_records(path):
            raw = field(row, "options", path, where, (list, dict))
            options = (options_from_dict(raw, path, where, "options") if isinstance(raw, dict)
                       else letter_options(raw, path, where))
            answer = answer_letter(require_answer(row, ("answer",), path, where), options, path, where)
            qid = str(field(row, ("id", "question_id"), path, where, (str, int)))
            common = dict(
                benchmark=self.name,
                question=field(row, "question", path, where),
                problem_type="multiple choice",
                source=f"{path}:{where}",
                videos=(
                    find_video(
                        root,
                        ("videos", ""),
                        str(field(row, ("video", "video_id", "videoID"), path, where, (str, int))),
                    ),
                ),
            )
            category = row.get("category")
            items.append(
                EvalItem(
                    **common,
                    id=f"{qid}/mcq",
                    options=options,
                    answer=answer,
                    categories={"category": category, "mode": "mcq"},
                    meta={"question": qid},
                )
            )
            right = LETTERS.index(answer)
            texts = [o.split(".", 1)[1].strip() for o in options]
            for pair, wrong in enumerate(i for i in range(len(options)) if i != right):
                order = [right, wrong] if pair % 2 == 0 else [wrong, right]
                pair_options = tuple(f"{LETTERS[k]}. {texts[i]}" for k, i in enumerate(order))
                items.append(
                    EvalItem(
                        **common,
                        id=f"{qid}/mbin{pair}",
                        options=pair_options,
                        answer=LETTERS[order.index(right)],
                        categories={"category": category, "mode": "mbin"},
                        meta={"question": qid},
                    )
                )
        return items

    def metrics_for(self, item: EvalItem, ctx: Any) -> dict[str, str]:
        return {"accuracy" if item.id.endswith("/mcq") else "binary_accuracy": ACCURACY}

    def score(self, item, response, ctx, metas=()):
        result = super().score(item, response, ctx, metas)
        if not item.id.endswith("/mcq"):
            result.values = {"binary_accuracy": result.values["accuracy"]}
        return result

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        pairs: dict[str, list[float]] = defaultdict(list)
        for record in records:
            if "binary_accuracy" in record["values"]:
                pairs[record["meta"]["question"]].append(record["values"]["binary_accuracy"])
        if pairs:
            value = sum(all(v == 1.0 for v in vs) for vs in pairs.values()) / len(pairs)
            summary["metrics"]["mbin_accuracy"] = {
                "kind": ACCURACY,
                "value": value,
                "n": len(pairs),
                "over": "questions",
            }
