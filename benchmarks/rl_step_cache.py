"""One RL step with the frame cache vs with on-the-fly decoding, same config, same engine.

Questions point at 640x360 30 fps H.264 clips (the size of typical training videos, scaled
down in length for a CPU); the step samples 8 frames per clip at a small pixel budget, so
the policy is tiny and decoding is a real share of the step, as it is on GPU with a large
policy and long videos. Prints the per-step times and the ratio.

usage: python benchmarks/rl_step_cache.py [--clips 8] [--seconds 10] [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def write_dataset(root: Path, clips: int, seconds: float) -> Path:
    from easyvideor1.data.synth import make_long_video

    rows = []
    for i in range(clips):
        path = make_long_video(root / f"clip{i}.mp4", seconds=seconds, fps=30, width=640, height=360, seed=i)
        rows.append({"problem_id": f"clip{i}", "problem": "<video>\nIs the video moving? Answer yes or no.",
                     "answer": "yes", "problem_type": "boolean", "videos": [path.name]})
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def step_seconds(trainer, steps: int) -> float:
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        trainer.train_step()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()

    from easyvideor1.config import load_config
    from easyvideor1.models.tiny import build_tiny_model
    from easyvideor1.rollout.vllm_engine import VLLMEngine
    from easyvideor1.train.trainer import RLTrainer

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_model("qwen2_5_vl", root / "model", seed=0)
        data = write_dataset(root, args.clips, args.seconds)
        engine = VLLMEngine(model, max_model_len=1024, seed=0)
        common = [f"data.train_files={data}", "data.max_prompt_length=1000", "data.max_response_length=8",
                  f"data.rollout_batch_size={args.clips}", "data.video_fps=1", "data.video_max_frames=8",
                  "data.video_min_frames=8", "data.video_min_pixels=3136", "data.video_max_pixels=3136",
                  f"worker.actor.model_path={model}", "worker.actor.gradient_checkpointing=false",
                  f"worker.actor.mini_batch_size={args.clips}", "worker.rollout.n=2", "trainer.loggers=[]",
                  "trainer.resume=never", "trainer.val_before_train=false"]
        timings = {}
        for name, extra in (("on-the-fly", ["data.frame_cache.store=null"]),
                            ("cached", [f"data.frame_cache.store={root / 'cache'}"])):
            cfg = load_config(None, common + extra + [f"trainer.output_dir={root / name}"])
            trainer = RLTrainer.from_config(cfg, engine=engine)
            trainer.train_step()  # warm-up: first vLLM batch, cache already built for "cached"
            timings[name] = step_seconds(trainer, args.steps)
            print(f"{name:>11}: {timings[name]:.2f} s per RL step  loader={trainer.loader.stats()}")
            trainer.rewards.close()
        engine.close()
    print(f"speed-up of one RL step with the frame cache: {timings['on-the-fly'] / timings['cached']:.2f}x "
          f"({args.clips} clips of {args.seconds:.0f} s, 640x360 30 fps)")


if __name__ == "__main__":
    main()
