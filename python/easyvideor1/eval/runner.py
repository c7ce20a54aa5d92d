"""``run_eval``: settings -> benchmarks loaded -> pipeline -> results file -> reports.

Annotation files are read (and rejected with file/line/field errors) before the engine
starts, so a typo costs seconds, not an engine start-up. Every setting that shapes the
numbers goes into ``run.json`` and the report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easyvideor1.cache import FrameLoader, open_store
from easyvideor1.config.schema import RewardConfig
from easyvideor1.errors import DataError
from easyvideor1.eval.benchmarks.base import get_benchmark
from easyvideor1.eval.benchmarks.common import ScoringContext
from easyvideor1.eval.pipeline import BenchPlan, Pipeline, StageOptions
from easyvideor1.eval.report import add_load_failures, write_report
from easyvideor1.eval.results import ResultsLog, record_key, refuse_finished_out
from easyvideor1.eval.types import EvalError, EvalItem
from easyvideor1.logging import event, get_logger
from easyvideor1.models.families import detect_family
from easyvideor1.rollout.base import SamplingConfig
from easyvideor1.rollout.factory import model_positions
from easyvideor1.video.metadata import ImageParams, VideoParams

log = get_logger(__name__)

PROMPT_STYLES = ("direct", "reasoning")
# The default engine length for a model with more positions: a long-context model's full length
# would size vLLM's buffers for it (and on GPUs its KV cache) for prompts an evaluation never sends.
MAX_MODEL_LEN_CAP = 32768


@dataclass
class EvalConfig:
    """Everything a run needs. ``benchmarks`` maps a registered name to its data folder
    (or file); ``video``/``image`` override the protocol's frame settings per run."""

    model: str
    benchmarks: dict[str, Path]
    out_dir: Path
    store: str | None = None
    write_back: bool = False
    max_in_flight: int = 16
    io_workers: int = 4
    waves: bool = False
    limit: int | None = None
    resume: bool = False
    video: dict[str, Any] = field(default_factory=dict)
    image: dict[str, Any] = field(default_factory=dict)
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(max_tokens=512, temperature=0.0, seed=0)
    )
    prompt_style: str = "direct"
    request_timeout_s: float = 600.0
    judge: dict[str, Any] | None = None
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    progress: bool = True


def parse_benchmarks(spec: str, data_root: str | Path | None) -> dict[str, Path | str]:
    """``"videomme,jsonl=/data/x.jsonl"`` -> ``{name: folder}``; a bare name is ``data_root/<name>``;
    ``jsonl=s3://bucket/key`` stays a URL (a prepared manifest in the object store)."""
    out: dict[str, Path | str] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, _, path = part.partition("=")
        bench = get_benchmark(name).name
        if path and path.startswith("s3://"):
            if bench != "jsonl":
                raise EvalError(f"benchmark {bench!r}: {path}: only jsonl reads its data from an s3:// URL")
            out[bench] = path  # an object or prefix in the store: the adapter fetches it
            continue
        if path:
            out[bench] = Path(path).expanduser().resolve()
        elif data_root is None:
            raise EvalError(f"benchmark {bench!r} has no folder: pass --data-root or {bench}=PATH")
        else:
            out[bench] = (Path(data_root).expanduser() / bench).resolve()
        # A folder that does not exist is a load failure like one that does not parse (build_plans).
    if not out:
        raise EvalError("no benchmarks given")
    return out


def video_params(defaults: dict[str, Any], overrides: dict[str, Any], factor: int) -> VideoParams:
    values = {**defaults, **{k: v for k, v in overrides.items() if v is not None}, "factor": factor}
    try:
        return VideoParams(**values)
    except (TypeError, ValueError) as exc:
        raise EvalError(f"invalid frame settings {values}: {exc}") from None


# What a benchmark whose files do not parse raises: the run goes on without it (see build_plans).
LOAD_ERRORS = (EvalError, DataError, OSError, ValueError)


