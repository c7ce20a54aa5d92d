"""One rank of the FSDP2 equivalence check (run by test_train_fsdp.py, or by hand on GPUs).

usage: python fsdp_worker.py MODEL_DIR MEDIA_DIR OUT_DIR  (env: RANK, WORLD_SIZE, MASTER_ADDR/PORT)

Every rank builds the same three samples (video, image, text) with fixed advantages; with
WORLD_SIZE=2, rank 0 trains on the video + text samples and rank 1 on the image sample, so
their micro-batches hold different modalities. The rank writes the loss and the full
(unsharded) gradients it sees after one backward to OUT_DIR/rank<R>.pt.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch


def build_items(model_dir: str, media_dir: str):
    from easyvideor1.cache import FrameLoader
    from easyvideor1.models.families import detect_family
    from easyvideor1.models.inputs import ImageInput, PromptBuilder, VideoInput
    from easyvideor1.train.actor import TrainItem
    from easyvideor1.video.metadata import ImageParams, VideoParams

    family = detect_family(model_dir)
    loader = FrameLoader(None, VideoParams(fps=4, max_frames=4, min_frames=4, min_pixels=3136, max_pixels=3136,
                                           factor=family.factor),
                         ImageParams(min_pixels=784, max_pixels=3136, factor=family.factor))
    builder = PromptBuilder.from_pretrained(model_dir)
    frames, meta = loader.load_video(Path(media_dir) / "clip.mp4")
    image, image_meta = loader.load_image(Path(media_dir) / "still.png")
    prompts = [
        builder.build("<video>\nWhat colour is the square?", [VideoInput(frames, meta)], sample_id="video"),
        builder.build("What is two plus two?", sample_id="text"),
        builder.build("<image>\nIs there a square?", images=[ImageInput(image, image_meta)], sample_id="image"),
        builder.build("<video>\nDoes it move right?", [VideoInput(frames, meta)], sample_id="video2"),
    ]
    responses = [[5, 9, 17, 3], [11, 4], [7, 7, 21, 30, 2], [8, 6, 3]]
    generator = torch.Generator().manual_seed(7)
    items = []
    for prompt, response in zip(prompts, responses):
        item = TrainItem(uid=prompt.sample_id, prompt=prompt, response=response)
        item.advantages = torch.randn(len(response), generator=generator)
        items.append(item)
    return items


def make_media(root: Path) -> Path:
    """A short red-square video and a blue-square image (PNG) under ``root``."""
    import numpy as np
    from PIL import Image

    from easyvideor1.video.encode import write_video

    root.mkdir(parents=True, exist_ok=True)
    frames = np.zeros((8, 64, 64, 3), dtype=np.uint8)
    for t in range(8):
        frames[t, 10:40, 4 + 3 * t:34 + 3 * t] = (230, 30, 30)
    write_video(root / "clip.mp4", frames, fps=4)
    still = np.zeros((56, 56, 3), dtype=np.uint8)
    still[8:30, 8:30] = (40, 80, 240)
    Image.fromarray(still).save(root / "still.png")
    return root


def run_world(world_size: int, model_dir: Path, media: Path, out: Path, *, port: int, precision: str = "fp32",
              mixed: bool = False, frozen: bool = False, timeout: float = 300) -> dict:
    """Start ``world_size`` ranks of this script; return rank 0's saved loss and gradients
    (``frozen``: with worker.actor.freeze_vision_tower).

    Raises TimeoutError if the world hangs (all ranks are killed) and RuntimeError naming the
    failing rank's output tail if one fails.
    """
    launch_world(__file__, [str(model_dir), str(media), str(out)], world_size, port, timeout,
                 EVR1_FSDP_PRECISION=precision, EVR1_FSDP_MIXED="1" if mixed else "0",
                 EVR1_FSDP_FREEZE_VISION="1" if frozen else "0")
    suffix = ("-mixed" if mixed else "") + ("-frozen" if frozen else "")
    return torch.load(out / f"world{world_size}-{precision}{suffix}.pt", weights_only=True)


def one_rank_and_two(model_dir: Path, media: Path, out: Path, ports: tuple[int, int], **options) -> tuple[dict, dict]:
    """Run the check on one rank and on two (``run_world`` options); assert that both saw the same
    loss and the same gradients, by name; return (one rank's, two ranks') results."""
    import math

    single = run_world(1, model_dir, media, out, port=ports[0], **options)
    sharded = run_world(2, model_dir, media, out, port=ports[1], **options)
    assert math.isclose(sharded["loss"], single["loss"], rel_tol=1e-5, abs_tol=1e-7), (sharded["loss"], single["loss"])
    assert set(sharded["grads"]) == set(single["grads"])
    for name, grad in single["grads"].items():
        torch.testing.assert_close(sharded["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)
    return single, sharded


def launch_world(script: str, argv: list[str], world_size: int, port: int, timeout: float, **env_extra: str) -> None:
    """Run ``world_size`` ranks of ``script`` (torchrun-style env) to completion.

    Raises TimeoutError if the world hangs (all ranks are killed) and RuntimeError naming the
    failing rank's output tail if one fails.
    """
    import subprocess

    procs = []
    for rank in range(world_size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1", **env_extra)
        procs.append(subprocess.Popen([sys.executable, script, *argv], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise TimeoutError(f"FSDP world of {world_size} hung (killed after {timeout}s)") from None
    for rank, (proc, text) in enumerate(zip(procs, outputs)):
        if proc.returncode != 0:
            raise RuntimeError(f"rank {rank} of {world_size} failed:\n{text[-4000:]}")


def full_grads(actor) -> dict:
    """The unsharded gradients (a collective under FSDP: every rank calls it)."""
    grads = {}
    for name, param in actor.model.named_parameters():
        grad = param.grad
        if grad is not None:
            grads[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).detach().float().cpu()
    return grads


def resume_checks(actor, cfg, world, model_dir: str) -> dict:
    """With the vision tower frozen: the actor's own trainer state loads back, and an unfrozen
    actor's is refused with the reason (on every rank, no hang)."""
    from easyvideor1.errors import ConfigError
    from easyvideor1.train.actor import Actor

    def as_saved(state: dict) -> dict:
        # Rank 0 holds the full state and writes the checkpoint; every rank resumes from that file.
        if world.distributed:
            holder = [state]
            torch.distributed.broadcast_object_list(holder, src=0)
            state = holder[0]
        return state

    actor.load_trainer_state(as_saved(actor.trainer_state()))
    unfrozen_cfg = cfg.worker.actor.model_copy(update={"freeze_vision_tower": False})
    unfrozen = Actor(model_dir, unfrozen_cfg, cfg.algorithm, world, total_steps=1, pad_token_id=0,
                     max_response_length=8)
    try:
        actor.load_trainer_state(as_saved(unfrozen.trainer_state()))
    except ConfigError as exc:
        return {"own_state_loaded": True, "unfrozen_state_refused": str(exc)}
    return {"own_state_loaded": True, "unfrozen_state_refused": ""}


