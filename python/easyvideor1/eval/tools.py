"""``evr1 eval --tools``: every benchmark item again in the multi-turn mode, beside the single-turn run.

The single-turn run is the ordinary pipeline (eval/runner.py), written to ``OUT`` as always.
Then the same engine answers every item with the video tools declared (rollout/tools): the
item's prompt and frames exactly as the pipeline builds them, the multi-turn driver
(``agenerate_multi_turn`` on the engine's own event loop: each trajectory continues as soon
as its tool call is answered), and a tool kit over the item's first video, whose frames come
through the benchmark's frame loader (same store, same decoder and pixel budget). The final
policy turn is scored by the benchmark's own scorer. Records go to ``OUT/tools/results.jsonl``
with their turns, tool calls and frames; ``OUT/tools/report.json`` holds the multi-turn
summaries and ``OUT/tools_comparison.md`` the table of both modes per benchmark and metric.

The multi-turn pass is not resumable: with ``--resume`` the single-turn run continues and the
multi-turn pass runs again in full.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from easyvideor1.config.schema import RewardConfig, ToolsConfig
from easyvideor1.data.prepared import PREPARED_FIELD, family_keys
from easyvideor1.eval.benchmarks.common import ScoringContext
from easyvideor1.eval.engine import AsyncEvalEngine, EngineDead, seeded_sampling
from easyvideor1.eval.pipeline import BenchPlan, item_sampling, load_item_media, scored_record, zero_values
from easyvideor1.eval.runner import EvalConfig, build_plans, run_eval
from easyvideor1.eval.types import EvalItem, failure_record
from easyvideor1.logging import event, get_logger
from easyvideor1.models.families import detect_family
from easyvideor1.models.inputs import ImageInput, VideoInput
from easyvideor1.rollout.base import RolloutRequest
from easyvideor1.rollout.tools.base import ToolVideo
from easyvideor1.video.metadata import VideoMetadata

log = get_logger(__name__)

TOOLS_DIR = "tools"
COMPARISON_MD, COMPARISON_JSON = "tools_comparison.md", "tools_comparison.json"


def run_tool_eval(config: EvalConfig, tools: ToolsConfig, engine: AsyncEvalEngine | None = None) -> dict[str, Any]:
    """The single-turn run (``run_eval``'s result) with ``"tools"``: the multi-turn summaries,
    per-benchmark tool statistics, the comparison rows and the files written."""
    from easyvideor1.eval.engine import kwargs_for_sampling
    from easyvideor1.eval.runner import default_max_model_len

    owns_engine = engine is None
    if owns_engine:
        kwargs = dict(config.engine_kwargs)
        kwargs["max_model_len"] = default_max_model_len(config.model, kwargs.get("max_model_len"))
        engine = AsyncEvalEngine(config.model, max_in_flight=config.max_in_flight,
                                 **kwargs_for_sampling(config.sampling, kwargs))
    try:
        single = run_eval(config, engine)
        multi = run_multi_turn(config, tools, engine)
    finally:
        if owns_engine:
            engine.close()
    single_records = json.loads(Path(single["paths"]["json"]).read_text())["records"]
    rows = comparison_rows(single["summaries"], single_records, multi["summaries"], multi["records"])
    paths = write_comparison(config.out_dir, rows, tools, multi)
    single["tools"] = {**multi, "rows": rows, "paths": {**multi["paths"], **paths}}
    return single


def run_multi_turn(config: EvalConfig, tools: ToolsConfig, engine: AsyncEvalEngine) -> dict[str, Any]:
    """Every item of ``config``'s benchmarks in the multi-turn mode on ``engine``."""
    family = detect_family(config.model)
    plans, _, _ = build_plans(config, family.factor)
    ctx = ScoringContext(judge=config.judge, reward_config=RewardConfig(timeout_s=config.request_timeout_s))
    out = Path(config.out_dir) / TOOLS_DIR
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    pass_ = _MultiTurnPass(config, tools, engine, ctx)
    work = pass_.run_all(plans)
    runner = getattr(engine, "run", None)
    records = runner(work) if callable(runner) else asyncio.run(work)
    records.sort(key=lambda r: (r["benchmark"], str(r["id"])))
    with open(out / "results.jsonl", "w") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    summaries, stats = {}, {}
    for plan in plans:
        mine = [r for r in records if r["benchmark"] == plan.bench.name]
        summaries[plan.bench.name] = plan.bench.aggregate(mine, ctx)
        stats[plan.bench.name] = tool_statistics(mine)
    wall = time.perf_counter() - started
    report = {"tools": tools.model_dump(mode="json"), "summaries": summaries, "tool_stats": stats,
              "wall_s": round(wall, 2), "records": records}
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str))
    event(log, "eval_tools_done", items=len(records), seconds=round(wall, 2),
          failed=sum(r["status"] != "ok" for r in records))
    return {"summaries": summaries, "tool_stats": stats, "records": records,
            "paths": {"results": out / "results.jsonl", "report": out / "report.json"}}


