"""One full RL step on one GPU, split into its phases: rollout (vLLM), old log-probs and the update
(the actor, with vLLM asleep: colocated), and the weight sync (wake-up + in-place load), with
tokens/s/GPU (all tokens of the step's sequences, prompt and response, over the step's time).

Default: the reference paper's setting, a Qwen2.5-VL-3B-shaped model on 128-frame 392x672
videos (21.5k visual tokens each), n=8 responses of up to 256 tokens per question. The first
step warms up (CUDA kernels, allocator); the last step's split is the result. Also reports
what the adaptive keep policy chose for the update's micro-batches (models/checkpointing.py).

``--shared-prefix both`` alternates the actor's shared-prefix layout (worker.actor.shared_prefix)
off and on from step to step in one run (after the warm-up step), so the two are measured on the
same machine and batch shapes; each row gives tokens/s of old log-probs and the update both as
forwarded (a group's prompt once when shared) and as logical tokens (prompt + response per response).

usage (GPU): python benchmarks/gpu_rl_step.py --model DIR [--frames 128 --height 392 --width 672]
             [--questions 1 --n 8] [--max-response 256] [--steps 2] [--transport auto|parts|shm]
             [--shared-prefix on|off|both]
       CPU smoke: python benchmarks/gpu_rl_step.py --smoke
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
    actor_peak_gib,
    fill_frame_cache,
    markdown_table,
    on_gpu,
    run_config,
    synthetic_video_tasks,
)

PHASES = ["rollout_s", "log_prob_s", "update_s", "weight_sync_s", "step_s"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke mode: tiny model, small videos")
    ap.add_argument("--frames", type=int, default=128)
    ap.add_argument("--height", type=int, default=392)
    ap.add_argument("--width", type=int, default=672)
    ap.add_argument("--questions", type=int, default=1)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-response", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--transport", default="auto", choices=("auto", "parts", "shm"))
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument("--compile", action="store_true", help="worker.actor.compile=true")
    ap.add_argument("--keep-policy", default="auto", choices=("auto", "fixed", "adaptive"))
    ap.add_argument("--shared-prefix", default="on", choices=("on", "off", "both"),
                    help="both: alternate off/on per step after the first (use --steps 5 or more)")
    ap.add_argument("--workdir")
    ap.add_argument("--out", help="write the rows as JSON lines here")
    args = ap.parse_args(argv)
    if args.smoke:
        args.frames, args.height, args.width, args.questions, args.n, args.max_response = 4, 56, 56, 2, 2, 8
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    import easyvideor1.weight_sync.host as weights
    from easyvideor1.train.trainer import RLTrainer

    weights.WEIGHT_TRANSPORT = args.transport
    gpu = on_gpu()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp)
        model = args.model
        if model is None:
            from easyvideor1.models import build_tiny_model

            model = str(build_tiny_model("qwen2_5_vl", root / "tiny", seed=0))
        data = root / "data"
        synthetic_video_tasks(data, count=max(args.questions * args.steps, 2))
        overrides = ["worker.rollout.colocate=true", "worker.rollout.sleep_level=2",
                     f"worker.actor.keep_policy={args.keep_policy}", f"worker.actor.compile={str(args.compile).lower()}",
                     # One sequence per micro-batch at 128 frames (21.8k tokens each).
                     "worker.actor.micro_batch_token_budget=32768"]
        if gpu:
            overrides += [f"worker.rollout.gpu_memory_utilization={args.gpu_memory_utilization}",
                          "worker.rollout.enforce_eager=true"]
        cfg = run_config(model=model, data=data, out_dir=root / "run", frames=args.frames, height=args.height,
                         width=args.width, questions=args.questions, n=args.n, max_response=args.max_response,
                         steps=args.steps, overrides=overrides)
        cache = fill_frame_cache(cfg, frames=args.frames, height=args.height, width=args.width)
        trainer = RLTrainer.from_config(cfg)
        setup_s = time.perf_counter() - started
        rows = []
        keep = getattr(trainer.actor, "keep_policy", None)
        choices: list[dict] = []
        if keep is not None:  # record every micro-batch's choice
            before = keep.before

            def recorded(batch):
                kept = before(batch)
                choices.append({k: (round(v, 2) if isinstance(v, float) else v) for k, v in keep.last.items()
                                if k != "size"})
                return kept

            keep.before = recorded
        try:
            while trainer.step < args.steps:
                if gpu:
                    import torch

                    torch.cuda.reset_peak_memory_stats()
                if getattr(trainer.actor, "keep_policy", None) is not None:
                    trainer.actor.keep_policy.peak_bytes = 0
                del choices[:]
                shared = _choose_shared(trainer, args.shared_prefix)
                m = trainer.train_step()
                seqs = args.questions * args.n
                tokens = m["perf/tokens_per_s"] * m["time/step_s"]
                response_tokens = m["response/length_mean"] * seqs
                row = {"step": trainer.step, **{p: round(m[f"time/{p}"], 2) for p in PHASES},
                       "frames_s": round(m["time/frames_s"], 3), "reward_s": round(m["time/reward_s"], 3),
                       "sequences": seqs, "tokens": int(tokens), "response_tokens": int(response_tokens),
                       "tokens_per_s_per_gpu": round(tokens / m["time/step_s"], 1),
                       "response_tokens_per_s": round(response_tokens / m["time/step_s"], 1),
                       "actor_peak_gib": actor_peak_gib(trainer),
                       "sync": trainer.policy_sync.last_sync,
                       "weights": getattr(trainer.policy_sync.engine, "last_update", {}),
                       "keep": choices[:4], "keep_scale": round(keep.scale, 3) if keep else None,
                       "shared_prefix": shared, **_token_rates(trainer, m, tokens)}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            trainer.close()
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(markdown_table(rows, ["step", "shared_prefix", *PHASES, "tokens", "forwarded_tokens",
                                "log_prob_tokens_per_s_logical", "log_prob_tokens_per_s_forwarded",
                                "update_tokens_per_s_logical", "update_tokens_per_s_forwarded",
                                "tokens_per_s_per_gpu", "response_tokens_per_s", "actor_peak_gib"]))
    print(json.dumps({"setup_s": round(setup_s, 1), "frame_cache": cache,
                      "seconds": round(time.perf_counter() - started, 1)}), flush=True)
    return 0 if rows and all(r["step_s"] > 0 for r in rows) else 1


def _choose_shared(trainer, mode: str) -> bool:
    """The layout of this step: fixed, or with ``both`` off on odd steps and on on even ones (the
    first step, a warm-up, runs on)."""
    actor = trainer.actor
    if not hasattr(actor, "shared"):
        return False
    if not hasattr(actor, "_bench_shared_ok"):  # what the config and model allow (train/vlm.py)
        actor._bench_shared_ok = actor.shared
    on = trainer.step % 2 == 0 if mode == "both" else mode == "on"
    actor.shared = on and actor._bench_shared_ok
    return bool(actor.shared)


def _token_rates(trainer, m: dict, logical: float) -> dict:
    """Old log-probs' and the update's tokens/s, logical (every response's whole sequence) and as
    forwarded (what the actor's last log-prob pass laid out)."""
    forwarded = float(getattr(trainer.actor, "last_log_prob_shard", {}).get("tokens", logical))
    out = {"forwarded_tokens": int(forwarded)}
    for phase, key in (("log_prob", "log_prob_s"), ("update", "update_s")):
        seconds = max(m[f"time/{key}"], 1e-9)
        out[f"{phase}_tokens_per_s_logical"] = round(logical / seconds, 1)
        out[f"{phase}_tokens_per_s_forwarded"] = round(forwarded / seconds, 1)
    return out


if __name__ == "__main__":
    sys.exit(main())