def load_items(name: str, root: Path | str) -> list[EvalItem]:
    """The items of one benchmark, checked for duplicate ids."""
    items = get_benchmark(name).load(root)
    rows: dict[str, list[str]] = {}
    for item in items:
        rows.setdefault(item.id, []).append(item.source or "?")
    repeated = {item_id: where for item_id, where in rows.items() if len(where) > 1}
    if repeated:
        shown = "; ".join(f"{item_id!r} at {', '.join(where)}" for item_id, where in list(repeated.items())[:10])
        more = f" (and {len(repeated) - 10} more)" if len(repeated) > 10 else ""
        raise EvalError(f"{name}: {len(repeated)} duplicate item id(s), each with the rows that share it: {shown}{more}")
    return items


def build_plans(
    config: EvalConfig, factor: int
) -> tuple[list[BenchPlan], dict[str, Any], dict[str, dict[str, str]]]:
    """Plans of the benchmarks that load, their settings, and ``{name: {"root", "error"}}`` of
    those that do not (reported, while the others run). None loading is an error."""
    store = open_store(config.store) if config.store else None
    image = ImageParams(**{**{k: v for k, v in config.image.items() if v is not None}, "factor": factor})
    plans, per_bench, failures = [], {}, {}
    for name, root in config.benchmarks.items():
        bench = get_benchmark(name)
        try:
            if isinstance(root, Path) and not root.exists():
                raise EvalError(f"{root} does not exist")
            items = load_items(name, root)
        except LOAD_ERRORS as exc:
            error = str(exc) if isinstance(exc, EvalError | DataError) else f"{type(exc).__name__}: {exc}"
            failures[name] = {"root": str(root), "error": error}
            event(log, "benchmark_load_failed", logging.WARNING, benchmark=name, root=str(root), error=error)
            continue
        if config.limit is not None:
            items = items[: config.limit]
        params = video_params(bench.video_defaults, config.video, factor)
        loader = FrameLoader(store, params, image, write_back=config.write_back)
        plans.append(BenchPlan(bench, root, items, loader))
        per_bench[name] = {
            "root": str(root),
            "items": len(items),
            "video": params.as_dict(),
            "image": image.as_dict(),
            "annotation": bench.annotation,
            "protocol_version": bench.protocol_version,
        }
    if not plans:
        raise EvalError(
            "no benchmark could be loaded:\n"
            + "\n".join(
                f"  {name} ({failure['root']}): {failure['error']}" for name, failure in failures.items()
            )
        )
    return plans, per_bench, failures


def default_max_model_len(model: str | Path, requested: int | None = None) -> int:
    """The engine's tokens per sequence: ``requested``, else the model's positions (as the
    trainer's engine caps them, rollout/factory.py) at most :data:`MAX_MODEL_LEN_CAP`. vLLM
    refuses a length above the positions of a small model (a validation traceback)."""
    if requested is not None:
        return int(requested)  # rope scaling may let vLLM accept more than the positions
    positions = model_positions(model)
    return MAX_MODEL_LEN_CAP if positions is None else min(MAX_MODEL_LEN_CAP, positions)


