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
    ]
    responses = [[5, 9, 17, 3], [11, 4], [7, 7, 21, 30, 2]]
    generator = torch.Generator().manual_seed(7)
    items = []
    for prompt, response in zip(prompts, responses):
        item = TrainItem(uid=prompt.sample_id, prompt=prompt, response=response)
        item.advantages = torch.randn(len(response), generator=generator)
        items.append(item)
    return items


def main() -> None:
    model_dir, media_dir, out_dir = sys.argv[1:4]
    from easyvideor1.config import load_config
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import init_world

    world = init_world("auto")
    cfg = load_config(None, [f"worker.actor.model_path={model_dir}", "worker.actor.optim.lr=1e-12",
                             "worker.actor.optim.max_grad_norm=1e9", "worker.actor.gradient_checkpointing=false",
                             "worker.actor.fsdp.mixed_precision=fp32"])
    torch.manual_seed(0)
    actor = Actor(model_dir, cfg.worker.actor, cfg.algorithm, world, total_steps=1, pad_token_id=0,
                  max_response_length=8)
    items = build_items(model_dir, media_dir)
    # Old log-probs = current ones: ratio 1, so the loss is the plain policy gradient.
    for item, lp in zip(items, actor.compute_log_probs(items)):
        item.old_log_probs = lp
    if world.world_size == 2:
        items = [items[0], items[1]] if world.rank == 0 else [items[2]]
    stats = actor._optimizer_step(items)
    loss = torch.tensor([stats["actor/pg_loss"]], dtype=torch.float64, device=world.device)
    if world.distributed:
        torch.distributed.all_reduce(loss)
    grads = {}
    for name, param in actor.model.named_parameters():
        grad = param.grad
        if grad is None:
            continue
        grads[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).detach().float().cpu()
    if world.rank == 0:
        torch.save({"loss": float(loss.item()), "grads": grads}, Path(out_dir) / f"world{world.world_size}.pt")
    if world.distributed:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
