"""Distributed mode against its embedded baseline, side by side in this process.

1. Work-queue round trip (put -> get -> put_result -> ack -> wait_results): Redis Streams vs the
   in-process queue (benchmarks/queue_roundtrip.py's ``measure``), msgs/s and their ratio.
2. One RL step on the CPU tiny model (4 questions x 4 responses, GRPO + mix-policy): embedded
   (in-process vLLM engine) vs distributed (the same trainer with its rollouts from a rollout
   worker process over a private Redis, weights published to a local store and reloaded by the
   worker each step). Median step time after one warm-up step, and distributed / embedded.
3. Frames from the frame-cache service vs local decoding (benchmarks/frame_service.py's ``run``).

Servers (redis-server, the worker, the frame-cache service) are children of this process on
127.0.0.1, stopped by their pids.

    .venv/bin/python benchmarks/distributed_step.py [--steps 3] [--tasks 2000] [--skip-frames]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT / "benchmarks", ROOT / "tests", ROOT / "tests" / "distributed", ROOT):
    sys.path.insert(0, str(extra))
for key, value in {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                   "TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(key, value)

from dist_helpers import make_data, run_overrides  # noqa: E402
from servers import redis_server, stop_process  # noqa: E402


def queue_roundtrip(tasks: int, batch: int, repeats: int) -> None:
    from queue_roundtrip import measure

    with redis_server() as server:
        redis_rate = measure(server.url, tasks, batch, repeats)
    memory_rate = measure("memory://bench", tasks, batch, repeats)
    print(f"[queue] {tasks} tasks, batch {batch}: redis {redis_rate:,.0f} msgs/s, in-process {memory_rate:,.0f} "
          f"msgs/s, ratio redis/in-process {redis_rate / memory_rate:.3f}", flush=True)


def _steps(cfg, steps: int) -> tuple[list[float], list[float]]:
    from easyvideor1.train.trainer import RLTrainer

    trainer = RLTrainer.from_config(cfg)
    try:
        trainer.train_step()  # warm-up: engine caches, first weight reload
        totals, rollouts = [], []
        for _ in range(steps):
            started = time.perf_counter()
            metrics = trainer.train_step()
            totals.append(time.perf_counter() - started)
            rollouts.append(metrics["time/rollout_s"])
        return totals, rollouts
    finally:
        trainer.close()


def rl_step(workdir: Path, steps: int) -> None:
    from easyvideor1.config import load_config
    from easyvideor1.models.tiny import build_tiny_model

    model = build_tiny_model("qwen2_5_vl", workdir / "tiny", seed=0)
    data = make_data(workdir / "data", n_per_type=6)
    common = {"trainer__total_steps": steps + 1, "worker__rollout__n": 4, "distributed__mode": "embedded",
              "data__frame_cache__store": workdir / "frames", "data__frame_cache__build_before_training": "true"}
    embedded_cfg = load_config(None, run_overrides(data, model, workdir / "embedded", **common))
    embedded, embedded_rollout = _steps(embedded_cfg, steps)
    with redis_server() as server:
        worker = subprocess.Popen(
            [sys.executable, "-m", "easyvideor1.rollout.worker", "--model-path", str(model), "--queue-url", server.url,
             "--namespace", "bench", "--weights-store", str(workdir / "weights"), "--batch-size", "8",
             f"data.frame_cache.store={workdir / 'frames'}", "data.max_prompt_length=1084",
             "data.max_response_length=16"],
            stdout=open(workdir / "worker.log", "wb"), stderr=subprocess.STDOUT)
        try:
            dist_cfg = load_config(None, run_overrides(data, model, workdir / "distributed", **{
                **common, "distributed__mode": "distributed", "distributed__queue_url": server.url,
                "distributed__namespace": "bench", "distributed__weights_store": workdir / "weights"}))
            distributed, distributed_rollout = _steps(dist_cfg, steps)
        finally:
            stop_process(worker, grace=20)
    e, d = statistics.median(embedded), statistics.median(distributed)
    print(f"[rl step] median of {steps} steps after a warm-up, 4 questions x 4 responses, tiny Qwen2.5-VL on CPU\n"
          f"  embedded    {e:6.2f} s/step (rollout {statistics.median(embedded_rollout):5.2f} s)\n"
          f"  distributed {d:6.2f} s/step (rollout incl. queue + weight reload {statistics.median(distributed_rollout):5.2f} s)"
          f"\n  ratio distributed/embedded {d / e:.2f}", flush=True)


def frames(workdir: Path, repeats: int) -> None:
    from frame_service import build_through_service, make_videos, run

    from easyvideor1.cache.loader import FrameLoader
    from easyvideor1.cache.stores.base import open_store
    from easyvideor1.video import VideoParams
    from services.frame_cache.launch import FrameCacheServer

    params = VideoParams(fps=2.0, max_frames=128)
    videos = make_videos(workdir / "videos")
    env = {**os.environ, "EVR1_HASH_INDEX_DIR": str(workdir / "server-index")}
    os.environ["EVR1_HASH_INDEX_DIR"] = str(workdir / "client-index")
    server = FrameCacheServer(str(workdir / "frame-store"), ["--build-workers", "1"], env=env)
    try:
        server.start()
        build_through_service(server.url, [p for _, p in videos], params)
        print("[frames] frame-cache service vs local decode:", flush=True)
        with open_store(server.url) as store:
            run(videos, FrameLoader(store, params), params, repeats)
    finally:
        server.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed RL steps per mode (after one warm-up)")
    parser.add_argument("--tasks", type=int, default=2000, help="queue round-trip tasks")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-frames", action="store_true", help="skip the frame-cache service part")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="evr1-bench-distributed-"))
    try:
        queue_roundtrip(args.tasks, 64, args.repeats)
        rl_step(workdir, args.steps)
        if not args.skip_frames:
            frames(workdir, args.repeats)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
