"""FSDP2 data-parallel split: 2 ranks, each on its shard, vs 1 rank on the whole batch (CPU with
gloo, or GPUs with NCCL).

Both worlds get the same odd batch of five very different sequences (two videos, an image, a
one-token answer, a long text prompt); with two ranks each forwards only its shard (the image
and the videos on different ranks, unequal micro-batch counts evened out by zero-weight
padding micro-batches). Per case of tests/train/dp_worker.py (every loss aggregation mode,
GSPO with full-vocabulary KL, two PPO epochs of three mini-batches) it prints the relative
differences of the loss, KL loss and gradient norm, and the worst gradient difference; then
the old/reference log-probs and what each rank processed. Equal up to float32 reduction order
with fp32, within bf16 tolerance with bf16 mixed precision.

usage: python benchmarks/fsdp_equivalence.py [--precision fp32 bf16] [--family qwen2_5_vl]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "train"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def worst_grad(got: dict, want: dict) -> tuple[float, float, str]:
    """Largest max|a - b| / max|b| over the tensors (a missing gradient counts as zeros)."""
    import torch

    worst = (0.0, 0.0, "")
    for name in set(got) | set(want):
        a, b = got.get(name), want.get(name)
        a = torch.zeros_like(b) if a is None else a
        b = torch.zeros_like(a) if b is None else b
        diff = float((a - b).abs().max())
        ratio = diff / (float(b.abs().max()) or 1.0)
        if ratio > worst[0]:
            worst = (ratio, diff, name)
    return worst


def main() -> None:
    import torch
    from dp_worker import run_split_world
    from fsdp_worker import make_media

    from easyvideor1.models.tiny import build_tiny_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--family", default="qwen2_5_vl")
    args = parser.parse_args()
    device = f"{torch.cuda.device_count()} CUDA GPU(s)" if torch.cuda.is_available() else "CPU (gloo)"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_model(args.family, root / "model", seed=0)
        media = make_media(root / "media")
        for precision in args.precision:
            (single,) = run_split_world(1, model, media, root, port=free_port(), precision=precision)
            split = run_split_world(2, model, media, root, port=free_port(), precision=precision)
            print(f"[{device}] {precision}: 2 ranks split vs 1 rank whole batch")
            for name, want in single["cases"].items():
                got = split[0]["cases"][name]
                m, w = got["metrics"], want["metrics"]
                ratio, diff, where = worst_grad(got["grads"], want["grads"])
                print(f"  {name:24s} loss {w['actor/pg_loss']:+.8f} vs {m['actor/pg_loss']:+.8f} "
                      f"(rel {rel(m['actor/pg_loss'], w['actor/pg_loss']):.1e}), kl loss rel "
                      f"{rel(m['actor/kl_loss'], w['actor/kl_loss']):.1e}, grad norm rel "
                      f"{rel(m['actor/grad_norm'], w['actor/grad_norm']):.1e}; worst gradient rel {ratio:.1e} "
                      f"(abs {diff:.1e}) at {where}")
            for key in ("log_probs", "ref_log_probs"):
                worst = max(float((a - b).abs().max()) for a, b in zip(split[0][key], single[key]))
                print(f"  {key}: largest abs difference {worst:.1e}")
            metrics = split[0]["cases"]["token-mean"]["metrics"]
            for rank, result in enumerate(split):
                print(f"  rank {rank}: {', '.join(result['shard_uids'])}; update: "
                      f"{metrics[f'dp/rank{rank}/sequences']:.0f} sequences, {metrics[f'dp/rank{rank}/tokens']:.0f} "
                      f"tokens, {metrics[f'dp/rank{rank}/micro_batches']:.0f} micro-batches + "
                      f"{metrics[f'dp/rank{rank}/padding_micro_batches']:.0f} padding")


if __name__ == "__main__":
    main()
