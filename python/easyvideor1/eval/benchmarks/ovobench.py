"""OVO-Bench (offline protocol): backward tracing, real-time perception, forward responding.

Release: JoeLeelyf/OVO-Bench ``data/ovo_bench_new.json`` (also on the Hugging Face Hub), a
list of rows with a unique ``id``, ``task`` and ``video``. Backward/real-time tasks (EPM, ASI,
HLD, STU, OJR, ATR, ACR, OCR, FPD) have ``question``, ``options``, ``gt`` (index), ``answer``
and ``realtime``; the model sees the video up to ``realtime``, cut by the release's
``utils/chunk_videos.py`` as ``chunked_videos/<id>.mp4``. Forward tasks have ``test_info``,
a list of probes, each seen as ``chunked_videos/<id>_<k>.mp4`` (item id ``<id>/<k>``): REC
rows (``activity``) probes ``{"realtime", "count"}``; SSR rows (``tutorial``, ``all_steps``,
no question) probes ``{"realtime", "step", "type"}``; CRR rows (``question``) probes
``{"realtime", "type"}`` (1 = yes, 0 = no).

Official scorer: JoeLeelyf/OVO-Bench ``utils/OVOBenchScore.py`` (``OVOBenchOfflineScore``),
reproduced by ``official_item`` / ``official_summary``: a multiple-choice response is right
when the letter ``chr(65 + gt)`` occurs anywhere in it (a substring test: "B. A drawer" is
right for A as well as B); REC joins all the digits of the response and compares the string
with the count ("2 of 10" reads "210"); SSR/CRR accept exactly "Y" / "N", else "Yes" / "No"
as a case-sensitive substring ("yes" is wrong, "Not sure" reads "No"). Scores: accuracy per
task (forward tasks per probe), each group the mean of its tasks, the overall the mean of
the three groups. The strict metric reads answers with the rewards library and aggregates
the same way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
)
from easyvideor1.eval.benchmarks.common import composite, macro_mean
from easyvideor1.eval.benchmarks.official import grouped_official_mean
from easyvideor1.eval.types import AnnotationError, EvalItem

GROUPS = {
    "backward_tracing": ("EPM", "ASI", "HLD"),
    "realtime_perception": ("STU", "OJR", "ATR", "ACR", "OCR", "FPD"),
    "forward_responding": ("REC", "SSR", "CRR"),
}
GROUP_OF = {task: group for group, tasks in GROUPS.items() for task in tasks}


@register
class OVOBench(Benchmark):
    name = "ovobench"
    title = "OVO-Bench"
    category_fields = ("task", "group")
    video_defaults = {"fps": 1.0, "max_frames": 32}
    annotation = "ovo_bench_new.json; clips chunked_videos/<id>.mp4 and <id>_<k>.mp4"
    protocol_version = 3
    strict_metric = "overall"  # the summary's composite, as the benchmark reports it
    official_source = "JoeLeelyf/OVO-Bench utils/OVOBenchScore.py"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("ovo_bench_new.json", "*.json"), "OVO-Bench annotation (ovo_bench_new.json)")
        items = []
        for where, row in read_records(path):
            task = field(row, "task", path, where)
            if task not in GROUP_OF:
                raise AnnotationError(
                    str(path), where, "task", f"unknown task {task!r}; known: {sorted(GROUP_OF)}"
                )
            rid = str(field(row, "id", path, where, (str, int)))
            categories = {"task": task, "group": GROUP_OF[task]}
            if GROUP_OF[task] != "forward_responding":
                options = letter_options(field(row, "options", path, where, list), path, where)
                items.append(
                    EvalItem(
                        benchmark=self.name,
                        id=rid,
                        question=field(row, "question", path, where),
                        options=options,
                        problem_type="multiple choice",
                        answer=answer_letter(
                            field(row, "gt", path, where, (int, str)), options, path, where, "gt"
                        ),
                        videos=(find_video(root, ("chunked_videos",), rid),),
                        categories=categories,
                        meta={"realtime": row.get("realtime")},
                        source=f"{path}:{where}",
                    )
                )
                continue
            # REC counts an activity, CRR asks a question, SSR names a step per probe.
            subject = {"REC": "activity", "CRR": "question"}.get(task)
            subject = field(row, subject, path, where) if subject else ""
            for k, probe in enumerate(field(row, "test_info", path, where, list)):
                spot = f"{where} test_info[{k}]"
                items.append(self._probe(root, path, spot, rid, k, task, subject, probe, categories))
        return items

    def _probe(
        self,
        root: Path,
        path: Path,
        where: str,
        rid: str,
        k: int,
        task: str,
        subject: str,
        probe: Any,
        categories: dict,
    ) -> EvalItem:
        common = dict(
            benchmark=self.name,
            id=f"{rid}/{k}",
            videos=(find_video(root, ("chunked_videos",), f"{rid}_{k}"),),
            categories=categories,
            meta={"realtime": probe.get("realtime") if isinstance(probe, dict) else None},
            source=f"{path}:{where}",
        )
        if task == "REC":
            count = field(probe, "count", path, where, int)
            return EvalItem(
                **common,
                problem_type="numerical",
                answer=str(count),
                question=f'How many times has the action "{subject}" been performed so far in the video?',
            )
        kind = field(probe, "type", path, where, int)
        if kind not in (0, 1):
            raise AnnotationError(str(path), where, "type", f"expected 0 or 1, got {kind}")
        if task == "SSR":
            step = field(probe, "step", path, where)
            question = f'Is the person performing the step "{step}" at this moment?'
        else:
            question = f'Is there enough information in the video so far to answer: "{subject}"?'
        return EvalItem(
            **common, problem_type="boolean", answer="yes" if kind == 1 else "no", question=question
        )

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        for group, tasks in GROUPS.items():
            macro_mean(summary, "task", "accuracy", name=group, members=tasks)
        composite(
            summary, "overall", {g: summary["metrics"][g]["value"] for g in GROUPS if g in summary["metrics"]}
        )
        if "overall" in summary["metrics"]:
            summary["metrics"]["overall"]["kind"] = "accuracy"  # a mean of accuracies stays an accuracy

    def official_item(self, item: EvalItem, response: str, ctx: Any, metas=()) -> OfficialVerdict:
        task = item.categories["task"]
        if task == "REC":
            digits = "".join(re.findall(r"\d+", response))
            return OfficialVerdict(values={"accuracy": float(digits == item.answer)}, extracted=digits)
        if task in ("SSR", "CRR"):
            word = "Yes" if item.answer == "yes" else "No"
            exact = response == word[0]
            right = exact or word in response
            return OfficialVerdict(
                values={"accuracy": float(right)},
                extracted=word if right else None,
                note='the official test is a case-sensitive substring ("Yes"/"No", or exactly Y/N)',
            )
        right = item.answer in response
        return OfficialVerdict(
            values={"accuracy": float(right)},
            extracted=item.answer if right else None,
            note="the official test is whether the right letter occurs anywhere in the response",
        )

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        groups = {g: grouped_official_mean(records, "task", members=tasks) for g, tasks in GROUPS.items()}
        groups = {g: m for g, m in groups.items() if m is not None}
        if not groups:
            return None
        return {
            "metric": "overall",
            "kind": "accuracy",
            "value": sum(m["value"] for m in groups.values()) / len(groups),
            "n": sum(m["n"] for m in groups.values()),
            "over": {g: round(m["value"], 6) for g, m in groups.items()},
            "tasks": {t: v for m in groups.values() for t, v in m["over"].items()},
        }
