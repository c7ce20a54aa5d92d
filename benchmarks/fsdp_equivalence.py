"""FSDP2 equivalence on 1 vs 2 ranks (CPU with gloo, or GPUs with NCCL).

Two ranks get micro-batches of different modalities (rank 0: video + text, rank 1: image);
their summed loss and their gradients must equal one rank's on the whole batch: exactly (up
to float32 reduction order) with fp32, within bf16 tolerance with bf16 mixed precision.
Prints the loss of each world and the largest gradient differences.

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


def main() -> None:
    import torch
    from fsdp_worker import make_media, run_world

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
        for precision, mixed in [(p, m) for p in args.precision for m in (False, True)]:
            # mixed: one rank holds both image and video micro-batches, the other only one kind.
            single = run_world(1, model, media, root, port=free_port(), precision=precision, mixed=mixed)
            sharded = run_world(2, model, media, root, port=free_port(), precision=precision, mixed=mixed)
            worst_abs, worst_rel, worst_name = 0.0, 0.0, ""
            for name, grad in single["grads"].items():
                other = sharded["grads"][name]
                diff = float((other - grad).abs().max())
                scale = float(grad.abs().max()) or 1.0
                if diff / scale > worst_rel:
                    worst_abs, worst_rel, worst_name = diff, diff / scale, name
            print(f"[{device}] {precision}{' mixed' if mixed else ''}: loss 1 rank {single['loss']:.8f} vs 2 ranks {sharded['loss']:.8f} "
                  f"(rel diff {abs(single['loss'] - sharded['loss']) / max(abs(single['loss']), 1e-12):.2e}); "
                  f"{len(single['grads'])} gradients, worst rel diff {worst_rel:.2e} (abs {worst_abs:.2e}) "
                  f"at {worst_name}")


if __name__ == "__main__":
    main()
