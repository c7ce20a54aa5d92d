"""``evr1 data filter-by-pass-rate DATA --model DIR -k 8``: keep questions with 0 < pass rate < 1."""

from __future__ import annotations

import time
from pathlib import Path


def _filter(args) -> int:
    from easyvideor1.config import load_config
    from easyvideor1.console import Progress
    from easyvideor1.data import load_samples
    from easyvideor1.logging import attach_log_file, log_file
    from easyvideor1.models.paths import check_model_dir
    from easyvideor1.prompts.renderer import PromptRenderer
    from easyvideor1.rewards.client import open_reward_client
    from easyvideor1.rewards.gt_check import run_sample_check
    from easyvideor1.rollout.factory import make_engine
    from easyvideor1.rollout.stage import EngineRolloutStage
    from easyvideor1.train.difficulty import filter_by_pass_rate
    from easyvideor1.train.media import build_frame_loader

    overrides = [f"worker.actor.model_path={args.model}", f"data.train_files={args.data}",
                 f"data.max_response_length={args.max_tokens}", "data.frame_cache.build_before_training=false"]
    if args.store:
        overrides.append(f"data.frame_cache.store={args.store}")
    cfg = load_config(args.config, overrides + list(args.overrides))
    check_model_dir(args.model, "--model")
    # Rows the run's reward could not score (an unknown problem_type, a malformed answer) are
    # named, file:line: field, before the engine starts, as `evr1 train` does.
    samples = load_samples(args.data, check_ground_truth=run_sample_check(cfg.worker.reward))
    out = Path(args.out or Path(args.data).with_suffix(".filtered.jsonl"))
    attach_log_file(out.with_suffix(".log"))  # vLLM's INFO stream and every event, off the console
    engine = make_engine(cfg)
    rewards = open_reward_client(cfg.worker.reward.url, cfg.worker.reward)
    progress = None
    try:
        loader = build_frame_loader(cfg, engine.family)
        stage = EngineRolloutStage(engine, loader, PromptRenderer(cfg.data.prompt_template_dir), rewards,
                                   max_prompt_length=cfg.data.max_prompt_length,
                                   max_response_length=cfg.data.max_response_length)

        def on_batch(done: int, so_far) -> None:
            nonlocal progress
            if progress is None:  # its total is known once the data is read
                progress = Progress("filter", total=so_far.total, unit="question", started=started)
            progress.set(done, kept=sum(0 < r < 1 for r in so_far.pass_rates.values()))

        started = time.monotonic()
        report = filter_by_pass_rate(stage, samples, out, k=args.k, max_tokens=args.max_tokens,
                                     temperature=args.temperature, on_batch=on_batch)
    finally:
        if progress is not None:
            progress.close()
        rewards.close()
        engine.close()
    print(f"kept {report.kept} of {report.total} (too easy {report.too_easy}, too hard {report.too_hard}, "
          f"failed {len(report.failed)}) -> {out} (report: {out}.report.json)"
          + (f"  log: {log_file()}" if log_file() else ""))
    return 0


def add_parser(data_subparsers) -> None:
    """Adds ``filter-by-pass-rate`` under ``evr1 data`` (kept apart: it needs the model stack)."""
    parser = data_subparsers.add_parser("filter-by-pass-rate",
                                        help="keep questions a model solves sometimes but not always")
    parser.add_argument("data", help="JSONL in the training format")
    parser.add_argument("--model", required=True, help="model directory used to sample answers")
    parser.add_argument("-k", type=int, default=8, help="answers sampled per question")
    parser.add_argument("--out", help="output JSONL (default: DATA.filtered.jsonl)")
    parser.add_argument("--store", help="frame store URL (decode on the fly when absent)")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--config", help="run config YAML for frame budgets and reward settings")
    parser.add_argument("overrides", nargs="*", help="dotted KEY=VALUE config overrides")
    parser.set_defaults(func=_filter)
