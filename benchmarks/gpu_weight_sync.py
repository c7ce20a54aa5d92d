"""In-place weight sync into vLLM at a real model size: time per GB, by source and transport.

One vLLM engine on ``--model``; the same weights pushed from every kind of actor state dict —
bf16 on the host (an unsharded bf16 actor), fp32 on the host (an fp32-master actor's full state
dict: cast on the way), and FSDP2 shards (DTensors on the GPU, gathered and cast part by part) —
through each transport: safetensors bytes in parts below vLLM's RPC limit (whole layers
together), and one file in /dev/shm. Before each timed push the engine gets other weights (so
every push really changes them); after it, a greedy video request's log-probs must equal the
engine's own on the original weights after a prefix-cache reset (like-for-like prefill).

usage (GPU): python benchmarks/gpu_weight_sync.py --model DIR [--sources bf16,fp32,fsdp2]
             [--transports parts,shm] [--part-gib 2]
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke mode: a tiny model forced into >= 3 parts")
    ap.add_argument("--sources", default="bf16,fp32,fsdp2")
    ap.add_argument("--transports", default="parts,shm")
    ap.add_argument("--part-gib", type=float, default=2.0, help="part limit (rollout.weights.RPC_PART_BYTES)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--height", type=int, default=252)
    ap.add_argument("--width", type=int, default=448)
    ap.add_argument("--out", help="write the rows as JSON lines here")
    return ap.parse_args(argv)


def fsdp2_state(model_dir: str, device: str):
    """The FSDP2 actor's own state dict: DTensor shards of a one-rank world on ``device``."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForImageTextToText

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    # A bf16 actor on the GPU; on CPU the fp32 the engine serves there.
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=dtype).to(device)
    for layer in model.modules():
        if type(layer).__name__ in set(model._no_split_modules or ()):
            fully_shard(layer)
    fully_shard(model)
    return model.state_dict(), model


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import numpy as np
    import torch

    import easyvideor1.rollout.weights as weights
    from easyvideor1.models.tiny import random_video_input
    from easyvideor1.rollout import RolloutRequest, SamplingConfig, VLLMEngine
    from easyvideor1.rollout.weights import load_weights

    gpu = on_gpu()
    tmp = tempfile.TemporaryDirectory()
    model = args.model
    if model is None:
        from easyvideor1.models import build_tiny_model

        model = str(build_tiny_model("qwen2_5_vl", Path(tmp.name) / "tiny", seed=0))
    base = load_weights(model)  # as saved: bf16 for the 3B shape, fp32 for a tiny model
    total = sum(t.numel() * t.element_size() for n, t in base.items() if not n.startswith("lm_head."))
    weights.RPC_PART_BYTES = total // 4 if args.smoke else int(args.part_gib * 2**30)
    kwargs = {"max_model_len": 4096, "max_num_seqs": 8}
    if gpu:
        kwargs.update(gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=True)
    engine = VLLMEngine(model, **kwargs)
    dtype = weights.torch_dtype(engine.dtype)
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

    reference = signature()
    # Other weights to move away to before each timed push, sent as a file path (fast, untimed).
    from safetensors.torch import save_file

    other = str(Path(tmp.name) / "other.safetensors")
    save_file(weights.unique_tensors({k: (v.float() * 1.02 + 0.001).to(v.dtype) if v.is_floating_point() else v
                                      for k, v in base.items()}), other)
    sources = {"bf16": lambda: {k: v.to(dtype) if v.is_floating_point() else v for k, v in base.items()},
               "fp32": lambda: {k: v.float() if v.is_floating_point() else v for k, v in base.items()},
               "fsdp2": lambda: fsdp2_state(model, "cuda" if gpu else "cpu")[0]}
    rows = []
    for source in args.sources.split(","):
        made = time.perf_counter()
        state = sources[source]()
        make_s = time.perf_counter() - made
        for transport in args.transports.split(","):
            engine.update_weights(other, version=len(rows) * 2 + 1)
            moved_ids, moved_lp = signature()
            started = time.perf_counter()
            engine.update_weights(state, version=len(rows) * 2 + 2, transport=transport)
            seconds = time.perf_counter() - started
            ids, lp = signature()
            info = engine.last_update
            row = {"source": source, "transport": transport, "via": info["via"], "parts": info["parts"],
                   "gb": info["gb"], "seconds": round(seconds, 2), "s_per_gb": round(seconds / info["gb"], 3),
                   "gb_per_s": round(info["gb"] / seconds, 2), "prepare_s": info["prepare_s"],
                   "rpc_s": info["rpc_s"], "source_made_s": round(make_s, 1),
                   "same_tokens": ids == reference[0],
                   "lp_diff_max": float(np.abs(lp - reference[1]).max()) if ids == reference[0] else None,
                   "other_weights_lp_diff": float(np.abs(moved_lp[:len(lp)] - lp[:len(moved_lp)]).max())}
            rows.append(row)
            print(json.dumps(row), flush=True)
        del state
        if gpu:
            torch.cuda.empty_cache()
    engine.close()
    print(markdown_table(rows, ["source", "transport", "parts", "gb", "seconds", "s_per_gb", "gb_per_s",
                                "prepare_s", "rpc_s", "same_tokens", "lp_diff_max", "other_weights_lp_diff"]))
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    ok = all(r["same_tokens"] and r["lp_diff_max"] <= 1e-3 for r in rows)
    if args.smoke:
        ok = ok and all(r["parts"] >= 3 for r in rows if r["transport"] == "parts")
    print(json.dumps({"ok": ok}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
