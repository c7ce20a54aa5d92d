"""RL steps on one GPU with frames from the frame cache vs decoded on the fly, same trainer, same engine.

The questions point at real H.264 clips (``data.synth.make_long_video``: 30 fps, scrolling
texture) of ``--frames / 2`` seconds, sampled at 2 fps into ``--frames`` frames of
``--height x --width``. One ``RLTrainer`` (colocated vLLM, sleep level 2, the actor on the
same GPU) builds the cache before training; then the steps alternate between its cached
loader and a loader without a store (every video decoded with PyAV when its question is
drawn), after one warm-up step. Per mode, the median over its steps of:

* rollout phase: frames (load + prompt build) and generation (vLLM, n responses per question);
* old log-probs (the trainer's forward over the step's responses);
* the whole step (rollout, log-probs, update, weight sync).

The reference paper reports 1.52x (rollout), 2.85x (log-prob phase), 1.47x (whole step). Here
the trainer computes old log-probs from the prompt the rollout built, pixels included, so that
phase decodes nothing in either mode: its ratio is expected near 1.

usage (GPU): python benchmarks/gpu_rollout_cache.py --model M3B [--frames 64 --questions 4 --n 2]
             [--rounds 1] [--deadline-s 190]
       CPU smoke: python benchmarks/gpu_rollout_cache.py --smoke
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpu_rl import encode_clips, markdown_table, on_gpu, run_config  # noqa: E402

PHASES = ["frames_s", "generate_s", "rollout_phase_s", "log_prob_s", "update_s", "weight_sync_s", "step_s"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke mode: tiny model, small clips")
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--height", type=int, default=392)
    ap.add_argument("--width", type=int, default=672)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--max-response", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=1, help="measured steps per mode (after one warm-up step)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument(
        "--deadline-s",
        type=float,
        help="no new step starts past this (default: 190 s on a GPU, none in the smoke mode)",
    )
    ap.add_argument("--workdir")
    ap.add_argument("--out", help="write the rows as JSON lines here")
    args = ap.parse_args(argv)
    if args.deadline_s is None:
        args.deadline_s = float("inf") if args.smoke else 190.0
    if args.smoke:
        args.frames, args.height, args.width, args.questions, args.n, args.max_response = 4, 56, 56, 2, 2, 8
    return args


def write_clips(root: Path, *, count: int, seconds: float, width: int, height: int) -> dict[str, Any]:
    """``root/train.jsonl``: one yes/no question per real H.264 clip under ``root/media``."""
    paths = [root / "media" / f"clip{k:03d}.mp4" for k in range(count)]
    summary = encode_clips(paths, seconds=seconds, width=width, height=height)
    rows = [
        {
            "problem_id": p.stem,
            "problem": "<video>\nIs the scene moving? Answer yes or no.",
            "problem_type": "boolean",
            "answer": "yes",
            "data_type": "video",
            "videos": [f"media/{p.name}"],
        }
        for p in paths
    ]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return summary


def step_row(trainer: Any, mode: str) -> dict[str, Any]:
    m = trainer.train_step()
    row = {
        "step": trainer.step,
        "mode": mode,
        "frames_s": round(m["time/frames_s"], 3),
        "generate_s": round(m["time/rollout_s"], 3),
        "rollout_phase_s": round(m["time/frames_s"] + m["time/rollout_s"], 3),
        **{p: round(m[f"time/{p}"], 3) for p in ("log_prob_s", "update_s", "weight_sync_s", "step_s")},
        "on_the_fly_decodes": m["cache/on_the_fly_decodes"],
        "cache_hit_rate": round(m["cache/hit_rate"], 3),
    }
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp)
        data = root / "data"
        # The clips are at the frame size (the smoke mode's 56x56 is below the encoder's minimum:
        # 160x160 there, resized by the loader as any other video).
        width, height = (160, 160) if args.smoke else (args.width, args.height)
        clips = write_clips(data, count=args.questions, seconds=args.frames / 2, width=width, height=height)
        print(json.dumps({"dataset": clips}), flush=True)
        from easyvideor1.cache import FrameLoader
        from easyvideor1.train.trainer import RLTrainer

        model = args.model
        if model is None:
            from easyvideor1.models import build_tiny_model

            model = str(build_tiny_model("qwen2_5_vl", root / "tiny", seed=0))
        gpu = on_gpu()
        overrides = [
            "worker.rollout.colocate=true",
            "worker.rollout.sleep_level=2",
            "worker.actor.micro_batch_token_budget=32768",
            "data.frame_cache.workers=8",
        ]
        if gpu:
            overrides += [
                f"worker.rollout.gpu_memory_utilization={args.gpu_memory_utilization}",
                "worker.rollout.enforce_eager=true",
            ]
        steps = 1 + 2 * args.rounds
        cfg = run_config(
            model=model,
            data=data,
            out_dir=root / "run",
            frames=args.frames,
            height=args.height,
            width=args.width,
            questions=args.questions,
            n=args.n,
            max_response=args.max_response,
            steps=steps,
            overrides=overrides,
        )
        trainer = RLTrainer.from_config(cfg)  # builds the cache of every clip first (decoding each once)
        setup_s = time.perf_counter() - started
        cached = trainer.stage.loader
        decoding = FrameLoader(None, cached.video_params, cached.image_params)
        loaders = {"cached": cached, "decode": decoding}
        rows: list[dict[str, Any]] = []
        try:
            warm = step_row(trainer, "warm-up (cached)")
            order = ["decode", "cached"] * args.rounds
            for mode in order:
                if rows and time.perf_counter() - started + 1.2 * rows[-1]["step_s"] > args.deadline_s:
                    print(json.dumps({"deadline": args.deadline_s, "skipped": mode}), flush=True)
                    continue
                trainer.stage.loader = trainer.loader = loaders[mode]
                rows.append(step_row(trainer, mode))
        finally:
            trainer.close()
    medians = {
        mode: {p: statistics.median(r[p] for r in rows if r["mode"] == mode) for p in PHASES}
        for mode in ("decode", "cached")
        if any(r["mode"] == mode for r in rows)
    }
    table = [{"mode": mode, **values} for mode, values in medians.items()]
    ok = len(medians) == 2 and all(r["on_the_fly_decodes"] > 0 for r in rows if r["mode"] == "decode")
    ok = ok and all(
        r["on_the_fly_decodes"] == 0 and r["cache_hit_rate"] == 1.0 for r in rows if r["mode"] == "cached"
    )
    if len(medians) == 2:
        ratio = {
            "mode": "decode / cached",
            **{
                p: round(medians["decode"][p] / medians["cached"][p], 3) if medians["cached"][p] > 0 else None
                for p in PHASES
            },
        }
        table.append(ratio)
        print(
            json.dumps(
                {
                    "speedup_cached_vs_decode": {k: v for k, v in ratio.items() if k != "mode"},
                    "paper": {"rollout_phase_s": 1.52, "log_prob_s": 2.85, "step_s": 1.47},
                }
            ),
            flush=True,
        )
    print(markdown_table(table, ["mode", *PHASES]))
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows + table[2:]))
    print(
        json.dumps(
            {
                "setup_s": round(setup_s, 1),
                "warm_up": warm,
                "checks_ok": ok,
                "settings": {
                    "frames": args.frames,
                    "size": f"{args.height}x{args.width}",
                    "questions": args.questions,
                    "n": args.n,
                    "max_response": args.max_response,
                },
                "seconds": round(time.perf_counter() - started, 1),
            }
        ),
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
