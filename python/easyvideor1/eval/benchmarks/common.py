"""Shared scoring and aggregation: every adapter builds on these.

Scoring goes through the rewards library (``rewards.score``), so evaluation and training
read answers the same way. Per item an adapter returns metric values; a benchmark's
numbers are means of those values over *all* its items, failed ones included as 0.
Recall at tIoU thresholds is a per-item 0/1 value, so R@0.5 is a mean like any other.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from easyvideor1.config.schema import RewardConfig
from easyvideor1.eval.benchmarks.official import differences, official_block, strict_block
from easyvideor1.eval.types import ACCURACY, COMPOSITE, IOU, MRA, TEXT, EvalItem, ItemScore
from easyvideor1.rewards import ScoreRequest, canonical_problem_type, score
from easyvideor1.rewards.geometry import GeometryError, as_box, as_interval, box_iou, interval_iou
from easyvideor1.rewards.parsing import normalize_text, parse_jsonish

TIOU_THRESHOLDS = (0.3, 0.5, 0.7)
_ACCURACY_TYPES = ("multiple choice", "boolean", "numerical", "math", "ocr")
_IOU_TYPES = ("spatial grounding", "tracking", "spatial-temporal grounding")

# Direct-style instructions: the benchmark's own question plus one line on the answer form.
INSTRUCTIONS = {
    "multiple choice": "Answer with the letter of the correct option only.",
    "boolean": "Answer yes or no.",
    "numerical": "Answer with a single number.",
    "regression": "Answer with a single number.",
    "math": "Give only the final answer.",
    "ocr": "Answer with the text only.",
    "temporal grounding": "Give the start and end of that moment in seconds as [start, end].",
    "open-ended": "Answer concisely.",
    "spatial grounding": "Give the box as [x1, y1, x2, y2] in pixels.",
    "tracking": 'Give the boxes as {"<seconds>": [x1, y1, x2, y2], ...}.',
    "spatial-temporal grounding": (
        'Answer as {"time": [start, end], "boxes": {"<seconds>": [x1, y1, x2, y2], ...}}.'
    ),
}


class ScoringFailure(Exception):
    """A response could not be scored (judge unreachable, scorer error): a scoring failure."""


@dataclass
class ScoringContext:
    """What scoring needs besides the response: the judge (if any) and the reward config."""

    judge: dict[str, Any] | None = None
    reward_config: RewardConfig = field(default_factory=RewardConfig)

    @property
    def text_metric(self) -> str:
        return "judge_score" if self.judge else "rouge"


def media_prefix(item: EvalItem) -> str:
    """Placeholders for the item's media, unless its question already places them."""
    if item.meta.get("has_placeholders"):
        return ""
    return "<image>\n" * len(item.images) + "<video>\n" * len(item.videos)


def default_prompt(item: EvalItem, style: str, renderer: Any = None, *, hint: str | None = None) -> str:
    """``direct``: question, options, one instruction line; ``reasoning``: the training templates."""
    pt = canonical_problem_type(item.problem_type)
    if style == "reasoning":
        problem = media_prefix(item) + item.question + (f"\n{hint}" if hint else "")
        fields = {
            "problem": problem,
            "problem_type": pt,
            "videos": list(item.videos),
            "images": list(item.images),
        }
        if item.options:
            fields["options"] = list(item.options)
        return renderer.render(fields)
    lines = [item.question.strip()]
    if item.options:
        lines.extend(item.options)
    lines.append(hint or INSTRUCTIONS.get(pt, "Answer concisely."))
    return media_prefix(item) + "\n".join(lines)


def default_metrics(item: EvalItem, ctx: ScoringContext) -> dict[str, str]:
    """Metric name -> kind for one item (failed items get 0 for each)."""
    pt = canonical_problem_type(item.problem_type)
    if pt in _ACCURACY_TYPES:
        return {"accuracy": ACCURACY}
    if pt == "regression":
        return {"mra": MRA}
    if pt == "temporal grounding":
        return {"iou": IOU, **{f"R@{t}": IOU for t in TIOU_THRESHOLDS}}
    if pt in _IOU_TYPES:
        return {"iou": IOU}
    if pt == "open-ended" and item.meta.get("open") == "generation":
        return {ctx.text_metric: TEXT}
    return {"accuracy": ACCURACY}


def ground_truth_text(answer: Any) -> str:
    return answer if isinstance(answer, str) else json.dumps(answer)


