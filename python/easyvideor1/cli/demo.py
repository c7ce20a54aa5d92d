"""``evr1 demo``: the CPU demo that `make demo` runs (see easyvideor1/train/demo.py)."""

from __future__ import annotations

from pathlib import Path


def _demo(args) -> int:
    from easyvideor1.train.demo import DemoSettings, run_demo

    settings = DemoSettings(out_dir=Path(args.out).resolve(), family=args.family, steps=args.steps,
                            n_per_type=args.n_per_type, group_size=args.n, seed=args.seed,
                            distributed=args.distributed)
    run_demo(settings)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="train a tiny VLM on synthetic video tasks and show it learn")
    parser.add_argument("--out", default="demo_out", help="output folder (model, data, cache, run)")
    parser.add_argument("--family", default="qwen2_5_vl", help="tiny model family")
    parser.add_argument("--steps", type=int, default=80, help="RL steps")
    parser.add_argument("--n-per-type", type=int, default=40, help="synthetic questions per task type")
    parser.add_argument("--n", type=int, default=8, help="responses per question (group size)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--distributed", action="store_true",
                        help="roll out on the local cluster started by `evr1 up` (make demo-distributed)")
    parser.set_defaults(func=_demo)
