"""``evr1 train CONFIG [KEY=VALUE ...]``: the RL loop (embedded mode)."""

from __future__ import annotations

from pathlib import Path

from easyvideor1.config import load_config
from easyvideor1.logging import attach_log_file, log_file


def _train(args) -> int:
    from easyvideor1.train.trainer import RLTrainer

    cfg = load_config(args.config, args.overrides)
    attach_log_file(Path(cfg.trainer.output_dir) / "evr1.log")  # every line of the run, third-party ones too
    trainer = RLTrainer.from_config(cfg)
    try:
        result = trainer.fit()
        if args.export:
            trainer.export(args.export)
    finally:
        trainer.close()
    last = result["last_validation"]
    if last is not None:
        print(f"final validation accuracy: {last.accuracy:.3f} " +
              " ".join(f"{k}={v:.2f}" for k, v in last.by_type.items()))
    if result["plot"] is not None:
        print(f"curves: {result['plot']}")
    if log_file() is not None:
        print(f"log: {log_file()}")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a policy with RL (GRPO family) from a run config")
    parser.add_argument("config", help="run config YAML (see docs/config.md)")
    parser.add_argument("overrides", nargs="*", help="dotted KEY=VALUE overrides, e.g. worker.rollout.n=8")
    parser.add_argument("--export", help="also write the final policy as a Hugging Face model directory here")
    parser.set_defaults(func=_train)