def run_eval(
    config: EvalConfig, engine: Any = None, *, on_record: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run (or resume) an evaluation; returns ``{"summaries", "paths", "run"}``.

    ``engine``: an :class:`~easyvideor1.eval.engine.AsyncEvalEngine` to reuse (tests share
    one); by default one is started for ``config.model`` and closed at the end.
    """
    if config.prompt_style not in PROMPT_STYLES:
        raise EvalError(f"prompt style must be one of {PROMPT_STYLES}, got {config.prompt_style!r}")
    refuse_finished_out(config.out_dir, resume=config.resume)  # before the engine's start, not after
    family = detect_family(config.model)
    plans, per_bench, failures = build_plans(config, family.factor)
    owns_engine = engine is None
    if owns_engine:
        from easyvideor1.eval.engine import AsyncEvalEngine, kwargs_for_sampling

        engine_kwargs = dict(config.engine_kwargs)
        engine_kwargs["max_model_len"] = default_max_model_len(
            config.model, engine_kwargs.get("max_model_len")
        )
        engine = AsyncEvalEngine(
            config.model,
            max_in_flight=config.max_in_flight,
            **kwargs_for_sampling(config.sampling, engine_kwargs),
        )
    try:
        engine.check_sampling(config.sampling)
        settings = run_settings(config, engine, family.name, per_bench)
        result = _run(config, engine, plans, settings, on_record, failures)
        result["load_failures"] = failures
        return result
    finally:
        if owns_engine:
            engine.close()


def run_settings(config: EvalConfig, engine: Any, family: str, per_bench: dict[str, Any]) -> dict[str, Any]:
    engine_settings = engine.settings()
    judge = None
    if config.judge:
        judge = {k: v for k, v in config.judge.items() if "key" not in k.lower()}  # never store secrets
    return {
        "model": str(Path(config.model).resolve()),
        "family": family,
        "benchmarks": per_bench,
        "sampling": dataclasses.asdict(config.sampling),
        "prompt_style": config.prompt_style,
        "judge": judge,
        "engine_args": engine_settings.get("args"),
        "engine": engine_settings.get("engine"),
        "verify_prompts": engine_settings.get("verify_prompts"),
        "versions": engine_settings.get("versions"),
        "store": config.store,
        "write_back": config.write_back,
        "max_in_flight": config.max_in_flight,
        "io_workers": config.io_workers,
        "waves": config.waves,
        "request_timeout_s": config.request_timeout_s,
        "limit": config.limit,
    }


def _run(
    config: EvalConfig,
    engine: Any,
    plans: list[BenchPlan],
    settings: dict[str, Any],
    on_record: Callable[[dict[str, Any]], None] | None,
    failures: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    ctx = ScoringContext(judge=config.judge, reward_config=RewardConfig(timeout_s=config.request_timeout_s))
    renderer = None
    if config.prompt_style == "reasoning":
        from easyvideor1.prompts import PromptRenderer

        renderer = PromptRenderer()
    with ResultsLog(config.out_dir, settings, resume=config.resume) as results:
        previous = len(results.records)
        pending = [(plan, item) for plan in plans for item in plan.items if item.key not in results.done]
        event(
            log, "eval_start", benchmarks=list(config.benchmarks), pending=len(pending), already_done=previous
        )
        options = StageOptions(
            max_in_flight=config.max_in_flight,
            io_workers=config.io_workers,
            waves=config.waves,
            request_timeout_s=config.request_timeout_s,
            prompt_style=config.prompt_style,
            progress=config.progress,
        )
        pipeline = Pipeline(engine, results, config.sampling, ctx, options, renderer, on_record)
        started = time.time()
        # On the engine's own loop when it has one (no thread hop per request).
        runner = getattr(engine, "run", None)
        stats = runner(pipeline.run(pending)) if callable(runner) else asyncio.run(pipeline.run(pending))
        wanted = {item.key for plan in plans for item in plan.items}
        records = [r for r in results.records if record_key(r) in wanted]
    missing = wanted - {record_key(r) for r in records}
    if missing:  # cannot happen unless the pipeline lost a sample: never report a short denominator
        raise EvalError(f"{len(missing)} item(s) have no result: {sorted(missing)[:5]}")
    run = {
        **stats,
        "started": started,
        "resumed": config.resume,
        "records_before": previous,
        "cache": {plan.bench.name: plan.loader.stats() for plan in plans},
    }
    summaries = {}
    for plan in plans:
        mine = [r for r in records if r["benchmark"] == plan.bench.name]
        summaries[plan.bench.name] = plan.bench.aggregate(mine, ctx)
    paths = write_report(config.out_dir, settings, summaries, records, run)
    if failures:
        add_load_failures(paths, failures)
    return {"summaries": summaries, "paths": paths, "run": run, "settings": settings}