def main() -> None:
    model_dir, media_dir, out_dir = sys.argv[1:4]
    from easyvideor1.config import load_config
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import init_world

    world = init_world("auto")
    precision = os.environ.get("EVR1_FSDP_PRECISION", "fp32")
    cfg = load_config(None, [f"worker.actor.model_path={model_dir}", "worker.actor.optim.lr=1e-12",
                             "worker.actor.optim.max_grad_norm=1e9", "worker.actor.gradient_checkpointing=false",
                             f"worker.actor.fsdp.mixed_precision={precision}", "worker.actor.fsdp.enable=auto",
                             f"worker.actor.freeze_vision_tower={os.environ.get('EVR1_FSDP_FREEZE_VISION', '0') == '1'}"])
    torch.manual_seed(0)
    actor = Actor(model_dir, cfg.worker.actor, cfg.algorithm, world, total_steps=1, pad_token_id=0,
                  max_response_length=8)
    items = build_items(model_dir, media_dir)
    # Old log-probs = current ones: ratio 1, so the loss is the plain policy gradient.
    for item, lp in zip(items, actor.compute_log_probs(items)):
        item.old_log_probs = lp
    if world.world_size == 2:
        # Rank 0: video + text; rank 1: image + text, and for the mixed case also a video, so
        # one rank holds both modalities while the other holds one.
        mixed = os.environ.get("EVR1_FSDP_MIXED") == "1"
        items = [items[0], items[1]] if world.rank == 0 else ([items[2], items[3]] if mixed else [items[2]])
    elif os.environ.get("EVR1_FSDP_MIXED") != "1":
        items = items[:3]
    stats = actor._optimizer_step(items)  # its metrics are over all ranks already
    grads = full_grads(actor)
    # The engine's copy (cast on the device, one tensor at a time) against the checkpoint's.
    fp32, bf16 = actor.full_state_dict(), actor.full_state_dict(torch.bfloat16)
    engine_copy_exact = set(fp32) == set(bf16) and all(
        bf16[k].dtype == (torch.bfloat16 if v.is_floating_point() else v.dtype)
        and torch.equal(bf16[k], v.to(bf16[k].dtype)) for k, v in fp32.items())
    resume = resume_checks(actor, cfg, world, model_dir) if cfg.worker.actor.freeze_vision_tower else {}
    if world.rank == 0:
        suffix = ("-mixed" if os.environ.get("EVR1_FSDP_MIXED") == "1" else "") + \
            ("-frozen" if os.environ.get("EVR1_FSDP_FREEZE_VISION") == "1" else "")
        torch.save({"loss": stats["actor/pg_loss"], "grads": grads, "engine_copy_exact": engine_copy_exact,
                    "state_tensors": len(fp32), **resume},
                   Path(out_dir) / f"world{world.world_size}-{precision}{suffix}.pt")
    if world.distributed:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
