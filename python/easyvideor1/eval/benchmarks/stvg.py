"""STVG (HC-STVG): find when and where the described person is; m_tIoU and m_vIoU.

Release: tzhhhh123/HC-STVG. Reads ``test.json`` (v1) / ``test_v2.json`` / ``val_v2.json`` (v2)
(or another ``*.json``): an object keyed by video file name (the item id), each with the
sentence (``caption`` in v1, ``English`` in v2), ``st_time`` / ``ed_time`` (seconds),
``st_frame`` and ``bbox``: ``[[x, y, w, h], ...]``, one box per frame from start to end (v1
also has ``img_num``, ``width``, ``height``; v2 ``ed_frame``, ``img_hw``, ...). Videos:
``videos/<key>``. Boxes are spread evenly over [st_time, ed_time].

The prompt lists the times of the frames the model sees; the answer is
``{"time": [s, e], "boxes": {"<t>": [x1, y1, x2, y2]}}`` in source pixels. Per item:
tIoU, vIoU over those frames (common.viou), and vIoU >= 0.3 / 0.5.

Official scorer: tzhhhh123/HC-STVG ``eval_hcvg.py`` (``hcvg_eval``). It scores per-frame
predictions: over the frames from the earlier start to the later end (both intervals, ends
included), tIoU is the share of ground-truth frames that have a predicted box and vIoU the sum
of those frames' box IoUs over the same count; vIoU@0.3 / @0.5 count vIoU **>** θ (the
project counts >=). A language model predicts boxes at the frames it saw, so
``official_item`` applies that rule to the sampled frames (a predicted box counts for a frame
within half a frame step): an adaptation of the script, whose per-frame predictions a
generated answer does not have. The answer is read as the project reads it (the script has
no text reader).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import (
    Benchmark,
    OfficialVerdict,
    field,
    find_file,
    find_video,
    read_records,
    register,
)
from easyvideor1.eval.benchmarks.common import parse_tube, viou
from easyvideor1.eval.types import IOU, AnnotationError, EvalItem, ItemScore
from easyvideor1.rewards.extract import extract_answer
from easyvideor1.rewards.geometry import box_iou
from easyvideor1.video.metadata import VideoMetadata

THRESHOLDS = (0.3, 0.5)


@register
class STVG(Benchmark):
    name = "stvg"
    title = "STVG (HC-STVG)"
    category_fields = ()
    video_defaults = {"fps": 2.0, "max_frames": 32}
    annotation = "test.json / test_v2.json (HC-STVG layout); videos videos/<key>"
    protocol_version = 3
    official_source = "tzhhhh123/HC-STVG eval_hcvg.py"
    strict_metric = "viou"
    official_item_metric = "viou"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root,
            ("test.json", "test_v2.json", "val_v2.json", "anno/test.json", "*.json"),
            "HC-STVG annotation",
        )
        items = []
        for where, row in read_records(path):
            key = field(row, "__key__", path, where)
            start = field(row, "st_time", path, where, float)
            end = field(row, "ed_time", path, where, float)
            boxes = field(row, "bbox", path, where, list)
            if not 0 <= start <= end:
                raise AnnotationError(
                    str(path), where, "st_time/ed_time", f"need 0 <= start <= end, got {start} {end}"
                )
            step = (end - start) / max(1, len(boxes) - 1)
            track = {}
            for index, box in enumerate(boxes):
                if not (
                    isinstance(box, list)
                    and len(box) == 4
                    and all(isinstance(v, int | float) for v in box)
                    and box[2] > 0
                    and box[3] > 0
                ):
                    raise AnnotationError(
                        str(path),
                        where,
                        f"bbox[{index}]",
                        f"expected [x, y, w, h] with w, h > 0, got {box!r}",
                    )
                x, y, w, h = box
                track[f"{start + index * step:.3f}"] = [x, y, x + w, y + h]
            sentence = field(row, ("English", "caption"), path, where).strip().rstrip(".")
            items.append(
                EvalItem(
                    benchmark=self.name,
                    id=key,
                    problem_type="spatial-temporal grounding",
                    question=f'Find the person described: "{sentence}".',
                    answer={"time": [start, end], "boxes": track},
                    videos=(find_video(root, ("videos", ""), key),),
                    source=f"{path}:{where}",
                )
            )
        return items

    def answer_hint(self, item: EvalItem, metas: Sequence[VideoMetadata]) -> str | None:
        if not metas:
            return None
        meta = metas[0]
        times = ", ".join(f"{t:.2f}" for t in meta.timestamps)
        return (
            f"The frames shown are at these times (seconds): {times}. Frame size: {meta.source_width}x"
            f'{meta.source_height} pixels. Answer as JSON: {{"time": [start, end], "boxes": '
            f'{{"<time>": [x1, y1, x2, y2], ...}}}} with a box for each shown frame inside [start, end].'
        )

    def metrics_for(self, item: EvalItem, ctx: Any) -> dict[str, str]:
        return {"tiou": IOU, "viou": IOU, **{f"vIoU@{t}": IOU for t in THRESHOLDS}}

    def score(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> ItemScore:
        extracted = extract_answer(response).text
        interval, boxes = parse_tube(extracted)
        truth = item.answer
        gt_boxes = {float(t): tuple(b) for t, b in truth["boxes"].items()}
        times = list(metas[0].timestamps) if metas else sorted(gt_boxes)
        tiou, v = viou(interval, boxes, tuple(truth["time"]), gt_boxes, times)
        values = {"tiou": tiou, "viou": v, **{f"vIoU@{t}": float(v >= t) for t in THRESHOLDS}}
        return ItemScore(values, {"time": interval, "boxes": len(boxes)}, {"extracted": extracted})

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[VideoMetadata] = ()
    ) -> OfficialVerdict:
        interval, boxes = parse_tube(extract_answer(response).text)
        truth = item.answer
        gt_boxes = {float(t): tuple(b) for t, b in truth["boxes"].items()}
        times = list(metas[0].timestamps) if metas else sorted(gt_boxes)
        tiou, v = official_frames(interval, boxes, tuple(truth["time"]), gt_boxes, times)
        return OfficialVerdict(
            values={"tiou": tiou, "viou": v, **{f"vIoU@{t}": float(v > t) for t in THRESHOLDS}},
            extracted={"time": interval, "boxes": len(boxes)},
            note="the official rule: predicted boxes per frame over the span of both intervals, vIoU > θ",
        )


def official_frames(pred_interval, pred_boxes, gt_interval, gt_boxes, frame_times) -> tuple[float, float]:
    """``hcvg_eval`` on the sampled frames: (tIoU, vIoU). No predicted interval: (0, 0), as a
    video missing from the predictions."""
    if pred_interval is None or not frame_times:
        return 0.0, 0.0
    step = min((b - a for a, b in zip(frame_times, frame_times[1:]) if b > a), default=1.0)
    low, high = min(pred_interval[0], gt_interval[0]), max(pred_interval[1], gt_interval[1])
    span = [t for t in frame_times if low - 1e-6 <= t <= high + 1e-6]
    if not span or not gt_boxes:
        return 0.0, 0.0
    ious = []
    for t in frame_times:
        if not gt_interval[0] - 1e-6 <= t <= gt_interval[1] + 1e-6:
            continue
        near = [k for k in pred_boxes if abs(k - t) <= step / 2 + 1e-6]
        if near:
            truth = gt_boxes[min(gt_boxes, key=lambda k: abs(k - t))]
            ious.append(box_iou(pred_boxes[min(near, key=lambda k: abs(k - t))], truth))
    return len(ious) / len(span), sum(ious) / len(span)
