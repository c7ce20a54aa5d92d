"""``evr1 eval``: evaluate a model on benchmarks; ``evr1 eval compare A B``: deltas of two runs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from easyvideor1.config.cli import field_help, field_info, flag_name
from easyvideor1.errors import ConfigError

# Exit status when the run finished but some benchmark's data did not load (1: could not run).
EXIT_PARTIAL = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    ev = subparsers.add_parser(
        "eval",
        help="evaluate a model on video benchmarks (async pipeline over the frame cache)",
        description="Evaluate a model: evr1 eval --model DIR --benchmarks a,b --data-root ROOT. "
        "Compare two runs: evr1 eval compare RUN_A RUN_B. List adapters: evr1 eval list. "
        f"Exit status: 0 done, {EXIT_PARTIAL} done but some benchmark's data did not load "
        "(its error is in the report), 1 could not run.",
    )
    ev.add_argument("--model", help="model directory (Hugging Face layout)")
    ev.add_argument(
        "--benchmarks", help="comma-separated names; NAME=PATH gives a benchmark its own folder/file"
    )
    ev.add_argument("--data-root", help="folder holding one sub-folder per benchmark, named as the benchmark")
    ev.add_argument("--out", help="output folder (default: eval_runs/<model>-<time>; required with --resume)")
    ev.add_argument("--store", help="frame store URL (path, file://, s3://); misses decode on the fly")
    ev.add_argument("--write-back", action="store_true", help="store frames decoded on a miss")
    ev.add_argument("--max-in-flight", type=int, default=16, help="requests kept in the engine (default 16)")
    ev.add_argument("--io-workers", type=int, default=4, help="frame-loading threads (default 4)")
    ev.add_argument(
        "--waves",
        action="store_true",
        help="submit in waves of --max-in-flight samples once the engine is idle, loading the "
        "next wave meanwhile (for machines where the engine and decoding share few "
        "CPU cores)",
    )
    ev.add_argument("--limit", type=int, help="first N items of each benchmark")
    ev.add_argument("--resume", action="store_true", help="continue the run in --out, skipping finished ids")
    frames = ev.add_argument_group("frames (default: each benchmark's protocol settings)")
    frames.add_argument("--fps", type=float)
    frames.add_argument("--min-frames", type=int)
    frames.add_argument("--max-frames", type=int)
    frames.add_argument("--min-pixels", type=int, help="per-frame pixel budget, lower bound")
    frames.add_argument("--max-pixels", type=int, help="per-frame pixel budget, upper bound")
    frames.add_argument("--image-min-pixels", type=int)
    frames.add_argument("--image-max-pixels", type=int)
    gen = ev.add_argument_group("generation")
    gen.add_argument("--max-tokens", type=int, default=512)
    gen.add_argument("--temperature", type=float, default=_default("worker.rollout.val_temperature"),
                     help="0 = greedy (default, as validation's worker.rollout.val_temperature)")
    gen.add_argument("--top-p", type=float, default=_default("worker.rollout.top_p"),
                     help=field_help("worker.rollout.top_p"))
    gen.add_argument("--top-k", type=int, default=_default("worker.rollout.top_k"), metavar="K",
                     help=field_help("worker.rollout.top_k") + "; e.g. 20 for Qwen3-VL thinking models")
    gen.add_argument(
        "--seed", type=int, default=0, help="with --temperature > 0, each item's seed derives from it"
    )
    gen.add_argument(
        "--prompt-style",
        choices=("direct", "reasoning"),
        default="direct",
        help="direct: question + one answer instruction; reasoning: the training templates "
        "(<think> then <answer>)",
    )
    gen.add_argument(
        "--timeout", type=float, default=600.0, help="seconds per request before it counts as failed"
    )
    gen.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="tokens per sequence (default: the model's positions, at most 32768)",
    )
    gen.add_argument("--kv-cache-gib", type=float, default=_default("worker.rollout.kv_cache_gib"), metavar="GIB",
                     help=field_help("worker.rollout.kv_cache_gib"))
    gen.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra vLLM engine argument (VALUE parsed as JSON when it can be)",
    )
    judge = ev.add_argument_group("LLM judge for open-ended items (any OpenAI-compatible endpoint)")
    judge.add_argument("--judge-url", help="base URL, e.g. http://host:8000/v1")
    judge.add_argument("--judge-model", default="judge")
    judge.add_argument(
        "--judge-api-key-env", default="EVR1_JUDGE_API_KEY", help="env var holding the API key"
    )
    tools = ev.add_argument_group("video tools (multi-turn mode beside the single-turn run; docs/tools.md)")
    tools.add_argument("--tools", action="store_true",
                       help="after the single-turn run, answer every item again with get_frames/zoom declared "
                       "(multi-turn) and report accuracy, turns and frames used beside the single-turn result")
    for field, kind in _TOOL_FIELDS.items():  # each the field's name; the older --tool-NAME still works
        tools.add_argument(flag_name(field), dest=_dest(field), type=kind, metavar="N" if kind is int else "F",
                           help=field_help(f"worker.rollout.tools.{field}"))
        tools.add_argument(f"--tool-{flag_name(field)[2:]}", dest=_dest(field), type=kind, help=argparse.SUPPRESS)
    ev.add_argument("--no-progress", action="store_true")
    ev.set_defaults(func=_run)
    sub = ev.add_subparsers(dest="eval_command", metavar="SUBCOMMAND")
    compare = sub.add_parser("compare", help="per-benchmark and per-category deltas of two runs (B - A)")
    compare.add_argument("run_a", help="run folder (or its report.json): the baseline")
    compare.add_argument("run_b", help="run folder (or its report.json): e.g. after RL")
    compare.add_argument("--output", help="also write the table to this file")
    compare.add_argument("--json", action="store_true", help="print rows as JSON")
    compare.set_defaults(func=_compare)
    listing = sub.add_parser("list", help="list benchmark adapters and the files they read")
    listing.set_defaults(func=_list)


# The worker.rollout.tools fields that --tools takes from the command line, and their types.
_TOOL_FIELDS = {"max_turns": int, "frames_per_call": int, "frames_per_trajectory": int, "max_fps": float}


def _dest(field: str) -> str:
    return f"tools_{field}"


def _default(dotted: str):
    return field_info(dotted)[1]


def _engine_args(pairs: list[str], max_model_len: int | None, kv_cache_gib: float) -> dict:
    out: dict = {"kv_cache_gib": kv_cache_gib}
    if max_model_len is not None:
        out["max_model_len"] = max_model_len
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--engine-arg expects KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def _run(args: argparse.Namespace) -> int:
    from easyvideor1.eval.results import refuse_finished_out
    from easyvideor1.eval.runner import EvalConfig, parse_benchmarks, run_eval
    from easyvideor1.logging import attach_log_file, log_file
    from easyvideor1.rollout.base import SamplingConfig

    if not args.model or not args.benchmarks:
        raise ConfigError("evr1 eval needs --model and --benchmarks (see evr1 eval --help)")
    from easyvideor1.models.paths import check_model_dir

    check_model_dir(args.model, "--model")
    if args.resume and not args.out:
        raise ConfigError("--resume needs --out (the folder of the run to continue)")
    out = (
        Path(args.out)
        if args.out
        else Path("eval_runs") / f"{Path(args.model).name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    # A finished run's folder is refused before its log is appended to or an engine starts.
    refuse_finished_out(out, resume=args.resume)
    attach_log_file(out / "evr1.log")  # every line of the run, the engine's included
    judge = None
    if args.judge_url:
        judge = {"base_url": args.judge_url, "model": args.judge_model, "api_key_env": args.judge_api_key_env}
    config = EvalConfig(
        model=args.model,
        benchmarks=parse_benchmarks(args.benchmarks, args.data_root),
        out_dir=out,
        store=args.store,
        write_back=args.write_back,
        max_in_flight=args.max_in_flight,
        io_workers=args.io_workers,
        waves=args.waves,
        limit=args.limit,
        resume=args.resume,
        video={
            "fps": args.fps,
            "min_frames": args.min_frames,
            "max_frames": args.max_frames,
            "min_pixels": args.min_pixels,
            "max_pixels": args.max_pixels,
        },
        image={"min_pixels": args.image_min_pixels, "max_pixels": args.image_max_pixels},
        sampling=SamplingConfig(
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
        ),
        prompt_style=args.prompt_style,
        request_timeout_s=args.timeout,
        judge=judge,
        engine_kwargs=_engine_args(args.engine_arg, args.max_model_len, args.kv_cache_gib),
        progress=not args.no_progress,
    )
    result = _run_tools(args, config) if args.tools else run_eval(config)
    for name, summary in result["summaries"].items():
        metrics = ", ".join(
            f"{m}={100 * v['value']:.2f} ({v['kind']})" for m, v in summary["metrics"].items()
        )
        print(f"{name}: {metrics}; {summary['n']} items, {summary['n_failed']} failed")
    for name, failure in result.get("load_failures", {}).items():
        print(f"{name}: not run, its data did not load: {failure['error']}")
    cache = result["run"].get("cache", {})
    print(
        f"frames: {sum(c.get('hits', 0) for c in cache.values())} from the cache, "
        f"{sum(c.get('misses', 0) for c in cache.values())} decoded on the fly"
    )
    print(
        f"report: {result['paths']['markdown']}  plot: {result['paths']['plot']}  "
        f"json: {result['paths']['json']}" + (f"  log: {log_file()}" if log_file() else "")
    )
    if "tools" in result:
        from easyvideor1.eval.tools import format_comparison

        print("single-turn vs multi-turn (values in %, turns/calls/frames per item):")
        print(format_comparison(result["tools"]["rows"]))
        print(f"multi-turn: {result['tools']['paths']['comparison_markdown']}  "
              f"records: {result['tools']['paths']['results']}")
    return EXIT_PARTIAL if result.get("load_failures") else 0


def _run_tools(args: argparse.Namespace, config) -> dict:
    from pydantic import ValidationError

    from easyvideor1.config.schema import ToolsConfig
    from easyvideor1.eval.tools import run_tool_eval

    given = {field: getattr(args, _dest(field)) for field in _TOOL_FIELDS if getattr(args, _dest(field)) is not None}
    try:
        tools = ToolsConfig(enabled=True, **given)
    except ValidationError as exc:
        problems = "; ".join(f"{flag_name(str(e['loc'][0]))} (worker.rollout.tools.{e['loc'][0]}): {e['msg']}"
                             for e in exc.errors())
        raise ConfigError(f"evr1 eval --tools: {problems}") from None
    return run_tool_eval(config, tools)


def _compare(args: argparse.Namespace) -> int:
    from easyvideor1.eval.report import compare_markdown, compare_rows, load_report

    if args.json:
        print(json.dumps(compare_rows(load_report(args.run_a), load_report(args.run_b)), indent=1))
        return 0
    text = compare_markdown(args.run_a, args.run_b)
    if args.output:
        Path(args.output).write_text(text)
    sys.stdout.write(text)
    return 0


def _list(args: argparse.Namespace) -> int:
    from easyvideor1.eval.benchmarks.base import benchmark_names, get_benchmark

    for name in benchmark_names():
        bench = get_benchmark(name)
        judge = " [LLM judge for open-ended items]" if bench.needs_judge else ""
        print(f"{name:18s} {bench.title}: {bench.annotation}{judge}")
    return 0
