"""STVG (HC-STVG style): find when and where the described person is; m_tIoU and m_vIoU.

Reads ``test.json`` / ``test_v2.json`` / ``val_v2.json`` (or another ``*.json``): an
object keyed by video file name, each ``{"English": sentence, "st_time", "ed_time"
(seconds), "bbox": [[x, y, w, h], ...] (one box per annotated frame from start to end)}``.
Videos: ``videos/<key>``. Boxes are spread evenly over [st_time, ed_time].

The prompt lists the times of the frames the model sees; the answer is
``{"time": [s, e], "boxes": {"<t>": [x1, y1, x2, y2]}}`` in source pixels. Per item:
tIoU, vIoU over those frames (common.viou), and vIoU >= 0.3 / 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import Benchmark, field, find_file, find_video, read_records, register
from easyvideor1.eval.benchmarks.common import parse_tube, viou
from easyvideor1.eval.types import IOU, AnnotationError, EvalItem, ItemScore
from easyvideor1.rewards.extract import extract_answer
from easyvideor1.video.metadata import VideoMetadata

THRESHOLDS = (0.3, 0.5)


@register
class STVG(Benchmark):
    name = "stvg"
    title = "STVG (HC-STVG)"
    category_fields = ()
    video_defaults = {"fps": 2.0, "max_frames": 32}
    annotation = "test.json / test_v2.json (HC-STVG layout); videos videos/<key>"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("test.json", "test_v2.json", "val_v2.json", "anno/test.json", "*.json"),
                         "HC-STVG annotation")
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
            sentence = field(row, "English", path, where).strip().rstrip(".")
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
