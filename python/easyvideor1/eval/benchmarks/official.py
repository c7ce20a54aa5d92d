"""The official metric of a benchmark, reported beside the project's strict one.

Every report carries two numbers per benchmark:

* ``strict``: the project's metric (``summary["metrics"]``): every item in the denominator,
  failures and unparseable answers wrong, the rewards library's extraction;
* ``official``: what the benchmark's own script computes from the same responses, quirks
  included: its answer extraction, what it leaves out of the denominator, how it averages
  sub-tasks. This is the number to put beside published scores.

An adapter states the script it reproduces (``official_source``) and implements
:meth:`Benchmark.official_item` (one response -> :class:`OfficialVerdict`), and, where the script
does more than a mean over items, :meth:`Benchmark.official_summary`. An item without a response
(a media, prompt, engine or timeout failure) is given to the official rule as an empty response,
since the official script would see no usable answer for it.

The report also counts, per benchmark, the items the two metrics treat differently and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from easyvideor1.eval.types import ACCURACY

NEEDS_JUDGE = "needs judge"


@dataclass
class OfficialVerdict:
    """The official script's reading of one response.

    ``values``: official metric name -> value (0/1 for accuracy). ``extracted``: what the
    official extraction read from the response (None: nothing). ``excluded``: why the
    official script leaves this item out of its denominator (None: it counts). ``needs_judge``:
    the official score of this item comes from an LLM judge and none is configured.
    ``note``: why the official reading differs from the project's, when it can say so.
    """

    values: dict[str, float] = field(default_factory=dict)
    extracted: Any = None
    excluded: str | None = None
    needs_judge: bool = False
    note: str | None = None
    not_reproduced: bool = False  # the adapter has no official rule (a user's own adapter)

    def as_record(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, False, {})}


def official_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records' official verdicts (those written before official scoring have none)."""
    return [r["official"] for r in records if isinstance(r.get("official"), dict)]


def mean_official(
    records: Sequence[dict[str, Any]],
    metric: str = "accuracy",
    *,
    kind: str = ACCURACY,
    name: str | None = None,
) -> dict[str, Any] | None:
    """The mean of one official value over the records the official script counts."""
    counted = [
        o["values"][metric]
        for o in official_records(records)
        if not o.get("excluded") and not o.get("needs_judge") and metric in (o.get("values") or {})
    ]
    if not counted:
        return None
    return {"metric": name or metric, "kind": kind, "value": sum(counted) / len(counted), "n": len(counted)}


def grouped_official_mean(
    records: Sequence[dict[str, Any]],
    category: str,
    metric: str = "accuracy",
    *,
    members: Sequence[str] | None = None,
    name: str | None = None,
    kind: str = ACCURACY,
) -> dict[str, Any] | None:
    """The unweighted mean over the groups of ``category`` of each group's official mean (how
    scripts that average per task report their overall score); the groups' means ride along."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        value = (record.get("categories") or {}).get(category)
        for member in value if isinstance(value, list) else [value]:
            if member is not None and member != "":
                groups.setdefault(str(member), []).append(record)
    wanted = [g for g in (members or sorted(groups)) if g in groups]
    means = {g: mean_official(groups[g], metric, kind=kind) for g in wanted}
    means = {g: m for g, m in means.items() if m is not None}
    if not means:
        return None
    return {
        "metric": name or f"{metric} (mean over {category})",
        "kind": kind,
        "value": sum(m["value"] for m in means.values()) / len(means),
        "n": sum(m["n"] for m in means.values()),
        "over": {g: round(m["value"], 6) for g, m in means.items()},
    }


def official_block(bench: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """``summary["official"]``: the adapter's official score, its source and the item counts."""
    verdicts = official_records(records)
    block: dict[str, Any] = {
        "source": bench.official_source or None,
        "excluded": sum(1 for o in verdicts if o.get("excluded")),
        "excluded_why": dict(Counter(o["excluded"] for o in verdicts if o.get("excluded"))),
    }
    if len(verdicts) < len(records):
        block["status"] = "incomplete"
        block["message"] = (
            f"{len(records) - len(verdicts)} record(s) carry no official verdict "
            "(recorded before official scoring existed): re-run without --resume"
        )
        return block
    if any(o.get("not_reproduced") for o in verdicts):
        block["status"] = "not reproduced"
        block["message"] = f"adapter {bench.name!r} implements no official scorer: only the strict metric"
        return block
    judged = sum(1 for o in verdicts if o.get("needs_judge"))
    if judged:
        block["status"] = NEEDS_JUDGE
        block["message"] = (
            f"{judged} item(s) are scored by an LLM judge in the official protocol and no judge "
            "is configured (--judge-url): no official score"
        )
        return block
    headline = bench.official_summary(records, summary)
    if headline is None:
        block["status"] = "no items"
        return block
    block.update(status="ok", **headline)
    return block


def strict_block(bench: Any, summary: dict[str, Any]) -> dict[str, Any] | None:
    """``summary["strict"]``: the project's headline metric (every item counted)."""
    metrics = summary.get("metrics") or {}
    name = bench.strict_metric if bench.strict_metric in metrics else next(iter(metrics), None)
    if name is None:
        return None
    m = metrics[name]
    return {"metric": name, "kind": m["kind"], "value": m["value"], "n": m["n"]}


def _compared(record: dict[str, Any], official: dict[str, Any], bench: Any) -> list[tuple[float, float]]:
    """The (strict, official) value pairs of one item: every metric both name, else the two
    per-item headlines."""
    strict_values, official_values = record.get("values") or {}, official.get("values") or {}
    shared = [name for name in strict_values if name in official_values]
    if shared:
        return [(float(strict_values[n]), float(official_values[n])) for n in shared]
    a, b = strict_values.get(bench.strict_metric), official_values.get(bench.official_item_metric)
    return [] if a is None or b is None else [(float(a), float(b))]


def differences(bench: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
    """How many items the official and strict metrics treat differently, by reason."""
    reasons: Counter = Counter()
    examples: dict[str, str] = {}
    for record in records:
        official = record.get("official")
        if not isinstance(official, dict) or official.get("needs_judge") or official.get("not_reproduced"):
            continue
        if official.get("excluded"):
            reason = f"excluded by the official script: {official['excluded']}"
        elif all(abs(a - b) < 1e-9 for a, b in _compared(record, official, bench)):
            continue
        elif record.get("status") != "ok":
            reason = f"no response ({record['failure']['kind']} failure): strict counts it wrong"
        else:
            reason = official.get("note") or (
                "the official extraction reads the response differently"
                if official.get("extracted") != record.get("prediction")
                else "the official comparison differs"
            )
        reasons[reason] += 1
        examples.setdefault(reason, str(record.get("id")))
    return {
        "count": sum(reasons.values()),
        "reasons": dict(reasons.most_common()),
        "example_ids": examples,
    }


class ProjectScoring:
    """For the project's own formats (synthetic tasks, any data file): there is no other
    script, so the official verdict is the project's scoring and both metrics agree."""

    official_source = "this project: the rewards library is this format's scorer"

    def official_item(self, item: Any, response: str, ctx: Any, metas: Sequence[Any] = ()) -> OfficialVerdict:
        scored = self.score(item, response, ctx, metas)  # type: ignore[attr-defined]
        return OfficialVerdict(values=dict(scored.values), extracted=scored.prediction)

    def official_summary(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any] | None:
        return strict_block(self, summary)
