"""MVBench: 20 temporal tasks, multiple choice.

Source: the benchmark's own evaluation, OpenGVLab/Ask-Anything ``video_chat2/mvbench.ipynb``
(its ``data_list``, ``MVBench_dataset``, ``check_ans`` and the final ``Avg``); lmms-eval's
``lmms_eval/tasks/mvbench/utils.py`` (``DATA_LIST``) for the Hugging Face ``video`` branch.

Release (Hugging Face ``OpenGVLab/MVBench``): ``json/<task>.json`` (one file per task, a list
of ``{"video", "question", "candidates", "answer"}``, the answer being the text of the right
candidate, plus ``start``/``end`` in seconds for the four bounded tasks) and, on ``main``,
``video/<source>.zip`` archives that extract to ``video/<source>/...``. The same file name
occurs in several sources (``video_10849.mp4`` is in ``perception/videos`` for
``action_count`` and elsewhere for other tasks), so a row's video is looked up only in its
task's folder, as the official ``data_list`` maps it (``TASK_FOLDERS``): first
``video/<folder>/<video>`` (main layout), then ``video/data0613/<folder>/`` (the replacement
archive of the 2024-06 fix), then the ``video`` branch's folders at the root (or under
``video/``): ``star/Charades_segment``, ``sta/sta_video_segment``,
``tvqa/video_fps3_hq_segment``, ``ssv2_video_mp4``, ``nturgbd_convert`` and the unchanged ones;
last ``video/<video>`` (a flat folder holding one source). A video found nowhere is not
searched for by name elsewhere: the item fails as a media failure naming the task's path.

Bounds: in the main layout, rows with ``start``/``end`` are sampled within the bound only, as
the notebook's ``get_index(bound, ...)`` does (``EvalItem.clip``; the protocol's 16 frames
spread over the bound, a bound past the video's end clamped, timestamps those of the source
video; a negative start counts as 0; a row whose end is not after its start has no usable
bound, its frames span the whole video and the report counts such rows). Videos found in a
``*_segment`` folder of the ``video`` branch are already cut to the bound, so no bound is
applied to them (as lmms-eval does). ``episodic_reasoning`` is a folder of frames at 3 fps
in the main layout (``tvqa/frames_fps3_hq/<video>/``): it must be given as the ``video``
branch's mp4 segments.

Official score (``check_ans``): the answer is the first line of the response; its first
space-separated word, lower-cased and without ``.``, is a match when it is a substring of the
ground truth's ``(x)`` label, or the label is a substring of it. So ``B``, ``(B)``, ``B.``,
``b`` and ``(B) text`` match ``(b)``; ``The answer is B`` and ``<answer>B</answer>`` do not,
and an empty answer *does* (the empty string is in every label): the official Avg counts it
right. The notebook prefills ``Best option:(``; the prompt here does not, so the response
is read as the model gives it. ``Avg`` pools every item (correct / total over all tasks).
The strict metric is the rewards reader, with ``task_mean_accuracy`` (the mean over tasks)
beside it.
Item ids: ``<task>/<row index>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    LETTERS,
    Benchmark,
    OfficialVerdict,
    answer_letter,
    field,
    find_files,
    letter_options,
    read_records,
    register,
)
from easyvideor1.eval.benchmarks.common import macro_mean
from easyvideor1.eval.benchmarks.official_groups import mean_with_group_means
from easyvideor1.eval.types import AnnotationError, EvalItem
from easyvideor1.video.metadata import VideoMetadata

# task -> (folder of the notebook's data_list / main layout, folder of the `video` branch).
TASK_FOLDERS = {
    "action_sequence": ("star/Charades_v1_480", "star/Charades_segment"),
    "action_prediction": ("star/Charades_v1_480", "star/Charades_segment"),
    "action_antonym": ("ssv2_video", "ssv2_video_mp4"),
    "fine_grained_action": ("Moments_in_Time_Raw/videos", "Moments_in_Time_Raw/videos"),
    "unexpected_action": ("FunQA_test/test", "FunQA_test/test"),
    "object_existence": ("clevrer/video_validation", "clevrer/video_validation"),
    "object_interaction": ("star/Charades_v1_480", "star/Charades_segment"),
    "object_shuffle": ("perception/videos", "perception/videos"),
    "moving_direction": ("clevrer/video_validation", "clevrer/video_validation"),
    "action_localization": ("sta/sta_video", "sta/sta_video_segment"),
    "scene_transition": ("scene_qa/video", "scene_qa/video"),
    "action_count": ("perception/videos", "perception/videos"),
    "moving_count": ("clevrer/video_validation", "clevrer/video_validation"),
    "moving_attribute": ("clevrer/video_validation", "clevrer/video_validation"),
    "state_change": ("perception/videos", "perception/videos"),
    "fine_grained_pose": ("nturgbd", "nturgbd_convert"),
    "character_order": ("perception/videos", "perception/videos"),
    "egocentric_navigation": ("vlnqa", "vlnqa"),
    "episodic_reasoning": ("tvqa/frames_fps3_hq", "tvqa/video_fps3_hq_segment"),
    "counterfactual_inference": ("clevrer/video_validation", "clevrer/video_validation"),
}


def video_candidates(root: Path, task: str, video: str) -> list[tuple[Path, bool]]:
    """Where ``video`` of ``task`` may lie, in lookup order, each with whether it is a whole
    source video (bounds apply) rather than a pre-cut segment."""
    main, branch = TASK_FOLDERS[task]
    name = video.strip().lstrip("/")
    out = [(root / "video" / main / name, True), (root / "video" / "data0613" / main / name, True)]
    for base in (root, root / "video"):
        out.append((base / branch / name, not branch.endswith("_segment")))
    if main != branch:
        out.append((root / main / name, True))
    out.append((root / "video" / name, True))  # a flat video/ folder (one source, no name clashes)
    return out


def find_task_video(root: Path, task: str, video: str) -> tuple[str, bool]:
    """(path, whole source video?) of the first candidate that exists; a missing video gives
    the first candidate (the item then fails as a media failure and stays counted)."""
    candidates = video_candidates(root, task, video)
    for path, whole in candidates:
        if path.is_file():
            return str(path), whole
    return str(candidates[0][0]), True


def check_ans(response: str, gt_label: str) -> tuple[bool, str]:
    """The notebook's ``check_ans`` on the response's first line: (match, the word compared)."""
    lines = response.strip().split("\n")
    pred_option = lines[0].lower().split(" ")[0].replace(".", "")
    gt_option = gt_label.lower().split(" ")[0]
    return pred_option in gt_option or gt_option in pred_option, pred_option


@register
class MVBench(Benchmark):
    name = "mvbench"
    protocol_version = 3  # task -> folder video lookup; official check_ans (2026-12)
    title = "MVBench"
    category_fields = ("task",)
    video_defaults = {"fps": 2.0, "max_frames": 16, "min_frames": 16}
    annotation = "json/<task>.json; videos video/<task's source folder>/<video>"
    official_source = "OpenGVLab/Ask-Anything video_chat2/mvbench.ipynb (check_ans, Avg)"

    def load(self, root: Path) -> list[EvalItem]:
        items = []
        empty_bounds = 0
        for path in find_files(root, ("json/*.json",), "MVBench task files (json/<task>.json)"):
            task = path.stem
            if task not in TASK_FOLDERS:
                raise AnnotationError(
                    str(path),
                    None,
                    None,
                    f"unknown MVBench task {task!r}: its video folder is unknown (known tasks: "
                    f"{', '.join(sorted(TASK_FOLDERS))})",
                )
            for where, row in read_records(path):
                candidates = field(row, "candidates", path, where, list)
                options = letter_options(candidates, path, where, "candidates")
                answer = field(row, "answer", path, where, (str, int))
                letter = answer_letter(answer, options, path, where)
                video, whole = find_task_video(root, task, field(row, "video", path, where))
                bounds = {k: row[k] for k in ("start", "end") if row.get(k) is not None}
                clip = _clip(row, path, where) if whole else None
                empty_bounds += bool(bounds) and whole and clip is None
                items.append(
                    EvalItem(
                        benchmark=self.name,
                        id=f"{task}/{where.split()[-1]}",
                        question=field(row, "question", path, where),
                        options=options,
                        problem_type="multiple choice",
                        answer=letter,
                        videos=(video,),
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

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> OfficialVerdict:
        # The notebook's ground truth as check_ans sees it: "(B) Stood up.".
        letter, text = item.answer, item.options[LETTERS.index(item.answer)].split(".", 1)[-1].strip()
        correct, word = check_ans(response, f"({letter}) {text}")
        note = None
        if not response.strip():
            note = "the official check_ans counts an empty answer as right (an empty word is in every label)"
        elif word.startswith("<"):
            note = "the official check_ans reads the first word only: a tagged answer is not read"
        return OfficialVerdict(values={"accuracy": float(correct)}, extracted=word or None, note=note)

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        return mean_with_group_means(records, "task", name="Avg")


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
