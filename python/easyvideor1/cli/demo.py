"""``evr1 demo``: the CPU demo that `make demo` runs (see easyvideor1/train/demo.py)."""

from __future__ import annotations

from pathlib import Path

# Flag -> DemoSettings field. A flag left out keeps the field's default (train/demo.py), so the
# two cannot disagree; the module is imported only when the demo runs.
_FIELDS = {"family": "family", "steps": "steps", "n_per_type": "n_per_type", "n_val_per_type": "n_val_per_type",
           "n": "group_size", "seed": "seed"}

# An earlier run's results in --out: a new run replaces them, saying so first. Left in place, its
# metrics.jsonl would take the new run's rows after its own (the curves mixing both runs); the
# tiny model, data and frame cache are inputs, made again or reused. The exception: an unfinished
# one-seed run of the same settings (killed), which the run resumes from its last checkpoint.
_RESULTS = ("demo_summary.json", "run")
_TOOLS_RESULTS = ("demo_tools_summary.json", "sight", "sight-model", "no-tools", "with-tools")


def result_paths(args, first_seed: int) -> list[str]:
    """What this run writes as results under --out (relative paths)."""
    if args.tools:
        return list(_TOOLS_RESULTS)
    if args.seeds > 1:
        return ["demo_seeds.json", *(f"seed-{k}/{name}" for k in range(first_seed, first_seed + args.seeds)
                                     for name in _RESULTS)]
    return list(_RESULTS)


def replace_earlier_results(out: Path, names: list[str]) -> list[Path]:
    """Remove an earlier run's results (``names`` under ``out``), naming them on the console first."""
    import shutil

    found = [out / name for name in names if (out / name).exists()]
    if found:
        listed = ", ".join(name + ("/" if (out / name).is_dir() else "") for name in names if (out / name).exists())
        print(f"[demo] {out} holds an earlier run's results ({listed}): this run replaces them "
              f"(give another --out to keep them)", flush=True)
    for path in found:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return found


def _demo(args) -> int:
    from easyvideor1.errors import ConfigError
    from easyvideor1.logging import attach_log_file
    from easyvideor1.train.demo import DemoSettings, run_demo, run_demo_seeds, unfinished_run

    # The flags are checked before anything is written under --out.
    if args.seeds < 1:
        raise ConfigError(f"demo: --seeds must be >= 1, got {args.seeds}")
    if args.base_steps is not None and not args.tools:
        raise ConfigError("demo: --base-steps is the sight run of `evr1 demo --tools`: add --tools or leave it out")
    if args.tools and (args.seeds > 1 or args.distributed):
        raise ConfigError("demo --tools runs one seed, embedded: leave out --seeds and --distributed")
    out = Path(args.out).resolve()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"demo: --out {out} is a file; give a folder (made if missing)")
    given = {field: getattr(args, flag) for flag, field in _FIELDS.items() if getattr(args, flag) is not None}
    settings = DemoSettings(out_dir=out, distributed=args.distributed, **given)
    step = None if args.tools or args.seeds > 1 else unfinished_run(settings)
    if step is not None:
        print(f"[demo] {out} holds an unfinished run of these settings (checkpoint at step {step} of "
              f"{settings.steps}): this run resumes it (give another --out to start over)", flush=True)
    else:
        replace_earlier_results(out, result_paths(args, settings.seed))
    attach_log_file(out / "evr1.log")  # every line of the run, third-party ones too
    if args.tools:
        return _tools_demo(args)
    if args.seeds > 1:
        run_demo_seeds(settings, args.seeds)
    else:
        run_demo(settings)
    return 0


def _tools_demo(args) -> int:
    from easyvideor1.train.demo_tools import ToolDemoSettings, run_tool_demo

    # The same flags (train/demo_tools.py): one task, so "per type" is the task's.
    given = {field: getattr(args, flag) for flag, field in _FIELDS.items() if getattr(args, flag) is not None}
    if args.base_steps is not None:
        given["base_steps"] = args.base_steps
    run_tool_demo(ToolDemoSettings(out_dir=Path(args.out).resolve(), **given))
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="train a tiny VLM on synthetic video tasks and show it learn")
    parser.add_argument("--out", default="demo_out",
                        help="output folder (model, data, cache, run); an earlier run's results there are replaced, "
                             "an unfinished (killed) run of the same settings is resumed")
    parser.add_argument("--family", help="tiny model family (qwen2_5_vl)")
    parser.add_argument("--steps", type=int, help="RL steps (80)")
    parser.add_argument("--n-per-type", type=int, help="synthetic training questions per task type (40)")
    parser.add_argument("--n-val-per-type", type=int, help="held-out questions per task type (32)")
    parser.add_argument("--n", type=int, help="responses per question, the group size (4)")
    parser.add_argument("--seed", type=int, help="seed of the model's weights, the data and sampling (0)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="run the demo for seeds SEED..SEED+K-1 (each in OUT/seed-K) and print the mean and "
                             "spread per task type")
    parser.add_argument("--distributed", action="store_true",
                        help="roll out on the local cluster started by `evr1 up` (make demo-distributed)")
    parser.add_argument("--tools", action="store_true",
                        help="the video-tools demo: a sight run teaches the tiny model to name a colour it sees, "
                             "then a brief flash between the sampled frames is trained without and with get_frames; "
                             "prints both runs' held-out accuracy and tool calls per trajectory "
                             "(--n-per-type/--n-val-per-type: train/held-out questions, 24/18; --steps: 40; --n: 2)")
    parser.add_argument("--base-steps", type=int,
                        help="with --tools: RL steps of the sight run (30)")
    parser.set_defaults(func=_demo)
