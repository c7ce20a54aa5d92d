"""The embedded RL loop, colocated on one GPU, step by step: vLLM and the actor share the device;
vLLM sleeps while the actor computes log-probs and updates, wakes for the in-place weight push
(``worker.rollout.colocate``), and the next rollouts run on the new weights.

The run is ``RLTrainer.from_config(cfg)`` (what ``evr1 train`` builds) on synthetic video tasks
whose frames come from the frame cache. Per step it prints: the weight version the engine
holds, the sync's time, device memory (all processes) while awake, asleep, once the actor has
released its cache and after the wake-up, the actor's peak, and how far vLLM's log-probs of
the sampled responses are from the trainer's on the same weights (the trainer's old log-probs
are recomputed right after each sync; the engine's prefix cache was reset by the sync, so both
are full prefills) next to how far the update then moved the policy on the same tokens.

Checks at the end: versions 1..N, memory flat from step to step, log-probs within tolerance.

usage (GPU): python benchmarks/gpu_colocated_run.py --model DIR [--steps 20] [--frames 16 --height 252
             --width 448] [--questions 4 --n 4] [--max-response 64] [--sleep-level 2] [--transport auto|parts|shm]
             [--deadline-s 540] [--out rows.jsonl]
       CPU smoke: python benchmarks/gpu_colocated_run.py --smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpu_rl import (  # noqa: E402
    LogProbProbe,
    actor_peak_gib,
    fill_frame_cache,
    markdown_table,
    on_gpu,
    run_config,
    synthetic_video_tasks,
)

COLUMNS = ["step", "version", "sync_s", "release_s", "sleep_s", "wake_s", "update_s", "gpu_awake_gib", "gpu_asleep_gib",
           "gpu_actor_released_gib", "gpu_awake_again_gib", "actor_peak_gib", "lp_gap_mean", "lp_gap_max",
           "lp_moved_mean", "rollout_s", "update_s_actor", "step_s"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model directory (default with --smoke: a tiny random model)")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke mode: tiny model, 2 steps")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--height", type=int, default=252)
    ap.add_argument("--width", type=int, default=448)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-response", type=int, default=64)
    ap.add_argument("--sleep-level", type=int, default=2, choices=(1, 2))
    ap.add_argument("--transport", default="auto", choices=("auto", "parts", "shm"))
    ap.add_argument("--lr", type=float, default=1e-4, help="large enough that bf16 weights change every step")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument("--deadline-s", type=float, default=0, help="stop starting steps after this (0: none)")
    ap.add_argument("--workdir", help="where data, cache and run go (default: a temporary folder)")
    ap.add_argument("--out", help="write one JSON line per step here")
    args = ap.parse_args(argv)
    if args.smoke:
        args.steps, args.frames, args.height, args.width = min(args.steps, 2), 4, 56, 56
        args.questions, args.n, args.max_response = 2, 2, 8
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    import easyvideor1.weight_sync.host as weights
    from easyvideor1.train.trainer import RLTrainer

    weights.WEIGHT_TRANSPORT = args.transport
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp)
        model = args.model
        if model is None:
            from easyvideor1.models import build_tiny_model

            model = str(build_tiny_model("qwen2_5_vl", root / "tiny", seed=0))
        data = root / "data"
        synthetic_video_tasks(data, count=max(2 * args.questions, 8))
        gpu = on_gpu()
        overrides = ["worker.rollout.colocate=true", f"worker.rollout.sleep_level={args.sleep_level}",
                     f"worker.actor.optim.lr={args.lr}", "worker.actor.recompute_old_log_probs=true"]
        if gpu:
            overrides += [f"worker.rollout.gpu_memory_utilization={args.gpu_memory_utilization}",
                          "worker.rollout.enforce_eager=true"]
        cfg = run_config(model=model, data=data, out_dir=root / "run", frames=args.frames, height=args.height,
                         width=args.width, questions=args.questions, n=args.n, max_response=args.max_response,
                         steps=args.steps, overrides=overrides)
        print(json.dumps({"frame_cache": fill_frame_cache(cfg, frames=args.frames, height=args.height,
                                                          width=args.width)}), flush=True)
        trainer = RLTrainer.from_config(cfg)
        setup_s = time.perf_counter() - started
        probe = LogProbProbe(trainer)
        sync, engine = trainer.policy_sync, trainer.policy_sync.engine
        rows = []
        try:
            while trainer.step < args.steps:
                if args.deadline_s and rows and time.perf_counter() - started + rows[-1]["step_s"] * 1.2 > \
                        args.deadline_s:
                    print(f"deadline: stopping after {len(rows)} steps", flush=True)
                    break
                if gpu:
                    import torch

                    torch.cuda.reset_peak_memory_stats()
                if getattr(trainer.actor, "keep_policy", None) is not None:
                    trainer.actor.keep_policy.peak_bytes = 0
                metrics = trainer.train_step()
                info = sync.last_sync
                row = {"step": trainer.step, "version": engine.policy_version,
                       "sync_s": metrics["time/weight_sync_s"], "sleep_s": info.get("sleep_s"),
                       "release_s": info.get("release_s"), "gc_s": info.get("release_gc_s"),
                       "wake_s": info.get("wake_s"), "update_s": info.get("update_s"),
                       "gpu_awake_gib": info.get("gpu_used_gib_awake"),
                       "gpu_asleep_gib": info.get("gpu_used_gib_asleep"),
                       "gpu_actor_released_gib": info.get("gpu_used_gib_actor_released"),
                       "gpu_awake_again_gib": info.get("gpu_used_gib_awake_again"),
                       "actor_peak_gib": actor_peak_gib(trainer),
                       "rollout_s": metrics["time/rollout_s"], "log_prob_s": metrics["time/log_prob_s"],
                       "update_s_actor": metrics["time/update_s"], "step_s": metrics["time/step_s"],
                       "tokens_per_s": metrics["perf/tokens_per_s"], "reward": metrics["reward/overall"],
                       **probe.step_report(), "weights": getattr(engine, "last_update", {})}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.out:
                    with open(args.out, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
        finally:
            trainer.close()
    print(markdown_table(rows, COLUMNS))
    versions = [r["version"] for r in rows]
    checks = {"steps": len(rows), "setup_s": round(setup_s, 1),
              "versions_increase": versions == list(range(1, len(rows) + 1))}
    # Memory after each wake-up, from step 2 on (step 1 allocates AdamW's state): no growth.
    awake = [r["gpu_awake_again_gib"] for r in rows[1:] if r["gpu_awake_again_gib"] is not None]
    if len(awake) >= 2:
        import numpy as np

        checks["gpu_awake_again_spread_gib"] = round(max(awake) - min(awake), 2)
        checks["gpu_growth_gib_per_step"] = round(float(np.polyfit(range(len(awake)), awake, 1)[0]), 3)
        checks["memory_flat"] = abs(checks["gpu_growth_gib_per_step"]) <= 0.25
    # Like for like: step 1 compares engine and trainer on weights both read from the checkpoint;
    # after every sync the gap must stay at that level (a missed or partial sync adds to it).
    base = rows[0]["lp_gap_mean"]
    tol = max(1.5 * base, 1e-3 if not gpu else 0.0)
    checks["lp_gap_step1"] = base
    checks["lp_gap_mean_worst"] = max(r["lp_gap_mean"] for r in rows)
    checks["lp_within_tolerance"] = checks["lp_gap_mean_worst"] <= tol
    print(json.dumps({"checks": checks, "seconds": round(time.perf_counter() - started, 1)}), flush=True)
    ok = checks["versions_increase"] and checks["lp_within_tolerance"] and checks.get("memory_flat", True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
