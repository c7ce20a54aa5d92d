"""Command line of the rollout worker: ``python -m easyvideor1.rollout.worker --help``.

``build_worker(cfg)`` makes a :class:`~easyvideor1.rollout.worker.RolloutWorker` from the run
config, the same for this command line and the Ray Serve replica (services/rollout): the engine
from ``worker.rollout`` (rollout/factory.py), the model ``worker.actor.model_path``, the queue,
namespace and weights store from ``distributed.*``, frames from the frame-cache service
(``distributed.frame_cache_url``) or ``data.frame_cache.store``, rewards from ``worker.reward.url``
(null: in-process) and the pool's own settings from ``serve.rollout``. The process runs until
SIGTERM/SIGINT (the batch in hand is finished; leased tasks not started come back to the queue
when their lease expires, ``serve.rollout.lease_s`` after the worker stopped renewing them).
"""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import dataclass
from typing import Any

from easyvideor1.config.cli import add_config_arguments, config_from_args
from easyvideor1.config.schema import RunConfig
from easyvideor1.errors import ConfigError, EasyVideoR1Error
from easyvideor1.logging import event, get_logger
from easyvideor1.rollout.tools.frames import make_tool_frame_source
from easyvideor1.rollout.worker import RolloutWorker

log = get_logger("rollout.worker")
FLAGS = ("worker.actor.model_path", "worker.rollout.engine", "distributed.queue_url", "distributed.namespace",
         "distributed.weights_store", "distributed.frame_cache_url", "serve.rollout.batch_size",
         "serve.rollout.visibility_timeout_s", "serve.rollout.lease_s", "serve.rollout.max_attempts", "serve.rollout.weights_timeout_s",
         "serve.rollout.reward_patience_s")


def frame_store_url(cfg: RunConfig) -> str | None:
    """Where the pool reads frames: the frame-cache service when there is one, else the run's store."""
    return cfg.distributed.frame_cache_url or cfg.data.frame_cache.store


@dataclass
class BuiltWorker:
    """A worker and everything it holds, closed together."""

    worker: RolloutWorker
    parts: list[Any]

    def close(self) -> None:
        self.worker.leases.close()
        self.worker.rewards.close()
        self.worker.close_tools()
        for part in reversed(self.parts):
            part.close()


def build_worker(cfg: RunConfig, *, consumer: str = "", status_file: str | None = None) -> BuiltWorker:
    from easyvideor1.cache import open_store
    from easyvideor1.models.paths import check_model_dir
    from easyvideor1.queue import open_queue
    from easyvideor1.rollout.factory import make_engine, max_model_len
    from easyvideor1.weight_sync.follower import EngineWeights

    dist, pool = cfg.distributed, cfg.serve.rollout
    missing = [name for name, value in (("worker.actor.model_path", cfg.worker.actor.model_path),
                                        ("distributed.queue_url", dist.queue_url)) if not value]
    if missing:
        raise ConfigError(f"the rollout worker needs {' and '.join(missing)} in the run config")
    check_model_dir(cfg.worker.actor.model_path, "worker.actor.model_path")
    # A lease longer than the cap could never be renewed: it is the cap then (the old behaviour).
    queue = open_queue(dist.queue_url, dist.namespace, visibility_timeout_s=pool.visibility_timeout_s,
                       lease_s=min(pool.lease_s, pool.visibility_timeout_s), max_attempts=pool.max_attempts)
    parts: list[Any] = [queue]
    try:
        store_url = frame_store_url(cfg)
        store = open_store(store_url) if store_url else None
        if store is not None:
            parts.append(store)
        engine = make_engine(cfg)
        parts.append(engine)
        weights = EngineWeights(engine, cfg.worker.actor.model_path, board_url=dist.queue_url,
                                namespace=dist.namespace, weights_root=dist.weights_store,
                                timeout_s=pool.weights_timeout_s)
        parts.append(weights)
    except BaseException:
        for part in reversed(parts):
            part.close()
        raise
    family = engine.family

    def tool_source(loader: Any) -> Any:
        # A worker is the pool's: its frame-cache service's tool endpoint when there is one, so a
        # pod needs no raw media.
        return make_tool_frame_source(cfg, family, loader=loader, service_url=cfg.distributed.frame_cache_url)

    worker = RolloutWorker(engine, queue, cfg.worker.reward.url, frame_store=store, weights=weights, pool=pool,
                           max_model_len=max_model_len(cfg), consumer=consumer, status_file=status_file,
                           tool_source=tool_source)
    return BuiltWorker(worker, parts)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m easyvideor1.rollout.worker",
                                description="Rollout worker: tasks from the work queue -> scored groups.")
    add_config_arguments(p, FLAGS)
    p.add_argument("--status-file", default=None, help="write the worker's status JSON here")
    p.add_argument("--consumer", default="", help="consumer name (default host-pid-random)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        built = build_worker(config_from_args(args), consumer=args.consumer, status_file=args.status_file)
    except EasyVideoR1Error as exc:  # bad config or model folder: one line, as `evr1` commands say it
        print(f"rollout worker: error: {exc}", file=sys.stderr)
        return 1
    worker = built.worker

    def stop(signum, _frame) -> None:
        event(log, "rollout_worker_stopping", signal=signal.Signals(signum).name)
        worker.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        worker.run()
    finally:
        built.close()
    return 1 if worker.state == "failed" else 0


if __name__ == "__main__":
    raise SystemExit(main())
