"""OVO-Bench (offline protocol): backward tracing, real-time perception, forward responding.

Reads ``ovo_bench_new.json``: a list of rows with ``id``, ``task`` and ``video``.
Backward/real-time tasks (EPM, ASI, HLD, STU, OJR, ATR, ACR, OCR, FPD) have ``question``,
``options``, ``gt`` (index) and ``realtime``; the model sees the video up to ``realtime``,
cut as ``chunked_videos/<id>.mp4``. Forward tasks (REC, SSR, CRR) have ``test_info``: a list
of probes ``{"realtime", "count"}`` (REC: how many times so far) or ``{"realtime", "type"}``
(SSR/CRR: 1 = yes, 0 = no), each seen as ``chunked_videos/<id>_<k>.mp4``.

Scores: accuracy per task; each group is the mean of its tasks; the overall is the mean of
the three groups. Forward tasks are scored per probe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    answer_letter,
    field,
    find_file,
    find_video,
    letter_options,
    read_records,
    register,
)
from easyvideor1.eval.benchmarks.common import composite, macro_mean
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
            subject = field(row, ("question", "activity"), path, where)
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
            step = probe.get("step") or subject
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
