"""Distributed mode against its embedded baseline, side by side in this process.

1. Work-queue round trip (put -> get -> put_result -> ack -> wait_results): Redis Streams vs the
   in-process queue (benchmarks/queue_roundtrip.py's ``measure``), msgs/s and their ratio.
2. One RL step on the CPU tiny model (4 questions x 4 responses, GRPO + mix-policy) over the
   same prepared manifest (`evr1 data prepare`: frames by key): embedded (in-process vLLM
   engine) vs distributed (the same trainer with its rollouts from a rollout worker process over
   a private Redis, weights published to a local store and reloaded by the worker each step).
   Median step time after one warm-up step split into frames, rollout (pool time vs queue and
   waiting), scoring, log-probs, update and weight publish; distributed / embedded; and the bytes
   a driver sends its trainer ranks per step, prompts with pixels (before) vs token ids and keys.
3. Frames from the frame-cache service vs local decoding (benchmarks/frame_service.py's ``run``).

Servers (redis-server, the worker, the frame-cache service) are children of this process on
127.0.0.1, stopped by their pids.

    .venv/bin/python benchmarks/distributed_step.py [--steps 3] [--tasks 2000] [--skip-frames]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT / "benchmarks", ROOT / "tests", ROOT / "tests" / "distributed", ROOT):
    sys.path.insert(0, str(extra))
for key, value in {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                   "TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(key, value)

from dist_helpers import make_data, run_overrides  # noqa: E402
from servers import redis_server, stop_process  # noqa: E402

from easyvideor1.train.actor_group import ActorGroup  # noqa: E402


def queue_roundtrip(tasks: int, batch: int, repeats: int) -> None:
    from queue_roundtrip import measure

    with redis_server() as server:
        redis_rate = measure(server.url, tasks, batch, repeats)
    memory_rate = measure("memory://bench", tasks, batch, repeats)
    print(f"[queue] {tasks} tasks, batch {batch}: redis {redis_rate:,.0f} msgs/s, in-process {memory_rate:,.0f} "
          f"msgs/s, ratio redis/in-process {redis_rate / memory_rate:.3f}", flush=True)


SPLIT = (("frames", "time/frames_s"), ("rollout", "time/rollout_s"), ("scoring", "time/reward_s"),
         ("log-probs", "time/log_prob_s"), ("update", "time/update_s"), ("weight publish", "time/weight_sync_s"))


class CountingActor(ActorGroup):
    """The trainer's actor, counting what a driver would send its ranks per step: the items of
    each call pickled (``after``, what is sent now) and the same items carrying their pixel
    tensors and frames (``before``, what prompts built with pixels on the driver carried)."""

    def __init__(self, inner: Any, cfg: Any):
        from easyvideor1.train.media import PixelSource

        self.inner, self.pixels = inner, PixelSource.from_config(cfg)
        self.after = self.before = 0
        self.counting = False  # off while steps are timed: pickling is the benchmark's own cost

    def _count(self, items: Any) -> None:
        if not self.counting:
            return
        self.after += len(pickle.dumps(list(items), protocol=5))
        heavy = [dataclasses.replace(it, prompt=self.pixels.ready(it.prompt, it.media)) for it in items]
        self.before += len(pickle.dumps(heavy, protocol=5))

    def compute_log_probs(self, items, *, reference=False):
        self._count(items)
        return self.inner.compute_log_probs(items, reference=reference)

    def update(self, items, *, seed):
        self._count(items)
        return self.inner.update(items, seed=seed)

    def full_state_dict(self):
        return self.inner.full_state_dict()

    def load_full_state_dict(self, state):
        self.inner.load_full_state_dict(state)

    def trainer_state(self):
        return self.inner.trainer_state()

    def load_trainer_state(self, state):
        self.inner.load_trainer_state(state)

    def export_hf(self, out_dir, processor):
        return self.inner.export_hf(out_dir, processor)


def _trainer(cfg, *, count_bytes: bool = False):
    from easyvideor1.models.inputs import PromptBuilder
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import init_world
    from easyvideor1.train.trainer import RLTrainer

    actor = None
    if count_bytes:
        tokenizer = PromptBuilder.from_pretrained(cfg.worker.actor.model_path).tokenizer
        actor = CountingActor(Actor.from_config(cfg, init_world(cfg.trainer.device),
                                                pad_token_id=tokenizer.pad_token_id or 0), cfg)
    trainer = RLTrainer.from_config(cfg, actor=actor)
    trainer.train_step()  # warm-up: engine caches, first weight reload
    return trainer, actor


def _step(trainer) -> dict[str, float]:
    started = time.perf_counter()
    metrics = trainer.train_step()
    metrics["step_s"] = time.perf_counter() - started
    return metrics


def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in rows)


def _prepare(workdir: Path, model: Path, store: Path) -> Path:
    """The demo data as a prepared manifest (what a cluster trains from), frames in ``store``."""
    from easyvideor1.config import load_config
    from easyvideor1.train.prepare import prepare

    data = make_data(workdir / "data", n_per_type=6)
    cfg = load_config(None, [o for o in run_overrides(data, model, workdir / "x") if o.startswith("data.video")
                             or o.startswith("data.image")] + [f"data.frame_cache.store={store}"])
    out = workdir / "prepared" / "train.jsonl"
    summary = prepare(data / "train.jsonl", cfg, [model], out, progress=False)
    if not summary.ok:
        raise RuntimeError(summary.format())
    return out


def rl_step(workdir: Path, steps: int, rounds: int) -> None:
    from easyvideor1.config import load_config
    from easyvideor1.models.tiny import build_tiny_model

    model = build_tiny_model("qwen2_5_vl", workdir / "tiny", seed=0)
    store = workdir / "frames"
    manifest = _prepare(workdir, model, store)
    data = manifest.parent
    common = {"trainer__total_steps": steps + 2, "worker__rollout__n": 4, "distributed__mode": "embedded",
              "data__train_files": manifest, "data__val_files": "null", "data__frame_cache__store": store,
              "data__frame_cache__build_before_training": "false"}
    embedded_cfg = load_config(None, run_overrides(data, model, workdir / "embedded", **common))
    with redis_server() as server:
        worker = subprocess.Popen(
            [sys.executable, "-m", "easyvideor1.rollout.worker", "--model-path", str(model), "--queue-url", server.url,
             "--namespace", "bench", "--weights-store", str(workdir / "weights"), "--batch-size", "8",
             f"data.frame_cache.store={store}", "data.max_prompt_length=1084", "data.max_response_length=16"],
            stdout=open(workdir / "worker.log", "wb"), stderr=subprocess.STDOUT)
        try:
            dist_cfg = load_config(None, run_overrides(data, model, workdir / "distributed", **{
                **common, "distributed__mode": "distributed", "distributed__queue_url": server.url,
                "distributed__namespace": "bench", "distributed__weights_store": workdir / "weights"}))
            # One trainer alive at a time (an idle in-process engine beside the other mode's actor
            # skews its timings), in alternating rounds so both modes see the same machine load.
            embedded, distributed, sent = [], [], {}
            for round_ in range(rounds):
                for cfg, rows in ((embedded_cfg, embedded), (dist_cfg, distributed)):
                    trainer, counter = _trainer(cfg, count_bytes=cfg is dist_cfg and round_ == 0)
                    try:
                        rows.extend(_step(trainer) for _ in range(steps))
                        if counter is not None:
                            counter.counting = True  # one more step, untimed: what a driver sends its ranks
                            trainer.train_step()
                            sent = {"after": counter.after, "before": counter.before}
                    finally:
                        trainer.close()
        finally:
            stop_process(worker, grace=20)
    e, d = _median(embedded, "step_s"), _median(distributed, "step_s")
    print(f"[rl step] median of {rounds} x {steps} steps after a warm-up each, 4 questions x 4 responses, tiny Qwen2.5-VL on CPU, "
          "prepared data (frames by key)", flush=True)
    print(f"  {'part':<26}{'embedded s':>12}{'distributed s':>15}", flush=True)
    for name, key in SPLIT:
        print(f"  {name:<26}{_median(embedded, key):>12.3f}{_median(distributed, key):>15.3f}", flush=True)
    worker_s = _median(distributed, "distributed/worker_seconds")
    reload_s = _median(distributed, "distributed/worker_weights_seconds")
    print(f"  {'  of rollout: in the pool':<26}{'':>12}{worker_s:>15.3f}\n"
          f"  {'  of rollout: policy reload':<26}{'':>12}{reload_s:>15.3f}\n"
          f"  {'  of rollout: queue + wait':<26}{'':>12}{_median(distributed, 'time/rollout_s') - worker_s - reload_s:>15.3f}\n"
          f"  {'step':<26}{e:>12.3f}{d:>15.3f}\n  ratio distributed/embedded {d / e:.2f}", flush=True)
    print(f"[bytes driver -> ranks per step] prompts with pixels and frames (before) {sent['before'] / 1e6:.2f} MB, "
          f"token ids and media refs (after) {sent['after'] / 1e6:.3f} MB: {sent['before'] / max(sent['after'], 1):.0f}x "
          "less", flush=True)


def bytes_at_budget(workdir: Path) -> None:
    """One 128-frame prompt at the recipe's budget (2 fps, 448x448 frames): what a driver sent a
    rank per response item before (pixel tensors and frames) and what it sends now."""
    import numpy as np

    from easyvideor1.cache import FrameLoader
    from easyvideor1.cache.refs import MediaRef
    from easyvideor1.models.inputs import PromptBuilder, VideoInput
    from easyvideor1.models.tiny import build_tiny_model
    from easyvideor1.train.actor import TrainItem
    from easyvideor1.video import VideoParams
    from easyvideor1.video.encode import write_video

    model = workdir / "tiny" if (workdir / "tiny" / "config.json").exists() else build_tiny_model(
        "qwen2_5_vl", workdir / "tiny", seed=0)
    rng = np.random.default_rng(0)
    path = write_video(workdir / "budget.mp4", rng.integers(0, 255, (256, 448, 448, 3), dtype=np.uint8), fps=4.0)
    builder = PromptBuilder.from_pretrained(str(model))
    frames, metadata = FrameLoader(None, VideoParams(fps=2.0, max_frames=128, max_pixels=448 * 448,
                                                     factor=builder.family.factor)).load_video(path)
    text = "<video>\nWhen does the square appear?"
    light = builder.expand(text, [metadata], [], sample_id="budget")
    heavy = builder.attach_pixels(light, [VideoInput(frames, metadata)], [])
    response = list(range(256))
    after = len(pickle.dumps(TrainItem("budget", light, response, media=(MediaRef("video", key="0" * 64),)), protocol=5))
    before = len(pickle.dumps(TrainItem("budget", heavy, response), protocol=5))
    print(f"[bytes per prompt, 128 frames of {metadata.height}x{metadata.width}, {len(light.prompt_ids)} prompt "
          f"tokens] before {before / 1e6:.1f} MB, after {after / 1e6:.3f} MB: {before / after:.0f}x less", flush=True)


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
    parser.add_argument("--steps", type=int, default=3, help="timed RL steps per mode and round (after a warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of both modes")
    parser.add_argument("--tasks", type=int, default=2000, help="queue round-trip tasks")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-frames", action="store_true", help="skip the frame-cache service part")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="evr1-bench-distributed-"))
    try:
        queue_roundtrip(args.tasks, 64, args.repeats)
        rl_step(workdir, args.steps, args.rounds)
        bytes_at_budget(workdir)
        if not args.skip_frames:
            frames(workdir, args.repeats)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
