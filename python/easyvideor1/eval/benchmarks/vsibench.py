"""VSI-Bench: visual-spatial intelligence; MC accuracy and numeric mean relative accuracy.

Release: nyu-visionx/VSI-Bench on the Hugging Face Hub: the test split (parquet, read here as
a JSON/JSONL export, e.g. ``test.jsonl``) and the videos, one zip per source dataset
(``arkitscenes``, ``scannet``, ``scannetpp``) extracted under the data folder. Rows
``{"id", "dataset", "scene_name", "question_type", "question", "options" (a list of
``"A. text"`` strings for the six multiple-choice types, null for the four numeric ones),
"ground_truth" (the option letter, or the number as a string)}``. Videos:
``<dataset>/<scene_name>.mp4``. ``id`` is unique over the whole split.

Official scorer: vision-x-nyu/thinking-in-space ``lmms_eval/tasks/vsibench/utils.py``
(``vsibench_process_results`` / ``vsibench_aggregate_results``). Its rules, reproduced by
:meth:`VSIBench.official_item` and :meth:`VSIBench.official_summary`:

* the answer is the response's first space-separated token with trailing dots removed
  (``fuzzy_matching``); nothing else of the response is read;
* multiple choice: that token equals the ground-truth letter, case-insensitively;
* numeric: that token as a float; MRA is the share of the ten thresholds
  θ = 0.50, 0.55, ..., 0.95 with |pred - gt| / gt **<=** 1 - θ; a token that is not a
  number scores 0;
* overall: the mean per ``question_type``, the three ``object_rel_direction_*`` levels
  averaged into one task (not pooled), then the unweighted mean over the tasks.

The project's strict metrics read the answer with the rewards library (answer tags, phrases,
option text; MRA counts |pred - gt| / gt < 1 - θ, as in training); its ``overall``
composite aggregates tasks the benchmark's way (levels averaged) over the strict values.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    OfficialVerdict,
    answer_letter,
    field,
    find_file,
    find_video,
    letter_options,
    read_records,
    register,
    require_answer,
)
from easyvideor1.eval.benchmarks.common import composite
from easyvideor1.eval.types import COMPOSITE, EvalItem

DIRECTION = "object_rel_direction"
DIRECTION_LEVELS = tuple(f"{DIRECTION}_{level}" for level in ("easy", "medium", "hard"))
# The official thresholds: np.linspace(.5, .95, int((.95 - .5) / .05 + 2)) is 10 points, step .05.
MRA_THRESHOLDS = np.linspace(0.5, 0.95, int((0.95 - 0.5) / 0.05 + 2))


def task_of(question_type: str) -> str:
    return DIRECTION if question_type.startswith(DIRECTION) else question_type


def official_token(response: str) -> str:
    """The official ``fuzzy_matching``: first token split on spaces, trailing dots stripped."""
    return response.split(" ")[0].rstrip(".").strip()


def official_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def official_mra(pred: float, truth: float) -> float:
    """The official mean relative accuracy (``<=``, where the rewards library uses ``<``)."""
    return float((abs(pred - truth) / truth <= 1 - MRA_THRESHOLDS).mean())


def benchmark_overall(per_type: dict[str, float]) -> tuple[float, dict[str, float]]:
    """The benchmark's overall from the mean score per question type: the direction levels
    present are averaged into one task, then the tasks are averaged."""
    tasks = {t: v for t, v in per_type.items() if task_of(t) != DIRECTION}
    levels = [per_type[t] for t in DIRECTION_LEVELS if t in per_type]
    if levels:
        tasks[DIRECTION] = sum(levels) / len(levels)
    return sum(tasks.values()) / len(tasks), tasks


@register
class VSIBench(Benchmark):
    name = "vsibench"
    title = "VSI-Bench"
    category_fields = ("question_type", "dataset")
    video_defaults = {"fps": 1.0, "max_frames": 32}
    annotation = "test.json(l) (parquet export); videos <dataset>/<scene_name>.mp4"
    protocol_version = 3
    strict_metric = "overall"  # the summary's composite, as the benchmark reports it
    official_source = "vision-x-nyu/thinking-in-space lmms_eval/tasks/vsibench/utils.py"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("test*.jsonl", "test*.json", "*.jsonl", "*.json"), "VSI-Bench annotation")
        items = []
        for where, row in read_records(path):
            dataset = field(row, "dataset", path, where)
            truth = require_answer(row, ("ground_truth",), path, where)
            raw = row.get("options")
            common = dict(
                benchmark=self.name,
                id=str(field(row, "id", path, where, (str, int))),
                question=field(row, "question", path, where),
                videos=(find_video(root, (dataset,), field(row, "scene_name", path, where)),),
                categories={"question_type": field(row, "question_type", path, where), "dataset": dataset},
                meta={"ground_truth": str(truth)},
                source=f"{path}:{where}",
            )
            if raw:
                options = letter_options(raw, path, where)
                items.append(
                    EvalItem(
                        **common,
                        options=options,
                        problem_type="multiple choice",
                        answer=answer_letter(truth, options, path, where, "ground_truth"),
                    )
                )
            else:
                items.append(EvalItem(**common, problem_type="regression", answer=str(truth)))
        return items

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        per_type: dict[str, list[float]] = defaultdict(list)
        for record in records:
            value = record["values"].get("accuracy", record["values"].get("mra", 0.0))
            per_type[record["categories"]["question_type"]].append(value)
        if per_type:
            _, tasks = benchmark_overall({t: sum(v) / len(v) for t, v in per_type.items()})
            composite(summary, "overall", tasks)

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[Any] = ()
    ) -> OfficialVerdict:
        token = official_token(response)
        truth = item.meta.get("ground_truth", item.answer)
        first_token = "the official script reads only the first space-separated token"
        if item.problem_type == "multiple choice":
            return OfficialVerdict(
                values={"accuracy": float(token.lower() == truth.lower())}, extracted=token, note=first_token
            )
        pred, gt = official_float(token), float(truth)
        if gt == 0:
            # The official relative error divides by the ground truth and would crash here.
            return OfficialVerdict(extracted=pred, excluded="ground truth 0: relative error undefined")
        if pred is None:
            return OfficialVerdict(values={"mra": 0.0}, extracted=None, note=first_token)
        value = official_mra(pred, gt)
        strict_rule = float((abs(pred - gt) / gt < 1 - MRA_THRESHOLDS).mean())
        note = (
            "the official MRA counts |pred - gt| / gt = 1 - θ as a hit (<=)"
            if value != strict_rule
            else first_token
        )
        return OfficialVerdict(values={"mra": value}, extracted=pred, note=note)

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        per_type: dict[str, list[float]] = defaultdict(list)
        for record in records:
            official = record.get("official") or {}
            if official.get("excluded"):
                continue
            values = official.get("values") or {}
            value = values.get("accuracy", values.get("mra"))
            if value is not None:
                per_type[record["categories"]["question_type"]].append(value)
        if not per_type:
            return None
        overall, tasks = benchmark_overall({t: sum(v) / len(v) for t, v in per_type.items()})
        return {
            "metric": "overall",
            "kind": COMPOSITE,
            "value": overall,
            "n": sum(len(v) for v in per_type.values()),
            "over": {t: round(v, 6) for t, v in sorted(tasks.items())},
        }