def reward(
    item: EvalItem,
    response: str,
    ctx: ScoringContext,
    problem_type: str | None = None,
    answer: Any = None,
    options: Sequence[str] | None = None,
    config: RewardConfig | None = None,
):
    """``rewards.score`` for this item; a scorer error becomes :class:`ScoringFailure`."""
    request = ScoreRequest(
        response=response,
        ground_truth=ground_truth_text(item.answer if answer is None else answer),
        problem_type=problem_type or item.problem_type,
        options=tuple(options) if options is not None else item.options,
        problem=item.question,
    )
    result = score(request, config or ctx.reward_config)
    if result.error:
        raise ScoringFailure(f"{result.problem_type} scorer: {result.error}")
    return result


def prediction_of(details: dict[str, Any]) -> Any:
    return details.get("pred", details.get("extracted"))


def default_score(item: EvalItem, response: str, ctx: ScoringContext) -> ItemScore:
    pt = canonical_problem_type(item.problem_type)
    if pt == "open-ended":
        return score_open(item, response, ctx)
    result = reward(item, response, ctx, pt)
    value = result.accuracy
    if pt == "temporal grounding":
        values = {"iou": value, **{f"R@{t}": float(value >= t) for t in TIOU_THRESHOLDS}}
    else:
        values = {name: value for name in default_metrics(item, ctx)}
    return ItemScore(values, prediction_of(result.details), result.details)


def score_open(item: EvalItem, response: str, ctx: ScoringContext, reference: str | None = None) -> ItemScore:
    """Open-ended answers: the LLM judge when configured, else the rule-based fallback.

    QA items (``meta["open"] != "generation"``) are right or wrong: a judge score >= 0.5
    counts as correct; without a judge, only a normalised exact match (or an equal number)
    does. Generation items (captions, summaries) keep the judge's score, or ROUGE as the
    fallback; the metric name says which, so runs scored differently are never mixed.
    """
    reference = reference if reference is not None else ground_truth_text(item.answer)
    generation = item.meta.get("open") == "generation"
    if ctx.judge:
        config = RewardConfig(
            scorer_options={"open-ended": {"judge": ctx.judge}}, timeout_s=ctx.reward_config.timeout_s
        )
        result = reward(item, response, ctx, "open-ended", reference, config=config)
        judged = result.accuracy
        values = {"judge_score": judged} if generation else {"accuracy": float(judged >= 0.5)}
        return ItemScore(
            values,
            result.details.get("extracted"),
            {**result.details, "judge_score": judged},
            scoring="judge",
        )
    result = reward(item, response, ctx, "open-ended", reference)
    extracted = result.details.get("extracted")
    if generation:
        return ItemScore({"rouge": result.accuracy}, extracted, result.details, scoring="fallback")
    correct = result.details.get("method") == "exact_match" or _same_number(extracted, reference)
    return ItemScore({"accuracy": float(correct)}, extracted, result.details, scoring="fallback")


def _same_number(prediction: str | None, reference: str) -> bool:
    from easyvideor1.rewards.numbers import parse_number

    if not prediction:
        return False
    a, b = parse_number(prediction).value, parse_number(reference).value
    return a is not None and b is not None and a == b


# ---- spatio-temporal grounding (STVG): m_tIoU and m_vIoU over the sampled frames ------------


def parse_tube(text: str | None) -> tuple[tuple[float, float] | None, dict[float, tuple]]:
    """``({"time": [s, e], "boxes": {"t": box}})`` -> (interval or None, {t: box}); invalid parts drop."""
    if not text:
        return None, {}
    try:
        value = parse_jsonish(text)
    except ValueError:
        return None, {}
    if not isinstance(value, dict):
        return None, {}
    interval = None
    try:
        interval = as_interval(value.get("time"))
    except GeometryError:
        pass
    boxes: dict[float, tuple] = {}
    raw = value.get("boxes")
    if isinstance(raw, dict):
        for key, box in raw.items():
            try:
                t = float(key)
                boxes[t] = as_box(box)
            except (GeometryError, TypeError, ValueError):
                continue
    return interval, boxes


