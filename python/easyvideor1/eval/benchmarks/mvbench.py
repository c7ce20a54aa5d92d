"""MVBench: 20 temporal tasks, multiple choice; the headline is the mean over tasks.

Reads ``json/<task>.json`` (one file per task, a list of ``{"video", "question",
"candidates", "answer"}``; the answer is the text of the right candidate). Videos are found
by file name anywhere under ``video/`` (the release nests them by source dataset).

Rows of some tasks (action sequence/prediction, object interaction, action localization,
episodic reasoning) give ``start``/``end`` bounds in seconds. As in the official evaluation,
frames are then taken uniformly within the bound only (``EvalItem.clip``): the protocol's
16 frames are spread over the bound by the frame sampler (first to last frame of the bound,
where the official code takes segment midpoints), a bound past the video's end is clamped
to it, and timestamps stay those of the source video. The bounds are also kept in ``meta``.
A negative start counts as 0 (the official sampler clamps it to the first frame); a row
whose end is not after its start has no usable bound: its frames span the whole video and
the report counts such rows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    VideoIndex,
    answer_letter,
    field,
    find_files,
    letter_options,
    read_records,
    register,
)
from easyvideor1.eval.benchmarks.common import macro_mean
from easyvideor1.eval.types import AnnotationError, EvalItem


@register
class MVBench(Benchmark):
    name = "mvbench"
    protocol_version = 2  # release format / clip windows (2026-11)
    title = "MVBench"
    category_fields = ("task",)
    video_defaults = {"fps": 2.0, "max_frames": 16, "min_frames": 16}
    annotation = "json/<task>.json; videos anywhere under video/"

    def load(self, root: Path) -> list[EvalItem]:
        videos = VideoIndex(root / "video")
        items = []
        empty_bounds = 0
        for path in find_files(root, ("json/*.json",), "MVBench task files (json/<task>.json)"):
            task = path.stem
            for where, row in read_records(path):
                candidates = field(row, "candidates", path, where, list)
                options = letter_options(candidates, path, where, "candidates")
                answer = field(row, "answer", path, where, (str, int))
                bounds = {k: row[k] for k in ("start", "end") if row.get(k) is not None}
                clip = _clip(row, path, where)
                empty_bounds += bool(bounds) and clip is None
                items.append(
                    EvalItem(
                        benchmark=self.name,
                        id=f"{task}/{where.split()[-1]}",
                        question=field(row, "question", path, where),
                        options=options,
                        problem_type="multiple choice",
                        answer=answer_letter(answer, options, path, where),
                        videos=(videos.find(field(row, "video", path, where)),),
                        categories={"task": task},
                        meta=bounds,
                        source=f"{path}:{where}",
                        clip=clip,
                    )
                )
        if empty_bounds:
            self.load_notes.append(
                f"{empty_bounds} item(s) have start/end bounds with end <= start; their frames were "
                "sampled over the whole video"
            )
        return items

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        macro_mean(summary, "task", "accuracy", name="task_mean_accuracy")


def _clip(row: dict[str, Any], path: Path, where: str) -> tuple[float, float] | None:
    """The row's ``(start, end)`` window in seconds; None without bounds or with an empty one."""
    start = field(row, "start", path, where, float, default=None)
    end = field(row, "end", path, where, float, default=None)
    if start is None and end is None:
        return None
    if start is None or end is None:
        raise AnnotationError(str(path), where, "start/end", "a bound needs both start and end")
    if not (math.isfinite(start) and math.isfinite(end)):
        raise AnnotationError(str(path), where, "start/end", f"not finite: {start} {end}")
    start = max(0.0, start)
    return (start, end) if end > start else None
