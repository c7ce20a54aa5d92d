"""Video-MME-v2: grouped multiple choice with the benchmark's non-linear group score.

Reads a JSON/JSONL export of ``test.parquet``: one row per question with ``video_id``,
``question_id``, ``question``, ``options``, ``answer`` (letter), ``task_type`` and, when
present, ``level`` and the group fields ``group_id`` / ``group_type`` (``consistency`` or
``coherence``). Without ``group_id`` the four questions of a video form its group.
Videos: ``videos/<video_id>.mp4``.

Scores: per-question accuracy ("Avg Acc") and the non-linear group score. Our reading of
the published rule: a consistency group scores (k/n)^2 for k of n correct; a coherence
group is truncated at its first error, scoring (m/n)^2 for the m questions answered
correctly before it (questions in ``question_id`` order). The score is the mean over groups.
"""

from __future__ import annotations

from collections import defaultdict
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
from easyvideor1.eval.types import COMPOSITE, AnnotationError, EvalItem


def group_score(correct_in_order: list[bool], kind: str) -> float:
    n = len(correct_in_order)
    if n == 0:
        return 0.0
    if kind == "coherence":
        prefix = 0
        for ok in correct_in_order:
            if not ok:
                break
            prefix += 1
        return (prefix / n) ** 2
    return (sum(correct_in_order) / n) ** 2


def _order(question_id: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in str(question_id).replace("_", "-").split("-"))


@register
class VideoMMEv2(Benchmark):
    name = "videomme_v2"
    title = "Video-MME-v2"
    category_fields = ("level", "task_type", "group_type")
    video_defaults = {"fps": 1.0, "max_frames": 64}
    annotation = "test.json(l) (parquet export); videos videos/<video_id>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("test*.jsonl", "test*.json"), "Video-MME-v2 annotation (JSON/JSONL export of "
                                                              "test.parquet)")
        items = []
        for where, row in read_records(path):
            options = letter_options(field(row, "options", path, where, list), path, where)
            video = str(field(row, "video_id", path, where, (str, int)))
            group_type = str(row.get("group_type") or "consistency").lower()
            if group_type not in ("consistency", "coherence"):
                raise AnnotationError(str(path), where, "group_type",
                                      f"expected consistency or coherence, got {group_type!r}")
            qid = str(field(row, "question_id", path, where, (str, int)))
            items.append(
                EvalItem(
                    benchmark=self.name,
                    id=qid,
                    question=field(row, "question", path, where),
                    options=options,
                    problem_type="multiple choice",
                    answer=answer_letter(field(row, "answer", path, where), options, path, where),
                    videos=(find_video(root, ("videos", ""), video),),
                    categories={
                        "level": row.get("level"),
                        "task_type": row.get("task_type"),
                        "group_type": group_type,
                    },
                    meta={"group": str(row.get("group_id") or video)},
                    source=f"{path}:{where}",
                )
            )
        return items

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        groups: dict[str, list] = defaultdict(list)
        for record in records:
            groups[record["meta"]["group"]].append(record)
        scores = []
        for members in groups.values():
            members.sort(key=lambda r: _order(r["id"]))
            kind = members[0]["categories"]["group_type"]
            scores.append(group_score([r["values"].get("accuracy", 0.0) == 1.0 for r in members], kind))
        if scores:
            summary["metrics"]["non_lin_score"] = {
                "kind": COMPOSITE,
                "value": sum(scores) / len(scores),
                "n": len(scores),
                "over": "groups",
            }