class _MultiTurnPass:
    """The multi-turn answers of a run's items, at most ``max_in_flight`` trajectories at once."""

    def __init__(self, config: EvalConfig, tools: ToolsConfig, engine: AsyncEvalEngine, ctx: ScoringContext):
        self.config, self.tools, self.engine, self.ctx = config, tools, engine, ctx
        self.rollout = engine.rollout_engine  # generate turn by turn on the engine's streaming core
        self.family = self.rollout.builder.family

    async def run_all(self, plans: list[BenchPlan]) -> list[dict[str, Any]]:
        from easyvideor1.rollout.tools.frames import LocalToolFrameSource
        from easyvideor1.rollout.tools.kit import VideoToolKit

        # One kit per benchmark: its tool frames through that benchmark's loader (store, budgets).
        kits = {plan.bench.name: VideoToolKit(self.family, LocalToolFrameSource(plan.loader, self.family),
                                              self.tools) for plan in plans}
        slots = asyncio.Semaphore(max(1, self.config.max_in_flight))

        async def one(plan: BenchPlan, item: EvalItem) -> dict[str, Any]:
            async with slots:
                return await self.answer(plan, item, kits[plan.bench.name])

        return list(await asyncio.gather(*(one(plan, item) for plan in plans for item in plan.items)))

    def _load(self, plan: BenchPlan, item: EvalItem) -> tuple[list[VideoInput], list[ImageInput],
                                                               list[VideoMetadata], ToolVideo]:
        """The item's media as the pipeline loads them, and the video its tools read."""
        keys = family_keys(item.meta.get(PREPARED_FIELD), self.family.name, n_videos=len(item.videos),
                           n_images=len(item.images), where=item.source or item.id)
        videos, images, metas = load_item_media(plan.loader, item, keys)
        if item.videos:
            tool_video = ToolVideo(path=str(item.videos[0]), key=keys[0][0] if keys is not None else None,
                                   duration_s=float(metas[0].duration))
        else:  # no video to look at: every call is answered with an error message
            tool_video = ToolVideo(path=None, key=None, duration_s=0.0)
        return videos, images, metas, tool_video

    def _failed(self, plan: BenchPlan, item: EvalItem, kind: str, exc: BaseException | str,
                prompt: str | None = None) -> dict[str, Any]:
        message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        event(log, "eval_tools_item_failed", key=item.key, kind=kind, message=message[:300])
        return failure_record(item, kind, message, **zero_values(plan.bench, item, self.ctx), prompt=prompt,
                              **_tool_fields(None, []))

    async def answer(self, plan: BenchPlan, item: EvalItem, kit: Any) -> dict[str, Any]:
        from easyvideor1.rollout.multi_turn import agenerate_multi_turn

        try:
            videos, images, metas, tool_video = await asyncio.to_thread(self._load, plan, item)
        except Exception as exc:  # an unreadable medium costs this item only
            return self._failed(plan, item, "media", exc)
        try:
            text = plan.bench.prompt(item, metas, self.config.prompt_style, _renderer(self.config.prompt_style))
        except Exception as exc:
            return self._failed(plan, item, "prompt", exc)
        # Declared as the rollout stage declares them (the call syntax too, which the tiny templates read).
        request = RolloutRequest(request_id=item.key, messages=text, videos=videos, images=images,
                                 **kit.request_fields())
        sampling = item_sampling(self.config.sampling, item.key)
        started = time.perf_counter()
        try:
            (result,) = await asyncio.wait_for(
                agenerate_multi_turn(self.rollout, [request], kit, [tool_video], sampling, self.tools,
                                     max_response_length=self.config.sampling.max_tokens),
                self.config.request_timeout_s)
        except TimeoutError:
            return self._failed(plan, item, "timeout", f"no answer within {self.config.request_timeout_s:g}s", text)
        except Exception as exc:  # one item's error costs that item; a dead engine stops the run
            from vllm.v1.engine.exceptions import EngineDeadError

            if isinstance(exc, EngineDead | EngineDeadError):
                raise EngineDead(f"the vLLM engine died during request {item.key!r}") from exc
            return self._failed(plan, item, "engine", exc, text)
        generate_s = time.perf_counter() - started
        completion = result.completions[0]
        try:
            record = await asyncio.to_thread(scored_record, plan.bench, item, completion.text, self.ctx, metas)
        except Exception as exc:
            return self._failed(plan, item, "scoring", exc, text)
        trajectory = completion.trajectory
        record.update(prompt=text, finish_reason=completion.finish_reason, prompt_tokens=len(result.prompt_token_ids),
                      output_tokens=trajectory.policy_tokens if trajectory is not None else len(completion.token_ids),
                      visual_tokens=result.num_visual_tokens, frames=[m.num_frames for m in metas],
                      generate_s=round(generate_s, 4), seed=sampling.seed if seeded_sampling(sampling) else None,
                      **_tool_fields(trajectory, metas))
        return record


