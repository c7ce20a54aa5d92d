"""Command line of the rollout worker: ``python -m easyvideor1.rollout.worker --help``.

Builds the engine, queue, frame store, reward client and weight follower from the arguments and
runs :class:`~easyvideor1.rollout.worker.RolloutWorker` until SIGTERM/SIGINT (the batch in hand
is finished; leased tasks not started come back to the queue when their lease expires).
"""

from __future__ import annotations

import argparse
import signal

from easyvideor1.logging import event, get_logger
from easyvideor1.rollout.base import RolloutEngine
from easyvideor1.rollout.weight_follow import EngineWeights
from easyvideor1.rollout.worker import RolloutWorker, WorkerSettings

log = get_logger("rollout.worker")


def open_engine(kind: str, model_dir: str, *, max_model_len: int, seed: int = 0) -> RolloutEngine:
    """The worker's engine: vLLM (default) or transformers."""
    if kind == "hf":
        from easyvideor1.rollout.hf_engine import HFEngine

        return HFEngine(model_dir)
    from easyvideor1.rollout.vllm_engine import VLLMEngine

    return VLLMEngine(model_dir, max_model_len=max_model_len, seed=seed)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m easyvideor1.rollout.worker",
                                description="Rollout worker: tasks from the work queue -> scored groups.")
    p.add_argument("--model", required=True, help="model directory of the engine (the run's base model)")
    p.add_argument("--queue", required=True, help="work queue URL (redis://host:port/db)")
    p.add_argument("--namespace", default="default", help="queue namespace (distributed.namespace)")
    p.add_argument("--reward-url", default="inprocess", help="reward service URL, or 'inprocess'")
    p.add_argument("--frame-store", default=None, help="frame store: http(s):// frame-cache service, s3://, or a dir")
    p.add_argument("--weights-store", default=None, help="root of the weights store (s3://bucket/prefix or a dir)")
    p.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=8, help="tasks leased per engine call")
    p.add_argument("--visibility-timeout", type=float, default=300.0,
                   help="seconds before a leased, unacked task is delivered to another worker")
    p.add_argument("--max-attempts", type=int, default=3, help="deliveries before a task is dead-lettered")
    p.add_argument("--weights-timeout", type=float, default=300.0, help="wait for a wanted policy version")
    p.add_argument("--reward-patience", type=float, default=120.0, help="retry scoring this long")
    p.add_argument("--status-file", default=None, help="write the worker's status JSON here")
    p.add_argument("--consumer", default="", help="consumer name (default host-pid-random)")
    return p


def main(argv: list[str] | None = None) -> int:
    from easyvideor1.cache import open_store
    from easyvideor1.queue import open_queue
    from easyvideor1.rewards.client import open_reward_client

    args = build_parser().parse_args(argv)
    engine = open_engine(args.engine, args.model, max_model_len=args.max_model_len, seed=args.seed)
    queue = open_queue(args.queue, args.namespace, visibility_timeout_s=args.visibility_timeout,
                       max_attempts=args.max_attempts)
    store = open_store(args.frame_store) if args.frame_store else None
    weights = EngineWeights(engine, args.model, board_url=args.queue, namespace=args.namespace,
                            weights_root=args.weights_store, timeout_s=args.weights_timeout)
    settings = WorkerSettings(consumer=args.consumer, batch_size=args.batch_size, reward_patience_s=args.reward_patience,
                              max_model_len=args.max_model_len, status_file=args.status_file)
    worker = RolloutWorker(engine, queue, open_reward_client(args.reward_url), frame_store=store, weights=weights,
                           settings=settings)

    def stop(signum, _frame) -> None:
        event(log, "rollout_worker_stopping", signal=signal.Signals(signum).name)
        worker.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        worker.run()
    finally:
        queue.close()
        worker.rewards.close()
        weights.close()
        if store is not None:
            store.close()
        engine.close()
    return 1 if worker.state == "failed" else 0


if __name__ == "__main__":
    raise SystemExit(main())
