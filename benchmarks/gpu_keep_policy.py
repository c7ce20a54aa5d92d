"""The actor update with full checkpointing vs the adaptive keep policy, side by side in one process.

The trainer's path (``train/actor.Actor``: packed attention, bf16 autocast, AdamW) on a
Qwen2.5-VL-3B-shaped model, one sample per step (a 392x672 video at 2 fps: 128 / 256 / 512
frames, i.e. ~21.8k / 43k / 86k tokens, plus a 256-token response), one forward + backward +
AdamW step per configuration:

* full: every decoder layer and vision block recomputes its forward in backward;
* adaptive: ``worker.actor.keep_policy=adaptive`` (models/checkpointing.py) chooses how many
  layers keep their activations from the free memory and the micro-batch's tokens/patches, a
  fresh policy (the first micro-batch of a run: nothing measured yet);
* fitted: the adaptive run's policy once more, after it measured that micro-batch, with its
  full-checkpointing base fitted to the measurement (``base_scale`` down to
  ``--fitted-base-floor``; the trainer's default keeps the base at the estimate or above).

A configuration that runs out of memory is reported as such and the next one runs. The frames
are synthetic arrays (no decoding: the benchmark is the update). Reported per configuration:
step time, this process's peak GiB, the layers kept, the policy's budget and prediction, and
adaptive/full ratios.

``--offload-8b``: a Qwen3-VL-8B-shaped random model with ``worker.actor.fsdp.enable=on`` and
``fsdp.cpu_offload=true`` on one GPU (FSDP2 with one rank: parameters, gradients and AdamW
state on the host, the optimizer step on the CPU), one real update at ``--offload-frames``.
fp32 parameters + gradients + AdamW state take 16 B per parameter on the host (8.8 B
parameters: 140 GB); when the host has less available, the decoder is cut to the layers that
fit and the row says so. Under ``torchrun --nproc-per-node N`` each rank holds 1/N of it.

usage (GPU): python benchmarks/gpu_keep_policy.py --model M3B [--frames 128,256,512] [--deadline-s 240]
             python benchmarks/gpu_keep_policy.py --offload-8b [--offload-frames 64] [--workdir /tmp/w8b]
       CPU smoke: python benchmarks/gpu_keep_policy.py --smoke [--offload-8b]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpu_rl import (  # noqa: E402
    QWEN3_VL_8B_TEXT,
    QWEN3_VL_8B_VISION,
    host_available_bytes,
    host_peak_gib,
    markdown_table,
    model_parameters,
    scaled_config,
    write_random_checkpoint,
)

GIB = 1 << 30
COLUMNS = [
    "frames",
    "tokens",
    "patches",
    "policy",
    "status",
    "step_s",
    "peak_gib",
    "kept_lm",
    "kept_vision",
    "budget_gib",
    "predicted_gib",
    "measured_gib",
    "base_scale",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model", help="a Qwen2.5-VL-3B-shaped checkpoint (.gpu/make_m3b.py); default: a tiny one"
    )
    ap.add_argument("--smoke", action="store_true", help="CPU smoke mode: tiny model, tiny videos")
    ap.add_argument("--frames", default="128,256,512", help="comma-separated frame counts")
    ap.add_argument("--height", type=int, default=392)
    ap.add_argument("--width", type=int, default=672)
    ap.add_argument("--response", type=int, default=256)
    ap.add_argument("--policies", default="full,adaptive,fitted",
                    help="fitted: the adaptive run's policy again, after it measured one micro-batch")
    ap.add_argument("--fitted-base-floor", type=float, default=0.25,
                    help="fitted: the lowest the measured base may scale the estimate")
    ap.add_argument(
        "--activation-budget-gib",
        type=float,
        help="worker.actor.activation_budget_gib (default: "
        "the free memory; the CPU smoke mode sets 1 so the policy has something to choose)",
    )
    ap.add_argument(
        "--deadline-s", type=float, default=240.0, help="skip configurations that would end later"
    )
    ap.add_argument(
        "--offload-8b", action="store_true", help="run the Qwen3-VL-8B cpu_offload update instead"
    )
    ap.add_argument("--offload-frames", type=int, default=64)
    ap.add_argument(
        "--offload-layers",
        type=int,
        help="decoder layers of the 8B shape (default: 36, fewer when the host has not the memory)",
    )
    ap.add_argument("--workdir", help="where the tiny model / 8B checkpoint go (default: a temporary folder)")
    ap.add_argument("--out", help="write the rows as JSON lines here")
    args = ap.parse_args(argv)
    if args.smoke:
        args.deadline_s = float("inf")  # a loaded CPU is slow; every configuration is what the smoke checks
        args.frames, args.height, args.width, args.response = "4,8", 56, 56, 8
        args.offload_frames = 4
        if args.activation_budget_gib is None:
            args.activation_budget_gib = 1.0
    return args


def synthetic_item(builder: Any, frames: int, height: int, width: int, response: int, factor: int) -> Any:
    """One TrainItem: a synthetic video (noise and a square, 2 fps metadata), a random response,
    old log-probs 0 and advantages 1 (every response token gets a gradient: ratio < 1 - clip
    with a positive advantage takes the unclipped term)."""
    import numpy as np
    import torch

    from easyvideor1.models.inputs import VideoInput
    from easyvideor1.train.actor import TrainItem
    from easyvideor1.video.metadata import VideoMetadata

    rng = np.random.default_rng(frames)
    video = rng.integers(0, 60, size=(frames, height, width, 3), dtype=np.uint8)
    video[:, height // 4 : 3 * height // 4, width // 4 : 3 * width // 4] = (220, 30, 30)
    meta = VideoMetadata(
        source_fps=2.0,
        total_frames=frames,
        duration=frames / 2.0,
        frame_indices=tuple(range(frames)),
        timestamps=tuple(i / 2.0 for i in range(frames)),
        height=height,
        width=width,
        source_height=height,
        source_width=width,
        factor=factor,
        decoder="synthetic",
    )  # built here, never decoded
    prompt = builder.build(
        "<video>\nDescribe how the scene moves.", [VideoInput(video, meta)], sample_id=f"keep-{frames}"
    )
    ids = torch.randint(10, 400, (response,), generator=torch.Generator().manual_seed(frames)).tolist()
    return TrainItem(
        uid=f"keep-{frames}",
        prompt=prompt,
        response=ids,
        advantages=torch.ones(response),
        old_log_probs=torch.zeros(response),
    )


def build_actor(model: str, overrides: list[str], *, response: int, device: str) -> tuple[Any, Any, Any]:
    from easyvideor1.config import load_config
    from easyvideor1.models.inputs import PromptBuilder
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import init_world

    cfg = load_config(
        None,
        [
            f"worker.actor.model_path={model}",
            "worker.actor.mini_batch_size=1",
            # One sequence per micro-batch whatever its length (512 frames: ~86k tokens).
            "worker.actor.micro_batch_token_budget=262144",
            "algorithm.kl.enable=false",
            f"data.max_response_length={response}",
            "trainer.total_steps=100",
            f"trainer.device={device}",
            *overrides,
        ],
    )
    builder = PromptBuilder.from_pretrained(model)
    tok = builder.tokenizer
    world = init_world(device)
    actor = Actor.from_config(
        cfg, world, pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    )
    return cfg, builder, actor


def timed_update(actor: Any, item: Any) -> dict[str, Any]:
    """One optimizer step on ``item``: seconds, peak GiB (this process), or the OOM."""
    import torch

    cuda = actor.world.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    if actor.keep_policy is not None:
        actor.keep_policy.peak_bytes = 0
    started = time.perf_counter()
    oom = None
    try:
        metrics = actor.update([item], seed=0)
        if cuda:
            torch.cuda.synchronize()
    except torch.OutOfMemoryError as exc:
        oom = str(exc).split("\n")[0][:160]
    seconds = time.perf_counter() - started
    row: dict[str, Any] = {"status": "ok" if oom is None else "oom", "step_s": round(seconds, 2)}
    if oom is not None:
        # The failed step's activations and gradients go before the next configuration starts.
        actor.optimizer.zero_grad(set_to_none=True)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        row["error"] = oom
    else:
        row["grad_norm"] = round(float(metrics.get("actor/grad_norm", float("nan"))), 4)
    if cuda:
        keep = actor.keep_policy.peak_bytes if actor.keep_policy is not None else 0
        row["peak_gib"] = round(max(torch.cuda.max_memory_allocated(), keep) / GIB, 2)
    return row


def keep_policy_run(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    from easyvideor1.models.checkpointing import make_keep_policy, set_kept_layers

    started = time.perf_counter()
    model = args.model
    if model is None:
        from easyvideor1.models import build_tiny_model

        model = str(build_tiny_model("qwen2_5_vl", root / "tiny", seed=0))
    device = "cpu" if args.smoke else "auto"
    overrides = ["worker.actor.keep_policy=adaptive"]
    if args.activation_budget_gib:
        overrides.append(f"worker.actor.activation_budget_gib={args.activation_budget_gib}")
    cfg, builder, actor = build_actor(model, overrides, response=args.response, device=device)
    factor = builder.family.factor
    frame_counts = [int(f) for f in args.frames.split(",")]
    policies = args.policies.split(",")
    print(
        json.dumps(
            {
                "setup_s": round(time.perf_counter() - started, 1),
                "model": model,
                "params_b": round(sum(p.numel() for p in actor.model.parameters()) / 1e9, 3),
            }
        ),
        flush=True,
    )
    # Warm-up on the smallest sample with full checkpointing: CUDA kernels, AdamW's state (made at
    # the first optimizer step: it then holds its memory for every configuration alike).
    actor.keep_policy = None
    set_kept_layers(actor.model, lm=0, vision=0)
    warm = timed_update(
        actor, synthetic_item(builder, min(frame_counts), args.height, args.width, args.response, factor)
    )
    print(json.dumps({"warm_up": warm}), flush=True)
    rows: list[dict[str, Any]] = []
    last_s, last_frames = warm["step_s"], min(frame_counts)
    for frames in frame_counts:
        item = synthetic_item(builder, frames, args.height, args.width, args.response, factor)
        for policy in policies:
            # The step grows at least linearly with the frames; skip what would end past the deadline.
            elapsed = time.perf_counter() - started
            estimate = last_s * frames / max(last_frames, 1)
            row: dict[str, Any] = {
                "frames": frames,
                "tokens": item.length,
                "patches": int(item.prompt.num_video_tokens * builder.family.merge_size**2),
                "policy": policy,
            }
            if elapsed + estimate > args.deadline_s:
                row["status"] = f"skipped (deadline {args.deadline_s:g} s)"
                rows.append(row)
                print(json.dumps(row), flush=True)
                continue
            if policy == "full":
                actor.keep_policy = None
                row.update(
                    dict(
                        zip(("kept_lm", "kept_vision"), set_kept_layers(actor.model, lm=0, vision=0).values())
                    )
                )
            elif policy == "fitted" and actor.keep_policy is not None:
                # The adaptive run's policy with its measurement, its full-checkpointing base
                # allowed below the estimate (models/checkpointing.py: off by default).
                actor.keep_policy.base_floor = args.fitted_base_floor
            else:  # a fresh policy per configuration: the first micro-batch of a run (no measurement yet)
                actor.keep_policy = make_keep_policy(actor.model, cfg.worker.actor, actor.world.device)
            row.update(timed_update(actor, item))
            if policy != "full" and actor.keep_policy is not None and actor.keep_policy.last:
                last = actor.keep_policy.last
                row["base_scale"] = round(actor.keep_policy.base_scale, 3)
                row.update(
                    kept_lm=last["lm"],
                    kept_vision=last["vision"],
                    budget_gib=round(last["budget_gib"], 3),
                    predicted_gib=round(last["predicted_gib"], 3),
                )
                if "peak_gib" in last:
                    row["measured_gib"] = round(last["peak_gib"], 3)
            if row["status"] == "ok":
                last_s, last_frames = row["step_s"], frames
            rows.append(row)
            print(json.dumps(row), flush=True)
        del item
    for frames in frame_counts:
        by = {r["policy"]: r for r in rows if r["frames"] == frames}
        full, adaptive = by.get("full", {}), by.get("adaptive", {})
        if full.get("status") == "ok" and adaptive.get("status") == "ok":
            ratio = {
                "frames": frames,
                "speedup_adaptive_vs_full": round(full["step_s"] / adaptive["step_s"], 3),
                "time_ratio_adaptive_over_full": round(adaptive["step_s"] / full["step_s"], 3),
            }
            if by.get("fitted", {}).get("status") == "ok":
                ratio["speedup_fitted_vs_full"] = round(full["step_s"] / by["fitted"]["step_s"], 3)
            if "peak_gib" in full and full["peak_gib"]:
                ratio["peak_ratio_adaptive_over_full"] = round(adaptive["peak_gib"] / full["peak_gib"], 3)
            rows.append(ratio)
            print(json.dumps(ratio), flush=True)
    print(markdown_table([r for r in rows if "policy" in r], COLUMNS))
    return rows


def offload_8b_run(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """One update of the Qwen3-VL-8B shape with FSDP2 cpu_offload on this process's GPU."""
    import torch

    from easyvideor1.models import build_tiny_model

    started = time.perf_counter()
    tiny = build_tiny_model("qwen3_vl", root / "tiny3", seed=0)
    if args.smoke:
        model, layers, note = str(tiny), None, "tiny qwen3_vl (smoke)"
        params = model_parameters(json.loads((tiny / "config.json").read_text()))
    else:
        import os

        ranks = int(os.environ.get("WORLD_SIZE", "1"))
        avail = host_available_bytes()
        layers = args.offload_layers or QWEN3_VL_8B_TEXT["num_hidden_layers"]

        def config(n: int) -> dict[str, Any]:
            return scaled_config(
                tiny, {**QWEN3_VL_8B_TEXT, "num_hidden_layers": n}, QWEN3_VL_8B_VISION, tie=False
            )

        full_layers = QWEN3_VL_8B_TEXT["num_hidden_layers"]
        full_params = model_parameters(config(full_layers))
        per_layer = full_params - model_parameters(config(full_layers - 1))
        # fp32 parameters, gradients and AdamW's two moments on the host, 1/ranks of them per rank;
        # 85% of what is available: the load's own copies and pinned-buffer rounding need room.
        while layers > 1 and 16 * (full_params - (full_layers - layers) * per_layer) / ranks > 0.85 * avail:
            layers -= 1
        params = full_params - (full_layers - layers) * per_layer
        note = (
            f"Qwen3-VL-8B shape ({full_params / 1e9:.2f} B parameters need {16 * full_params / GIB:.0f} GiB of "
            f"host memory for fp32 weights + grads + AdamW); host available {avail / GIB:.0f} GiB x "
            f"{ranks} rank(s): ran {layers} of 36 decoder layers ({params / 1e9:.2f} B)"
        )
        model = str(root / f"q3vl8b-{layers}")
        if not (Path(model) / "model.safetensors").exists():
            import torch.distributed as dist

            from easyvideor1.train.distributed import init_world

            world = init_world("auto")
            if world.rank == 0:
                print(
                    json.dumps({"checkpoint": write_random_checkpoint(model, tiny, config(layers))}),
                    flush=True,
                )
            if dist.is_initialized():
                dist.barrier()
    print(json.dumps({"offload_note": note}), flush=True)
    device = "cpu" if args.smoke else "auto"
    cfg, builder, actor = build_actor(
        model,
        ["worker.actor.fsdp.enable='on'", "worker.actor.fsdp.cpu_offload=true"],
        response=args.response,
        device=device,
    )
    setup_s = time.perf_counter() - started
    opt_seconds: list[float] = []
    step = actor.optimizer.step

    def timed_step(*a: Any, **k: Any) -> Any:  # the CPU-side AdamW step's share of the update
        t0 = time.perf_counter()
        out = step(*a, **k)
        opt_seconds.append(time.perf_counter() - t0)
        return out

    actor.optimizer.step = timed_step
    # Qwen3-VL's factor is 32: 384x672 is the 392x672 of the 3B runs on its grid.
    height, width = (64, 64) if args.smoke else (384, 672)
    item = synthetic_item(builder, args.offload_frames, height, width, args.response, builder.family.factor)
    row: dict[str, Any] = {
        "offload_8b": True,
        "frames": args.offload_frames,
        "tokens": item.length,
        "params_b": round(params / 1e9, 3),
        "layers": layers,
        "setup_s": round(setup_s, 1),
    }
    row.update(timed_update(actor, item))
    row["optimizer_step_s"] = round(sum(opt_seconds), 2)
    row["host_peak_gib"] = host_peak_gib()
    row["param_device"] = str(next(actor.model.parameters()).device)
    row["fsdp"] = actor.sharded and type(actor.model).__name__.startswith("FSDP")
    if actor.keep_policy is not None and actor.keep_policy.last:
        row.update(kept_lm=actor.keep_policy.last["lm"], kept_vision=actor.keep_policy.last["vision"])
    if torch.cuda.is_available():
        row["gpu_peak_gib"] = row.pop("peak_gib", None)
    row["note"] = note
    print(json.dumps(row), flush=True)
    return [row]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp)
        root.mkdir(parents=True, exist_ok=True)
        rows = offload_8b_run(args, root) if args.offload_8b else keep_policy_run(args, root)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(json.dumps({"seconds": round(time.perf_counter() - started, 1)}), flush=True)
    measured = [r for r in rows if "status" in r]
    return 0 if measured and any(r["status"] == "ok" for r in measured) else 1


if __name__ == "__main__":
    sys.exit(main())