def _renderer(prompt_style: str) -> Any:
    if prompt_style != "reasoning":
        return None
    from easyvideor1.prompts import PromptRenderer

    return PromptRenderer()


def _tool_fields(trajectory: Any, metas: list[VideoMetadata]) -> dict[str, Any]:
    prompt_frames = sum(m.num_frames for m in metas)
    if trajectory is None:
        return {"turns": 0, "tool_calls": 0, "tool_errors": 0, "frames_fetched": 0, "frames_used": prompt_frames,
                "tool_calls_made": []}
    return {"turns": trajectory.turns, "tool_calls": trajectory.tool_calls, "tool_errors": trajectory.tool_errors,
            "frames_fetched": trajectory.frames_fetched, "frames_used": prompt_frames + trajectory.frames_fetched,
            "tool_calls_made": [dict(r) for r in trajectory.media_refs]}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _accuracy(record: dict[str, Any]) -> float | None:
    """The record's first accuracy-kind value (None when it has none)."""
    for name, kind in (record.get("kinds") or {}).items():
        if kind == "accuracy" and name in (record.get("values") or {}):
            return float(record["values"][name])
    return None


def tool_statistics(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Turns, calls and frames per item, and accuracy with and without a tool call."""
    with_call = [a for r in records if r.get("tool_calls") and (a := _accuracy(r)) is not None]
    without = [a for r in records if not r.get("tool_calls") and (a := _accuracy(r)) is not None]
    return {"n": len(records), "turns": _mean([r.get("turns", 0) for r in records]),
            "tool_calls": _mean([r.get("tool_calls", 0) for r in records]),
            "tool_errors": _mean([r.get("tool_errors", 0) for r in records]),
            "frames_fetched": _mean([r.get("frames_fetched", 0) for r in records]),
            "frames_used": _mean([r.get("frames_used", 0) for r in records]),
            "share_with_call": _mean([1.0 if r.get("tool_calls") else 0.0 for r in records]),
            "accuracy_with_call": _mean(with_call) if with_call else None, "n_with_call": len(with_call),
            "accuracy_without_call": _mean(without) if without else None, "n_without_call": len(without)}


def comparison_rows(single: dict[str, Any], single_records: list[dict[str, Any]], multi: dict[str, Any],
                    multi_records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per benchmark and metric: its value in both modes, the frames each used per item
    and the multi-turn mode's turns and tool calls per item."""
    rows = []
    for name, summary in single.items():
        mine_single = [r for r in single_records if r["benchmark"] == name]
        mine_multi = [r for r in multi_records if r["benchmark"] == name]
        stats = tool_statistics(mine_multi)
        frames_single = _mean([sum(r.get("frames") or []) for r in mine_single])
        for metric, value in summary["metrics"].items():
            other = multi.get(name, {}).get("metrics", {}).get(metric)
            rows.append({"benchmark": name, "metric": metric, "kind": value["kind"], "n": value["n"],
                         "single_turn": value["value"], "multi_turn": None if other is None else other["value"],
                         "turns": stats["turns"], "tool_calls": stats["tool_calls"],
                         "frames_single_turn": frames_single, "frames_multi_turn": stats["frames_used"]})
    return rows


def comparison_markdown(rows: list[dict[str, Any]], tools: ToolsConfig) -> str:
    lines = ["# Single-turn vs multi-turn (video tools)", "",
             f"tools: get_frames, zoom; at most {tools.max_turns} call(s), {tools.frames_per_call} frames per call, "
             f"{tools.frames_per_trajectory} per answer; values are percentages, turns/calls/frames per item", "",
             "| benchmark | metric | kind | n | single-turn | multi-turn | turns | tool calls | frames single | "
             "frames multi |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        multi = "-" if row["multi_turn"] is None else f"{100 * row['multi_turn']:.2f}"
        lines.append(f"| {row['benchmark']} | {row['metric']} | {row['kind']} | {row['n']} | "
                     f"{100 * row['single_turn']:.2f} | {multi} | {row['turns']:.2f} | {row['tool_calls']:.2f} | "
                     f"{row['frames_single_turn']:.1f} | {row['frames_multi_turn']:.1f} |")
    return "\n".join(lines) + "\n"


def write_comparison(out_dir: Path, rows: list[dict[str, Any]], tools: ToolsConfig,
                     multi: dict[str, Any]) -> dict[str, Path]:
    out_dir = Path(out_dir)
    paths = {"comparison_markdown": out_dir / COMPARISON_MD, "comparison_json": out_dir / COMPARISON_JSON}
    text = comparison_markdown(rows, tools)
    stats = multi["tool_stats"]
    text += "\n| benchmark | items with a call | accuracy with a call | accuracy without | tool errors per item |\n"
    text += "|---|---|---|---|---|\n"
    for name, st in stats.items():
        with_call = "-" if st["accuracy_with_call"] is None else f"{100 * st['accuracy_with_call']:.2f}"
        without = "-" if st["accuracy_without_call"] is None else f"{100 * st['accuracy_without_call']:.2f}"
        text += (f"| {name} | {100 * st['share_with_call']:.1f}% | {with_call} (n={st['n_with_call']}) | "
                 f"{without} (n={st['n_without_call']}) | {st['tool_errors']:.2f} |\n")
    paths["comparison_markdown"].write_text(text)
    paths["comparison_json"].write_text(json.dumps({"tools": tools.model_dump(mode="json"), "rows": rows,
                                                    "tool_stats": stats}, indent=1))
    return paths


def format_comparison(rows: list[dict[str, Any]]) -> str:
    """The console table of ``evr1 eval --tools``."""
    lines = [f"{'benchmark':<14}{'metric':<22}{'single':>8}{'multi':>8}{'turns':>7}{'calls':>7}"
             f"{'frames 1':>10}{'frames N':>10}"]
    for row in rows:
        multi = "-" if row["multi_turn"] is None else f"{100 * row['multi_turn']:.2f}"
        lines.append(f"{row['benchmark']:<14}{row['metric']:<22}{100 * row['single_turn']:>8.2f}{multi:>8}"
                     f"{row['turns']:>7.2f}{row['tool_calls']:>7.2f}{row['frames_single_turn']:>10.1f}"
                     f"{row['frames_multi_turn']:>10.1f}")
    return "\n".join(lines)


__all__ = ["comparison_rows", "format_comparison", "run_multi_turn", "run_tool_eval",
           "tool_statistics"]
