"""The RL driver as a Ray job entrypoint.

    ray job submit --address http://HEAD:8265 --working-dir RUN_DIR -- \\
        python -m services.trainer.entrypoint run.yaml [KEY=VALUE ...] [--export DIR]

Runs ``RLTrainer`` in distributed mode (forced): rollouts come from the rollout pool through
the work queue (rollout/remote_stage.py) and the actor is a :class:`RayActorGroup` of
``distributed.train_ranks`` FSDP ranks. URLs the config leaves unset come from ``evr1 up``'s
cluster.json (``$EVR1_CLUSTER_FILE``, which ``evr1 up`` sets for every Ray process). The last
line printed is a JSON summary (steps, final validation accuracy, output dir).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from easyvideor1.config import load_config
from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.logging import event, get_logger

log = get_logger("services.trainer")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.trainer.entrypoint", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="run config YAML (docs/config.md)")
    parser.add_argument("overrides", nargs="*", help="dotted KEY=VALUE overrides")
    parser.add_argument("--export", help="also write the final policy as a Hugging Face model directory here")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except EasyVideoR1Error as exc:
        print(f"trainer entrypoint: error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    import ray

    from easyvideor1.config.cluster import apply_cluster_defaults
    from easyvideor1.train.trainer import RLTrainer
    from services.trainer.ray_actors import RayActorGroup

    cfg = load_config(args.config, [*args.overrides, "distributed.mode=distributed"])
    cfg, _ = apply_cluster_defaults(cfg)
    address = os.environ.get("RAY_ADDRESS") or cfg.distributed.ray_address or "auto"
    ray.init(address=address, log_to_driver=True)
    event(log, "trainer_job_started", ray=address, ranks=cfg.distributed.train_ranks,
          namespace=cfg.distributed.namespace, steps=cfg.trainer.total_steps)
    group = RayActorGroup(cfg)
    trainer = None
    try:
        trainer = RLTrainer.from_config(cfg, actor=group)
        result = trainer.fit()
        if args.export:
            trainer.export(args.export)
    finally:
        if trainer is not None:
            trainer.close()
        group.close()
    last = result["last_validation"]
    print(json.dumps({"steps": result["steps"], "output_dir": cfg.trainer.output_dir,
                      "final_accuracy": None if last is None else last.accuracy,
                      "by_type": None if last is None else last.by_type}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
