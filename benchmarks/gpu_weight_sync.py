"""Colocated weight sync into vLLM at a real model size: the bucketed sync against the file path.

One vLLM engine (sleep mode, level 2, as the colocated loop runs it) and the actor's model on the
same GPU (fp32 master weights, as the trainer keeps them; ``--fsdp``: wrapped in FSDP2 on one
rank, so every tensor is gathered). Each round syncs twice per method, alternating which method
goes first (machines are noisy): once to perturbed weights (every parameter scaled, so the sync
really changes them) and once back to the original weights. A sync is what the trainer's
``PolicySync`` does after an update, timed whole: sleep already done, then wake the weights, move
them, wake the KV cache, reset the caches.

* ``file``: the path before the bucket sync: the state dict cast on the GPU, copied to the host
  tensor by tensor, one safetensors file in /dev/shm, vLLM's layerwise reload from it;
* ``buckets``: :class:`~easyvideor1.weight_sync.sender.BucketSender` through the transport
  ``EnginePolicySync`` picks (CUDA IPC on a GPU: the cast into a reusable bucket on the device,
  the engine's worker opens it by handle and loads views of it; host bytes on CPU).

After every sync back to the original weights, the engine's greedy tokens and log-probs on one
video prompt (one prompt per ``generate`` call) must equal those the fresh engine gave on the
same weights before any sync; after a sync to the perturbed weights they must differ.

usage (GPU): python benchmarks/gpu_weight_sync.py --model DIR [--rounds 3] [--bucket-mib 1024] [--fsdp]
       CPU smoke: python benchmarks/gpu_weight_sync.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpu_rl import markdown_table, on_gpu  # noqa: E402

COLUMNS = ["round", "method", "target", "sync_s", "release_s", "wake_s", "move_s", "transport", "buckets", "tensors", "gb",
           "gpu_awake_gib", "same_tokens", "lp_diff_max"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke mode: a tiny model, small buckets")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--methods", default="file,buckets")
    ap.add_argument("--bucket-mib", type=float, default=1024)
    ap.add_argument("--fsdp", action="store_true", help="the actor as FSDP2 shards of a one-rank world")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--height", type=int, default=252)
    ap.add_argument("--width", type=int, default=448)
    ap.add_argument("--out", help="write the rows as JSON lines here")
    return ap.parse_args(argv)


class _Actor:
    """What ``PolicySync.sync`` reads of an actor: its model."""

    def __init__(self, model):
        self.model = model


def load_actor(model_dir: str, device: str, fsdp: bool):
    import torch
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).to(device)
    if fsdp:
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard

        if not dist.is_initialized():
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29517")
            dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
        for layer in model.modules():
            if type(layer).__name__ in set(model._no_split_modules or ()):
                fully_shard(layer)
        fully_shard(model)
    return model


def host_state(model, dtype) -> dict:
    """The file path's state dict: each tensor gathered, cast on its device, copied to the host."""
    from easyvideor1.weight_sync.sender import clean_name

    state = {}
    for name, param in model.named_parameters():
        full = param.full_tensor() if hasattr(param, "full_tensor") else param.detach()
        state[clean_name(name)] = full.to(dtype).cpu()
    return state


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import numpy as np
    import torch

    import easyvideor1.weight_sync.host as host
    from easyvideor1.models.tiny import random_video_input
    from easyvideor1.rollout import RolloutRequest, SamplingConfig, VLLMEngine
    from easyvideor1.weight_sync.policy import EnginePolicySync, device_memory

    gpu = on_gpu()
    device = "cuda" if gpu else "cpu"
    tmp = tempfile.TemporaryDirectory()
    model_dir = args.model
    if model_dir is None:
        from easyvideor1.models import build_tiny_model

        model_dir = str(build_tiny_model("qwen2_5_vl", Path(tmp.name) / "tiny", seed=0))
    host.WEIGHT_TRANSPORT = "shm" if gpu else "auto"
    kwargs = {"max_model_len": 4096, "max_num_seqs": 8, "enable_sleep_mode": True}
    if gpu:
        kwargs.update(gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=True)
    engine = VLLMEngine(model_dir, **kwargs)
    bucket_bytes = 64 << 10 if args.smoke else int(args.bucket_mib * 2**20)
    sync = EnginePolicySync(engine, owns_engine=True, colocate=gpu, sleep_level=2, bucket_bytes=bucket_bytes)
    family = engine.family.name
    if args.smoke:
        video = random_video_input(family, 4, 1, 2, seed=1)
    else:
        f = engine.family.factor
        video = random_video_input(family, args.frames, args.height // f, args.width // f, seed=1)
    request = [RolloutRequest("v", messages="<video>Describe the video.", videos=[video])]
    greedy = SamplingConfig(max_tokens=16, temperature=0.0)

    def signature():
        engine.llm.reset_prefix_cache()  # like for like: a full prefill each time
        out = engine.generate(request, greedy)[0].completions[0]
        return out.token_ids, np.asarray(out.logprobs)

    fresh = signature()  # the fresh engine on the checkpoint's weights
    model = load_actor(model_dir, device, args.fsdp)
    actor = _Actor(model)
    params = [p for p in model.parameters()]
    original = [(p.full_tensor() if hasattr(p, "full_tensor") else p.detach()).clone() for p in params]

    def set_weights(perturbed: bool) -> None:
        with torch.no_grad():
            for p, o in zip(params, original):
                value = o * 1.02 + 0.001 if perturbed and o.is_floating_point() else o
                if hasattr(p, "full_tensor"):
                    from torch.distributed.tensor import distribute_tensor

                    value = distribute_tensor(value, p.device_mesh, p.placements)
                p.copy_(value)

    def run_sync(method: str, version: int) -> dict:
        sync.before_update()  # sleep(2): the engine drops its weights and KV cache
        if gpu:
            torch.cuda.synchronize()
        started = time.perf_counter()
        if method == "file":
            state = host_state(model, engine.weight_dtype)
            sync.push(state, version)
            del state
        else:
            sync.sync(actor, version)
        seconds = time.perf_counter() - started
        info = sync.last_sync
        update = engine.last_update or {}
        gb = update.get("gb") or round(update.get("nbytes", 0) / 1e9, 3)
        return {"sync_s": round(seconds, 3), "release_s": info.get("release_s"), "gc_s": info.get("release_gc_s"),
                "wake_s": info.get("wake_s"), "move_s": info.get("update_s"),
                "transport": update.get("transport") or update.get("via"), "buckets": update.get("buckets"),
                "tensors": update.get("tensors"), "gb": gb,
                "gpu_awake_gib": device_memory().get("gpu_used_gib")}

    rows, version = [], 0
    methods = args.methods.split(",")
    for rnd in range(args.rounds):
        order = methods if rnd % 2 == 0 else methods[::-1]
        for method in order:
            for target in ("perturbed", "original"):
                set_weights(target == "perturbed")
                version += 1
                row = {"round": rnd, "method": method, "target": target, **run_sync(method, version)}
                ids, lp = signature()
                row["same_tokens"] = ids == fresh[0]
                row["lp_diff_max"] = float(np.abs(lp - fresh[1]).max()) if row["same_tokens"] else None
                rows.append(row)
                print(json.dumps(row), flush=True)
    sync.close()
    print(markdown_table(rows, COLUMNS))
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {}
    for method in methods:
        times = [r["sync_s"] for r in rows if r["method"] == method and r["round"] > 0] or \
                [r["sync_s"] for r in rows if r["method"] == method]
        summary[f"{method}_sync_s_mean"] = round(float(np.mean(times)), 3)
    if {"file", "buckets"} <= set(methods):
        summary["speedup"] = round(summary["file_sync_s_mean"] / summary["buckets_sync_s_mean"], 1)
    exact = all(r["same_tokens"] and r["lp_diff_max"] == 0.0 for r in rows if r["target"] == "original")
    moved = all(not (r["same_tokens"] and r["lp_diff_max"] == 0.0) for r in rows if r["target"] == "perturbed")
    summary.update(exact_after_restore=exact, perturbed_changed_output=moved)
    print(json.dumps(summary), flush=True)
    return 0 if exact and moved else 1


if __name__ == "__main__":
    sys.exit(main())
