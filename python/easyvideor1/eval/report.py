"""Reports of a run (JSON, markdown tables per category, a PNG plot) and run comparison.

Metric kinds (accuracy, IoU, MRA, text similarity, composite) are kept apart everywhere:
tables and plots group by kind and nothing averages across kinds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from easyvideor1.eval.results import settings_differences
from easyvideor1.eval.types import METRIC_KINDS, EvalError

REPORT_JSON, REPORT_MD, REPORT_PNG = "report.json", "report.md", "report.png"


def write_report(
    out_dir: Path,
    settings: dict[str, Any],
    summaries: dict[str, Any],
    records: list[dict[str, Any]],
    run: dict[str, Any],
) -> dict[str, Path]:
    out_dir = Path(out_dir)
    records = sorted(records, key=lambda r: (r["benchmark"], str(r["id"])))
    report = {"settings": settings, "run": run, "summaries": summaries, "records": records}
    paths = {"json": out_dir / REPORT_JSON, "markdown": out_dir / REPORT_MD, "plot": out_dir / REPORT_PNG}
    paths["json"].write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str))
    paths["markdown"].write_text(markdown(report))
    plot(summaries, paths["plot"], title=Path(str(settings.get("model", ""))).name)
    return paths


def add_load_failures(paths: dict[str, Path], failures: dict[str, dict[str, str]]) -> None:
    """Add the benchmarks that did not load (``{name: {"root", "error"}}``) to a written report:
    ``load_failures`` in report.json, a section at the end of report.md."""
    report = json.loads(paths["json"].read_text())
    report["load_failures"] = failures
    paths["json"].write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str))
    lines = [
        "## Benchmarks not run: their data did not load",
        "",
        "| benchmark | data | error |",
        "|---|---|---|",
    ]
    for name, failure in failures.items():
        error = failure["error"].replace("|", "\\|").replace("\n", " ")[:500]
        lines.append(f"| {name} | `{failure['root']}` | {error} |")
    with open(paths["markdown"], "a") as handle:
        handle.write("\n".join(lines) + "\n\n")


def _pct(value: float, kind: str) -> str:
    return f"{100 * value:.2f}"


def markdown(report: dict[str, Any]) -> str:
    settings, summaries, run = report["settings"], report["summaries"], report["run"]
    lines = [f"# Evaluation of `{settings.get('model')}`", ""]
    sampling = settings.get("sampling", {})
    lines += [
        f"- family: {settings.get('family')}; prompt style: {settings.get('prompt_style')}; "
        f"decoding: {'greedy' if sampling.get('temperature') == 0 else 'sampled'} "
        f"(temperature {sampling.get('temperature')}, max_tokens {sampling.get('max_tokens')})",
        f"- judge: {settings.get('judge') or 'none (rule-based fallback for open-ended items)'}",
        f"- frame store: {settings.get('store') or 'none (decoded on the fly)'}; this invocation: "
        f"{sum(c.get('hits', 0) for c in run.get('cache', {}).values())} cache hits, "
        f"{sum(c.get('misses', 0) for c in run.get('cache', {}).values())} decodes",
        f"- this invocation: {run.get('samples', 0)} samples in {run.get('wall_s', 0):.1f} s"
        f"{' (resumed)' if run.get('resumed') else ''}; values are percentages",
        "",
    ]
    lines += _official_table(summaries)
    lines += ["## Summary", ""]
    for kind in METRIC_KINDS:
        rows = [
            (name, metric, m)
            for name, s in summaries.items()
            for metric, m in s["metrics"].items()
            if m["kind"] == kind
        ]
        if not rows:
            continue
        lines += [
            f"### {kind} metrics",
            "",
            "| benchmark | metric | value | n | failed |",
            "|---|---|---|---|---|",
        ]
        for name, metric, m in rows:
            lines.append(
                f"| {name} | {metric} | {_pct(m['value'], kind)} | {m['n']} | {summaries[name]['n_failed']} |"
            )
        lines.append("")
    for name, summary in summaries.items():
        lines += _benchmark_section(name, summary, settings.get("benchmarks", {}).get(name, {}))
    return "\n".join(lines) + "\n"


def _benchmark_section(name: str, summary: dict[str, Any], bench_settings: dict[str, Any]) -> list[str]:
    lines = [f"## {summary.get('title') or name} (`{name}`)", ""]
    video = bench_settings.get("video") or {}
    if video:
        lines.append(
            f"frames: fps {video.get('fps')}, {video.get('min_frames')}-{video.get('max_frames')} frames, "
            f"{video.get('min_pixels')}-{video.get('max_pixels')} pixels per frame; "
            f"data: `{bench_settings.get('root')}`"
        )
        lines.append("")
    lines += ["| metric | kind | value | n |", "|---|---|---|---|"]
    for metric, m in summary["metrics"].items():
        lines.append(f"| {metric} | {m['kind']} | {_pct(m['value'], m['kind'])} | {m['n']} |")
    lines.append("")
    lines.append(
        f"{summary['n']} items, {summary['n_failed']} failed (counted as wrong)"
        + (f": {summary['failures_by_kind']}" if summary["n_failed"] else "")
    )
    if summary.get("scoring"):
        lines.append(f"scoring: {summary['scoring']}")
    lines += _official_lines(summary)
    for note in summary.get("notes", []):
        lines.append(f"- note: {note}")
    lines.append("")
    for field_name, groups in summary.get("categories", {}).items():
        metrics = sorted({m for g in groups.values() for m in g})
        lines += [
            f"### by {field_name}",
            "",
            "| " + " | ".join([field_name, *metrics, "n"]) + " |",
            "|" + "---|" * (len(metrics) + 2),
        ]
        for value, group in groups.items():
            cells = [_pct(group[m]["value"], group[m]["kind"]) if m in group else "" for m in metrics]
            count = max((g["n"] for g in group.values()), default=0)
            lines.append("| " + " | ".join([value, *cells, str(count)]) + " |")
        lines.append("")
    if summary["failures"]:
        lines += ["### failures", "", "| id | kind | message |", "|---|---|---|"]
        for failure in summary["failures"][:50]:
            message = failure["message"].replace("|", "\\|").replace("\n", " ")[:200]
            lines.append(f"| {failure['id']} | {failure['kind']} | {message} |")
        if len(summary["failures"]) > 50:
            lines.append(f"| ... | | {len(summary['failures']) - 50} more in report.json |")
        lines.append("")
    return lines


def _official_cell(official: dict[str, Any] | None) -> tuple[str, str]:
    if not official:
        return "", ""
    if official.get("status") != "ok":
        return official.get("status", ""), ""
    return official["metric"], _pct(official["value"], official["kind"])


def _official_table(summaries: dict[str, Any]) -> list[str]:
    """Official (the benchmark's own script) beside strict (every item counted) per benchmark."""
    rows = [(name, s) for name, s in summaries.items() if "official" in s]
    if not rows:
        return []
    lines = [
        "## Official and strict",
        "",
        "official: what the benchmark's own scorer computes from these responses (compare with "
        "published numbers); strict: every item counted, failures and unparseable answers wrong.",
        "",
        "| benchmark | official metric | official | n | strict metric | strict | n | items treated differently |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in rows:
        official, strict = s.get("official") or {}, s.get("strict") or {}
        metric, value = _official_cell(official)
        lines.append(
            f"| {name} | {metric} | {value} | {official.get('n', '')} | {strict.get('metric', '')} | "
            f"{_pct(strict['value'], strict['kind']) if strict else ''} | {strict.get('n', '')} | "
            f"{(s.get('differences') or {}).get('count', 0)} |"
        )
    return lines + [""]


def _official_lines(summary: dict[str, Any]) -> list[str]:
    official = summary.get("official")
    if not official:
        return []
    metric, value = _official_cell(official)
    lines = [
        f"official ({official.get('source') or 'source not stated'}): "
        + (f"{metric} {value} over {official['n']} items" if official.get("status") == "ok" else metric)
        + (f"; {official['message']}" if official.get("message") else "")
    ]
    if official.get("excluded"):
        lines.append(f"- the official script leaves out {official['excluded']} item(s): {official['excluded_why']}")
    diff = summary.get("differences") or {}
    for reason, count in (diff.get("reasons") or {}).items():
        example = (diff.get("example_ids") or {}).get(reason)
        lines.append(f"- {count} item(s) scored differently by official and strict: {reason} (e.g. `{example}`)")
    return lines


def plot(summaries: dict[str, Any], path: Path, title: str = "") -> None:
    """One panel per metric kind, one bar per benchmark metric (never mixing kinds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        (
            kind,
            [
                (f"{name}\n{metric}", m["value"])
                for name, s in summaries.items()
                for metric, m in s["metrics"].items()
                if m["kind"] == kind
            ],
        )
        for kind in METRIC_KINDS
    ]
    panels = [(kind, bars) for kind, bars in panels if bars]
    fig, axes = plt.subplots(
        len(panels) or 1,
        1,
        figsize=(max(6.0, 0.9 * max((len(b) for _, b in panels), default=1)), 3.2 * max(1, len(panels))),
        squeeze=False,
    )
    for ax, (kind, bars) in zip(axes[:, 0], panels):
        labels, values = zip(*bars)
        ax.bar(range(len(values)), [100 * v for v in values], color="#4c72b0")
        ax.set_xticks(range(len(values)), labels, fontsize=7)
        ax.set_ylim(0, 100)
        ax.set_ylabel(f"{kind} (%)")
        for x, v in enumerate(values):
            ax.text(x, 100 * v + 1, f"{100 * v:.1f}", ha="center", fontsize=7)
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no results", ha="center")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- comparing two runs --------------------------------------------------------------------


def load_report(run: str | Path) -> dict[str, Any]:
    path = Path(run)
    path = path / REPORT_JSON if path.is_dir() else path
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise EvalError(
            f"{path}: no evaluation report (run evr1 eval first, or give the run's --out folder)"
        ) from None
    except json.JSONDecodeError as exc:
        raise EvalError(f"{path}: not a valid report ({exc})") from None
    if not isinstance(report, dict) or "summaries" not in report:
        raise EvalError(f"{path}: not an evaluation report (no 'summaries')")
    return report


def compare_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (benchmark, breakdown, metric) present in both runs, with B - A."""
    rows = []
    for name in sorted(set(a["summaries"]) & set(b["summaries"])):
        sa, sb = a["summaries"][name], b["summaries"][name]
        scopes = [("overall", "", sa["metrics"], sb["metrics"])]
        for field_name in sorted(set(sa.get("categories", {})) & set(sb.get("categories", {}))):
            ga, gb = sa["categories"][field_name], sb["categories"][field_name]
            scopes += [(field_name, value, ga[value], gb[value]) for value in sorted(set(ga) & set(gb))]
        for scope, value, ma, mb in scopes:
            for metric in [m for m in ma if m in mb and ma[m]["kind"] == mb[m]["kind"]]:
                rows.append(
                    {
                        "benchmark": name,
                        "scope": scope,
                        "category": value,
                        "metric": metric,
                        "kind": ma[metric]["kind"],
                        "a": ma[metric]["value"],
                        "b": mb[metric]["value"],
                        "delta": mb[metric]["value"] - ma[metric]["value"],
                        "n_a": ma[metric]["n"],
                        "n_b": mb[metric]["n"],
                    }
                )
    return rows


def compare_markdown(run_a: str | Path, run_b: str | Path) -> str:
    a, b = load_report(run_a), load_report(run_b)
    rows = compare_rows(a, b)
    lines = [f"# Comparison: B = `{run_b}` vs A = `{run_a}`", "", "Values in percent; delta = B - A.", ""]
    diffs = settings_differences(a.get("settings", {}), b.get("settings", {}))
    if diffs:
        lines += ["Settings that differ between the runs (deltas include their effect):", ""]
        lines += [f"- {d}" for d in diffs] + [""]
    only = sorted(set(a["summaries"]) ^ set(b["summaries"]))
    if only:
        lines += [f"Benchmarks in only one run (not compared): {', '.join(only)}", ""]
    current = None
    for row in rows:
        if row["benchmark"] != current:
            current = row["benchmark"]
            lines += [
                "",
                f"## {current}",
                "",
                "| scope | category | metric | kind | A | B | delta | n A | n B |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
        lines.append(
            f"| {row['scope']} | {row['category']} | {row['metric']} | {row['kind']} | "
            f"{100 * row['a']:.2f} | "
            f"{100 * row['b']:.2f} | {100 * row['delta']:+.2f} | {row['n_a']} | {row['n_b']} |"
        )
    return "\n".join(lines) + "\n"
