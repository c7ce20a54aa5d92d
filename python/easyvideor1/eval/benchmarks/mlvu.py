"""MLVU (dev): long-video tasks; M-Avg over the multiple-choice tasks, G-Avg over generation.

Reads ``json/<n>_<task>.json`` (lists of ``{"video", "question", "candidates", "answer",
"question_type"}``; ``answer`` is the right candidate's text). The generation tasks
(``sub_scene``, ``summary``) have no candidates: they are judged by the LLM judge, or scored
by ROUGE without one (reported under that name). Videos: ``video/<json stem>/<video>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    answer_letter,
    field,
    find_files,
    find_video,
    letter_options,
    read_records,
    register,
)
from easyvideor1.eval.benchmarks.common import macro_mean
from easyvideor1.eval.types import TEXT, EvalItem


@register
class MLVU(Benchmark):
    name = "mlvu"
    title = "MLVU"
    category_fields = ("task",)
    video_defaults = {"fps": 1.0, "max_frames": 64}
    needs_judge = True
    annotation = "json/<n>_<task>.json; videos video/<json stem>/<video>"

    def load(self, root: Path) -> list[EvalItem]:
        items = []
        for path in find_files(root, ("json/*.json",), "MLVU task files (json/<n>_<task>.json)"):
            for where, row in read_records(path):
                task = str(row.get("question_type") or path.stem.split("_", 1)[-1]) if isinstance(row, dict) \
                    else path.stem
                video = find_video(
                    root, (f"video/{path.stem}", "video", ""), field(row, "video", path, where)
                )
                answer = field(row, "answer", path, where, (str, int))
                candidates = row.get("candidates")
                common = dict(
                    benchmark=self.name,
                    id=f"{path.stem}/{where.split()[-1]}",
                    question=field(row, "question", path, where),
                    videos=(video,),
                    categories={"task": task},
                    source=f"{path}:{where}",
                )
                if candidates:
                    options = letter_options(candidates, path, where, "candidates")
                    items.append(
                        EvalItem(
                            **common,
                            options=options,
                            problem_type="multiple choice",
                            answer=answer_letter(answer, options, path, where),
                        )
                    )
                else:
                    items.append(
                        EvalItem(
                            **common,
                            problem_type="open-ended",
                            answer=str(answer),
                            meta={"open": "generation"},
                        )
                    )
        return items

    def extra_metrics(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        mc = sorted({r["categories"]["task"] for r in records if r["problem_type"] == "multiple choice"})
        gen = sorted({r["categories"]["task"] for r in records if r["problem_type"] != "multiple choice"})
        macro_mean(summary, "task", "accuracy", name="m_avg", members=mc)
        for metric in ("judge_score", "rouge"):
            macro_mean(summary, "task", metric, name=f"g_avg_{metric}", kind=TEXT, members=gen)
