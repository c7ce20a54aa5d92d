"""Charades-STA: temporal sentence grounding; R@1 at tIoU 0.3/0.5/0.7 and mIoU.

Reads the release's ``charades_sta_test.txt`` (jiyanggao/TALL): one query per line,
``<video_id> <start> <end>##<sentence>`` (seconds). Videos: ``videos/<video_id>.mp4`` (or
``Charades_v1_480/``, the Charades release's folder). Item id: ``<video_id>/<line number>``
(a video has several queries). The model answers ``[start, end]`` in seconds.

Official scorer: the release has none for language models; the reference is
EvolvingLMMs-Lab/lmms-eval ``lmms_eval/tasks/charades_sta/utils.py`` (``extract_time``,
``_temporal_grounding_compute_metrics``), reproduced by :func:`official_interval` and
``official_item``: the response is lowercased, every "to" becomes "-" (inside words too), it
is split into sentences at ``!``, ``?`` and newlines, sentences with a time keyword ("start",
"end", "happen", ...) are searched (all sentences when none has one) for, in this order, an
``m:ss - m:ss`` range, a ``number - number`` range, clock times taken in pairs, the first
number of each sentence taken in pairs, and a ``12s - 15s`` range; the first pair found (its
ends ordered) is the prediction. No pair, or a response without one, scores tIoU 0. Recall
counts tIoU >= θ; mIoU is the mean tIoU. The script keys its results by video, caption and
timestamp, so of rows repeating all three only the last counts: earlier copies are left out
of the official denominator (``excluded``). A ``[start, end]`` answer (the project's prompt)
has no dash and reads as no pair officially.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from easyvideor1.eval.benchmarks.base import Benchmark, OfficialVerdict, find_file, find_video, register
from easyvideor1.eval.benchmarks.common import TIOU_THRESHOLDS
from easyvideor1.eval.types import IOU, AnnotationError, EvalItem

_KEYWORDS = ("starts", "ends", "happens in", "start time", "end time", "start", "end", "happen")
_CLOCK_RANGE = re.compile(r"\b(\d{1,2}:\d{2}(?::\d{2})?)\s*[–-]\s*(\d{1,2}:\d{2}(?::\d{2})?)\b")
_RANGE = re.compile(r"(\d+(?:\.\d+)?)\s*[–-]\s*(\d+(?:\.\d+)?)")
_NUMBER = re.compile(r"\b(\d+(?:\.\d+)?)\b")
_CLOCK = re.compile(r"\b(\d{1,2}:\d{2}(?::\d{2})?)\b")
_RANGE_SECONDS = re.compile(r"(\d+(?:\.\d+)?)\s*s?\s*[–-]\s*(\d+(?:\.\d+)?)\s*s?")
# The example the official prompt shows, removed from responses that repeat it.
_PROMPT_EXAMPLE = "a specific example is : 20.8 - 30.0 seconds"


def _seconds(clock: str) -> float:
    parts = [float(p) for p in clock.split(":")]
    return parts[0] * 3600 + parts[1] * 60 + parts[2] if len(parts) == 3 else parts[0] * 60 + parts[1]


def _pairs(values: list[float]) -> list[tuple[float, float]]:
    values = values[: len(values) // 2 * 2]
    return [(values[i], values[i + 1]) for i in range(0, len(values), 2)]


def _first_ranges(
    sentences: list[str], pattern: re.Pattern[str], value: Callable[[str], float]
) -> list[tuple[float, float]]:
    """Every (start, end) ``pattern`` finds in the first sentence where it finds any."""
    for sentence in sentences:
        if matches := pattern.findall(sentence):
            return [(value(a), value(b)) for a, b in matches]
    return []


def official_interval(response: str) -> tuple[float, float] | None:
    """lmms-eval's ``extract_time`` for Charades-STA: the first interval read, or None."""
    text = response.lower().replace(_PROMPT_EXAMPLE, "").replace("to", "-")
    sentences = re.split(r"[!?\n]", text)
    candidates = [s for s in sentences if any(k in s for k in _KEYWORDS)] or sentences
    found = _first_ranges(candidates, _CLOCK_RANGE, _seconds)
    if not found:
        found = _first_ranges(candidates, _RANGE, float)
    if not found:
        found = _pairs([_seconds(t) for s in candidates for t in _CLOCK.findall(s)])
    if not found:
        found = _pairs([float(m[0]) for s in candidates if (m := _NUMBER.findall(s))])
    if not found:
        found = _first_ranges(candidates, _RANGE_SECONDS, float)
    if not found:
        return None
    start, end = found[0]
    return (start, end) if end > start else (end, start)


def official_iou(a: tuple[float, float], b: tuple[float, float]) -> float:
    union = max(a[1], b[1]) - min(a[0], b[0])
    return 0.0 if union <= 0 else max(min(a[1], b[1]) - max(a[0], b[0]), 0) / union


@register
class CharadesSTA(Benchmark):
    name = "charades_sta"
    title = "Charades-STA"
    category_fields = ()
    video_defaults = {"fps": 2.0, "max_frames": 64}
    annotation = "charades_sta_test.txt; videos videos/<video_id>.mp4"
    protocol_version = 3
    official_source = "EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/charades_sta/utils.py"
    # Both compare the per-item tIoU (the summary calls its mean mIoU).
    strict_metric = "mIoU"  # the summary renames the mean tIoU
    official_item_metric = "iou"

    def load(self, root: Path) -> list[EvalItem]:
        path = find_file(
            root,
            ("charades_sta_test.txt", "Charades_anno/charades_sta_test.txt", "*.txt"),
            "Charades-STA annotation (charades_sta_test.txt)",
        )
        items = []
        last: dict[tuple, int] = {}  # (video, sentence, start, end) -> index of its last row
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
            key = (parts[0], sentence, start, end)
            if key in last:
                items[last[key]].meta["superseded_by"] = f"{parts[0]}/{number}"
            last[key] = len(items)
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

    def official_item(
        self, item: EvalItem, response: str, ctx: Any, metas: Sequence[Any] = ()
    ) -> OfficialVerdict:
        if item.meta.get("superseded_by"):
            return OfficialVerdict(
                excluded="repeats a later row's video, caption and timestamp (the script keeps the last)"
            )
        interval = official_interval(response)
        value = official_iou(tuple(item.answer), interval) if interval else 0.0
        return OfficialVerdict(
            values={"iou": value, **{f"R@{t}": float(value >= t) for t in TIOU_THRESHOLDS}},
            extracted=list(interval) if interval else None,
            note=None if interval else "no 'start - end' pair the official reader accepts",
        )

    def official_summary(
        self, records: list[dict[str, Any]], summary: dict[str, Any]
    ) -> dict[str, Any] | None:
        counted = [r["official"]["values"] for r in records if not r["official"].get("excluded")]
        if not counted:
            return None
        means = {name: sum(v[name] for v in counted) / len(counted) for name in counted[0]}
        recalls = {name: {"value": v, "n": len(counted)} for name, v in means.items() if name != "iou"}
        return {"metric": "mIoU", "kind": IOU, "value": means["iou"], "n": len(counted), "also": recalls}
