"""VCR-Bench: video chain-of-thought reasoning across seven dimensions (answer accuracy).

Reads ``vcrbench.json`` / ``meta_info_video.json`` (or the JSON/JSONL export of the
release): rows ``{"id", "video_path", "question", "choices" (object or list, absent for
open questions), "answer", "dimension"}``. Multiple-choice items are rule-scored; open
answers go to the LLM judge (rule-based fallback without one). The reasoning-step
(CoT) score needs the annotated key steps and a judge; only answer accuracy is computed.
Videos: ``videos/<video_path>``.
"""

from __future__ import annotations

from pathlib import Path

from easyvideor1.eval.benchmarks.base import (
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
from easyvideor1.eval.types import EvalItem


@register
class VCRBench(Benchmark):
    name = "vcrbench"
    title = "VCR-Bench"
    category_fields = ("dimension",)
    video_defaults = {"fps": 1.0, "max_frames": 32}
    needs_judge = True
    annotation = "vcrbench.json(l) or meta_info_video.json; videos videos/<video_path>"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("vcrbench.jsonl", "vcrbench.json", "meta_info_video.json", "*.json"),
                         "VCR-Bench annotation")
        items = []
        for where, row in read_records(path):
            choices = row.get("choices") if isinstance(row, dict) else None
            choices = choices if choices else row.get("options") if isinstance(row, dict) else None
            answer = require_answer(row, ("answer",), path, where)
            common = dict(
                benchmark=self.name,
                id=str(field(row, "id", path, where, (str, int))),
                question=field(row, "question", path, where),
                videos=(find_video(root, ("videos", ""), field(row, ("video_path", "video"), path, where)),),
                categories={"dimension": row.get("dimension")},
                source=f"{path}:{where}",
            )
            if choices:
                options = (
                    options_from_dict(choices, path, where, "choices")
                    if isinstance(choices, dict)
                    else letter_options(choices, path, where, "choices")
                )
                items.append(
                    EvalItem(
                        **common,
                        options=options,
                        problem_type="multiple choice",
                        answer=answer_letter(answer, options, path, where),
                    )
                )
            else:
                items.append(EvalItem(**common, problem_type="open-ended", answer=str(answer)))
        return items
