"""One update of the actor with the shared-prefix layout on or off (run in-process by
test_shared_prefix_update.py, or as the ranks of an FSDP world through fsdp_worker.launch_world).

usage: python shared_prefix_worker.py MODEL_DIR MEDIA_DIR OUT_FILE SHARED [OVERRIDE ...]
       (env: RANK, WORLD_SIZE, MASTER_ADDR/PORT)

Three groups (a video question with three responses, the last one offline as mix-policy puts
it, an image question with two, a text question with one), random per-token advantages and old
log-probs off the current ones (so clipping, dual-clip and the ratios are exercised); with
``algorithm.kl.enable`` the reference log-probs come from the reference model. Rank 0 writes
the update's metrics, the log-probs and the full gradients to OUT_FILE.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fsdp_worker import full_grads  # noqa: E402

GROUPS = [("video", [[5, 9, 17, 3], [11, 4], [7, 7, 21, 30, 2]]), ("image", [[8, 6, 3], [12, 13]]),
          ("text", [[14, 15, 16]])]


def build_group_items(model_dir: str, media_dir: str):
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
    prompts = {"video": builder.build("<video>\nWhat colour is the square?", [VideoInput(frames, meta)],
                                      sample_id="video"),
               "image": builder.build("<image>\nIs there a square?", images=[ImageInput(image, image_meta)],
                                      sample_id="image"),
               "text": builder.build("What is two plus two?", sample_id="text")}
    generator = torch.Generator().manual_seed(7)
    items = []
    for name, responses in GROUPS:
        for k, response in enumerate(responses):
            item = TrainItem(uid=f"g-{name}", prompt=prompts[name], response=response,
                             is_offline=name == "video" and k == len(responses) - 1)
            item.advantages = torch.randn(len(response), generator=generator)
            items.append(item)
    # A shuffled batch: the members of a group are not next to each other.
    order = [0, 3, 5, 1, 4, 2]
    return [items[i] for i in order]


def run_update(model_dir: str, media_dir: str, shared: bool, overrides: list[str], world) -> dict:
    from easyvideor1.config import load_config
    from easyvideor1.train.actor import Actor

    cfg = load_config(None, [f"worker.actor.model_path={model_dir}", "worker.actor.optim.lr=1e-12",
                             "worker.actor.optim.max_grad_norm=1e9", "worker.actor.gradient_checkpointing=false",
                             "worker.actor.mini_batch_size=3", "worker.actor.fsdp.enable=auto",
                             f"worker.actor.shared_prefix={str(shared).lower()}", *overrides])
    torch.manual_seed(0)
    actor = Actor(model_dir, cfg.worker.actor, cfg.algorithm, world, total_steps=1, pad_token_id=0,
                  max_response_length=8)
    assert actor.shared == shared
    items = build_group_items(model_dir, media_dir)
    current = actor.compute_log_probs(items)
    generator = torch.Generator().manual_seed(11)
    for item, lp in zip(items, current):
        item.old_log_probs = lp + 0.6 * torch.randn(len(lp), generator=generator)
    if cfg.algorithm.kl.enable:
        if not actor.sharded:  # a reference off the policy, so that the KL has a gradient
            with torch.no_grad():
                for p in actor.ref_model.parameters():
                    p.add_(0.01 * torch.randn(p.shape, generator=generator).to(p.dtype))
        for item, lp in zip(items, actor.compute_log_probs(items, reference=True)):
            item.ref_log_probs = lp
    stats = actor.update(items, seed=0)
    return {"stats": stats, "log_probs": [lp.clone() for lp in current], "grads": full_grads(actor),
            "micro_batches": actor.last_log_prob_shard}


def main() -> None:
    model_dir, media_dir, out_file, shared = sys.argv[1:5]
    from easyvideor1.train.distributed import init_world

    world = init_world("auto")
    result = run_update(model_dir, media_dir, shared == "1", sys.argv[5:], world)
    if world.rank == 0:
        torch.save(result, out_file)
    if world.distributed:
        torch.distributed.barrier()


if __name__ == "__main__":
    main()