def viou(
    pred_interval,
    pred_boxes: dict[float, tuple],
    gt_interval,
    gt_boxes: dict[float, tuple],
    frame_times: Sequence[float],
) -> tuple[float, float]:
    """(tIoU, vIoU) on the frames the model saw.

    vIoU = (1/|T_u|) Σ_{t ∈ T_i} IoU(pred_t, gt_t), where T_u (T_i) are the sampled frame
    times inside the union (intersection) of the predicted and true intervals; gt_t is the
    annotated box nearest to t and pred_t the predicted box nearest to t within half a frame
    step (none: IoU 0).
    """
    tiou = interval_iou(pred_interval, gt_interval) if pred_interval else 0.0
    if not frame_times:
        return tiou, 0.0
    step = min((b - a for a, b in zip(frame_times, frame_times[1:]) if b > a), default=1.0)

    def inside(t: float, interval) -> bool:
        return interval is not None and interval[0] - 1e-6 <= t <= interval[1] + 1e-6

    union = [t for t in frame_times if inside(t, gt_interval) or inside(t, pred_interval)]
    both = [t for t in frame_times if inside(t, gt_interval) and inside(t, pred_interval)]
    if not union or not gt_boxes:
        return tiou, 0.0
    total = 0.0
    for t in both:
        truth = gt_boxes[min(gt_boxes, key=lambda k: abs(k - t))]
        near = [k for k in pred_boxes if abs(k - t) <= step / 2 + 1e-6]
        if near:
            total += box_iou(pred_boxes[min(near, key=lambda k: abs(k - t))], truth)
    return tiou, total / len(union)


# ---- aggregation ----------------------------------------------------------------------------


def mean_metrics(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per metric name: ``{"kind", "value", "n"}`` (mean over the records that have it)."""
    sums: dict[str, float] = defaultdict(float)
    counts: Counter = Counter()
    kinds: dict[str, str] = {}
    for record in records:
        for name, value in (record.get("values") or {}).items():
            sums[name] += float(value)
            counts[name] += 1
            kinds[name] = (record.get("kinds") or {}).get(name, ACCURACY)
    return {
        name: {"kind": kinds[name], "value": sums[name] / counts[name], "n": counts[name]}
        for name in sorted(sums, key=_metric_order)
    }


def _metric_order(name: str) -> tuple[int, str]:
    return (0 if name in ("accuracy", "iou", "mra") else 1, name)


def by_category(records: Sequence[dict[str, Any]], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in fields:
        groups: dict[str, list] = defaultdict(list)
        for record in records:
            value = (record.get("categories") or {}).get(name)
            for member in value if isinstance(value, list) else [value]:
                if member is not None and member != "":
                    groups[str(member)].append(record)
        if groups:
            out[name] = {key: mean_metrics(group) for key, group in sorted(groups.items())}
    return out


def summarize(bench: Any, records: list[dict[str, Any]], ctx: ScoringContext) -> dict[str, Any]:
    failed = [r for r in records if r.get("status") != "ok"]
    summary = {
        "benchmark": bench.name,
        "title": bench.title,
        "n": len(records),
        "n_ok": len(records) - len(failed),
        "n_failed": len(failed),
        "failures_by_kind": dict(Counter(r["failure"]["kind"] for r in failed)),
        "failures": [
            {"id": r["id"], "kind": r["failure"]["kind"], "message": r["failure"]["message"]} for r in failed
        ],
        "scoring": dict(Counter(r.get("scoring") for r in records if r.get("status") == "ok")),
        "metrics": mean_metrics(records),
        "categories": by_category(records, bench.category_fields),
        "notes": list(getattr(bench, "load_notes", [])),
    }
    if bench.needs_judge and not ctx.judge:
        summary["notes"].append(
            "no LLM judge configured: the strict metric scored open-ended items by the rule-based "
            "fallback (exact match for QA, ROUGE for generation)"
        )
    bench.extra_metrics(records, summary)
    summary["strict"] = strict_block(bench, summary)
    summary["official"] = official_block(bench, records, summary)
    summary["differences"] = differences(bench, records)
    return summary


def macro_mean(
    summary: dict[str, Any],
    category: str,
    metric: str,
    *,
    name: str,
    kind: str = ACCURACY,
    members: Sequence[str] | None = None,
) -> None:
    """Add ``name``: the unweighted mean of ``metric`` over the values of ``category``."""
    groups = summary["categories"].get(category, {})
    keys = [k for k in (members or groups) if k in groups and metric in groups[k]]
    if keys:
        values = [groups[k][metric]["value"] for k in keys]
        summary["metrics"][name] = {
            "kind": kind,
            "value": sum(values) / len(values),
            "n": len(keys),
            "over": keys,
        }


def composite(summary: dict[str, Any], name: str, parts: dict[str, float]) -> None:
    finite = {k: v for k, v in parts.items() if v is not None and math.isfinite(v)}
    if finite:
        summary["metrics"][name] = {
            "kind": COMPOSITE,
            "value": sum(finite.values()) / len(finite),
            "n": len(finite),
            "over": sorted(finite),
        }


def is_generation(item: EvalItem) -> bool:
    return item.meta.get("open") == "generation"


def normalized(text: str) -> str:
    return normalize_text(text)
