"""Data-parallel scaling of the actor update: one GPU on the whole batch vs two, each on its shard.

The same batch (``--sequences`` responses to video questions, a Qwen2.5-VL-3B-shaped random
model with ``--layers`` decoder layers) goes through the trainer's ``Actor`` (FSDP2, bf16
mixed precision, packed attention, gradient checkpointing): old log-probs, then ``update``
(one optimizer step), timed after a warm-up, in a world of 1 rank and then of 2. With the
split each rank forwards about half of the tokens, so the update should take about half as
long; the ratio printed is the scaling (2.0 is perfect).

usage (2 GPUs): python benchmarks/gpu_dp_scaling.py [--sequences 16] [--layers 12] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model(root: Path, layers: int) -> Path:
    """The tiny model's tokenizer and processor with a 3B-shaped random network."""
    import torch
    from gpu_actor_update import qwen25_vl_3b_config
    from transformers import Qwen2_5_VLForConditionalGeneration

    from easyvideor1.models.inputs import PromptBuilder
    from easyvideor1.models.tiny import build_tiny_model

    model_dir = build_tiny_model("qwen2_5_vl", root / "model", seed=0)
    if layers == 0:  # a CPU smoke run: the tiny network itself
        return model_dir
    tok = PromptBuilder.from_pretrained(str(model_dir)).tokenizer
    ids = {name: tok.convert_tokens_to_ids(token) for name, token in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(qwen25_vl_3b_config(ids, layers)).to(torch.bfloat16)
    for stale in model_dir.glob("*.safetensors*"):
        stale.unlink()
    model.save_pretrained(model_dir)
    return model_dir


def build_items(model_dir: Path, root: Path, sequences: int, frames: int, response: int) -> Path:
    """``sequences`` video questions (clips of different lengths) with random responses."""
    import torch

    from easyvideor1.cache import FrameLoader
    from easyvideor1.data.synth import make_long_video
    from easyvideor1.models.inputs import PromptBuilder, VideoInput
    from easyvideor1.train.actor import TrainItem
    from easyvideor1.video.metadata import VideoParams

    builder = PromptBuilder.from_pretrained(str(model_dir))
    rng = torch.Generator().manual_seed(0)
    items = []
    for k in range(sequences):
        count = frames // 2 + (k % 4) * frames // 6  # unequal lengths: the split has to balance
        video = make_long_video(root / f"clip{k}.mp4", seconds=count / 2, fps=30, width=672, height=392, seed=k)
        params = VideoParams(fps=2, min_frames=4, max_frames=count, min_pixels=28 * 28, max_pixels=672 * 392,
                             factor=28)
        clip, meta = FrameLoader(None, params).load_video(video)
        prompt = builder.build("<video>\nDescribe how the scene moves.", [VideoInput(clip, meta)], sample_id=str(k))
        tokens = [int(t) for t in torch.randint(10, 400, (response,), generator=rng)]
        item = TrainItem(uid=f"q{k // 2}-{k % 2}", prompt=prompt, response=tokens)
        item.advantages = torch.randn(response, generator=rng)
        items.append(item)
    path = root / "items.pt"
    torch.save(items, path)
    return path


def worker(model_dir: str, items_path: str, out: str, steps: int, budget: int) -> None:
    import torch

    from easyvideor1.config import load_config
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import init_world

    world = init_world("auto")
    items = torch.load(items_path, weights_only=False)
    cfg = load_config(None, [
        f"worker.actor.model_path={model_dir}", "worker.actor.fsdp.enable=auto",
        "worker.actor.fsdp.mixed_precision=bf16", "worker.actor.gradient_checkpointing=true",
        "worker.actor.attention=packed", f"worker.actor.micro_batch_token_budget={budget}",
        f"worker.actor.mini_batch_size={len(items)}", "algorithm.kl.enable=false", "worker.actor.optim.lr=1e-6"])
    actor = Actor(model_dir, cfg.worker.actor, cfg.algorithm, world, total_steps=steps + 1, pad_token_id=0,
                  max_response_length=max(len(it.response) for it in items))
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)

    def timed(fn):
        sync()
        started = time.perf_counter()
        result = fn()
        sync()
        return time.perf_counter() - started, result

    log_prob_s, old = [], None
    update_s, metrics = [], {}
    for step in range(steps + 1):  # the first round warms up (allocator, kernels)
        seconds, old = timed(lambda: actor.compute_log_probs(items))
        for item, lp in zip(items, old):
            item.old_log_probs = lp
        useconds, metrics = timed(lambda step=step: actor.update(items, seed=step))
        if step:
            log_prob_s.append(seconds)
            update_s.append(useconds)
    if world.rank == 0:
        Path(out).write_text(json.dumps({
            "world": world.world_size, "log_prob_s": log_prob_s, "update_s": update_s,
            "tokens": sum(it.length for it in items),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0,
            "metrics": {k: v for k, v in metrics.items() if k.startswith(("dp/", "actor/pg_loss", "actor/grad"))},
        }))
    if world.distributed:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def run_world(size: int, model_dir: Path, items: Path, out: Path, steps: int, budget: int) -> dict:
    port = free_port()
    procs = []
    for rank in range(size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", str(model_dir), str(items), str(out),
                                       str(steps), str(budget)], env=env))
    for rank, proc in enumerate(procs):
        if proc.wait(timeout=1800) != 0:
            for other in procs:
                other.kill()
            raise RuntimeError(f"rank {rank} of a world of {size} failed")
    return json.loads(out.read_text())


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        model_dir, items, out, steps, budget = sys.argv[2:7]
        worker(model_dir, items, out, int(steps), int(budget))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--frames", type=int, default=48, help="frames of the longest clip (2 fps)")
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument("--layers", type=int, default=12, help="0: the tiny model (a CPU smoke run)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--budget", type=int, default=24576, help="micro-batch token budget")
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        model_dir = build_model(root, args.layers)
        items = build_items(model_dir, root, args.sequences, args.frames, args.response)
        print(f"model and {args.sequences} sequences built in {time.perf_counter() - started:.0f} s", flush=True)
        results = {size: run_world(size, model_dir, items, root / f"world{size}.json", args.steps, args.budget)
                   for size in (1, args.ranks)}
    one, many = results[1], results[args.ranks]
    print(f"batch: {args.sequences} sequences, {one['tokens']} tokens; {args.layers} decoder layers; "
          f"median of {args.steps} after a warm-up")
    for size, result in results.items():
        upd, lp = statistics.median(result["update_s"]), statistics.median(result["log_prob_s"])
        print(f"world {size}: update {upd:6.2f} s ({result['tokens'] / upd:8.0f} tokens/s), old log-probs "
              f"{lp:5.2f} s, peak {result['peak_gib']:.0f} GiB (rank 0)")
    for key, value in sorted(many["metrics"].items()):
        if key.startswith("dp/"):
            print(f"  {key}: {value:g}")
    print(f"loss: world 1 {one['metrics'].get('actor/pg_loss', float('nan')):.6g}, world {args.ranks} "
          f"{many['metrics'].get('actor/pg_loss', float('nan')):.6g}")
    update_scaling = statistics.median(one["update_s"]) / statistics.median(many["update_s"])
    log_prob_scaling = statistics.median(one["log_prob_s"]) / statistics.median(many["log_prob_s"])
    print(f"scaling with {args.ranks} ranks: update {update_scaling:.2f}x, old log-probs {log_prob_scaling:.2f}x "
          f"(perfect: {args.ranks:.1f}x)")


if __name__ == "__main__":
    main()
