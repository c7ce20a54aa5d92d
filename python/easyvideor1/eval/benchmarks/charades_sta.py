"""Charades-STA: temporal sentence grounding; R@1 at tIoU 0.3/0.5/0.7 and mIoU.

Reads the release's ``charades_sta_test.txt``: one query per line,
``<video_id> <start> <end>##<sentence>`` (seconds). Videos: ``videos/<video_id>.mp4`` (or
``Charades_v1_480/``). The model answers ``[start, end]`` in seconds.
"""

from __future__ import annotations

from pathlib import Path

from easyvideor1.eval.benchmarks.base import Benchmark, find_file, find_video, register
from easyvideor1.eval.types import AnnotationError, EvalItem


@register
class CharadesSTA(Benchmark):
    name = "charades_sta"
    title = "Charades-STA"
    category_fields = ()
    video_defaults = {"fps": 2.0, "max_frames": 64}
    annotation = "charades_sta_test.txt; videos videos/<video_id>.mp4"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(root, ("charades_sta_test.txt", "Charades_anno/charades_sta_test.txt", "*.txt"),
                         "Charades-STA annotation (charades_sta_test.txt)")
        items = []
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise AnnotationError(str(path), None, None, f"cannot read: {exc}") from None
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            head, sep, sentence = line.partition("##")
            parts = head.split()
            if not sep or len(parts) != 3 or not sentence.strip():
                raise AnnotationError(
                    str(path), number, None, "expected '<video_id> <start> <end>##<sentence>'"
                )
            try:
                start, end = float(parts[1]), float(parts[2])
            except ValueError:
                raise AnnotationError(
                    str(path), number, "start/end", f"not numbers: {parts[1]!r} {parts[2]!r}"
                ) from None
            if not 0 <= start <= end:
                raise AnnotationError(
                    str(path), number, "start/end", f"need 0 <= start <= end, got {start} {end}"
                )
            sentence = sentence.strip().rstrip(".")
            items.append(
                EvalItem(
                    benchmark=self.name,
                    id=f"{parts[0]}/{number}",
                    problem_type="temporal grounding",
                    question=f'When does "{sentence}" happen in the video?',
                    answer=[start, end],
                    videos=(find_video(root, ("videos", "Charades_v1_480", ""), parts[0]),),
                    source=f"{path}:{number}",
                )
            )
        return items

    def extra_metrics(self, records, summary) -> None:
        # The benchmark calls the mean tIoU "mIoU".
        if "iou" in summary["metrics"]:
            summary["metrics"]["mIoU"] = summary["metrics"].pop("iou")
