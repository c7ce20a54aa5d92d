"""FSDP2 on CPU (gloo): two ranks with different modalities per rank give the same loss and
gradients as one process on the whole batch, and never hang."""

import pytest
import torch
from fsdp_worker import make_media, one_rank_and_two
from servers import free_port


@pytest.mark.parametrize("mixed", [False, True], ids=["one-modality-per-rank", "both-modalities-on-one-rank"])
def test_two_ranks_match_one(tiny_model_dir, tmp_path, mixed):
    media = make_media(tmp_path / "media")
    single, sharded = one_rank_and_two(tiny_model_dir, media, tmp_path, (free_port(), free_port()), mixed=mixed)
    for world in (single, sharded):  # the bf16 copy for a weight push equals the cast checkpoint copy
        assert world["state_tensors"] > 0 and world["engine_copy_exact"]
    vision = [n for n in single["grads"] if "visual" in n]
    assert vision and any(float(single["grads"][n].abs().sum()) > 0 for n in vision)

def test_padding_free_update_matches_padded(tiny_model_dir, tmp_path):
    """One optimizer step on mixed video/text/image items: packed and padded give the same loss
    and gradient norm."""
    from fsdp_worker import build_items

    from easyvideor1.config import load_config
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import init_world

    media = make_media(tmp_path / "media")
    stats = {}
    for packed in (False, True):
        cfg = load_config(None, [f"worker.actor.model_path={tiny_model_dir}", "worker.actor.optim.lr=1e-12",
                                 "worker.actor.gradient_checkpointing=false",
                                 f"worker.actor.padding_free={str(packed).lower()}"])
        torch.manual_seed(0)
        actor = Actor(str(tiny_model_dir), cfg.worker.actor, cfg.algorithm, init_world("cpu"), total_steps=1,
                      pad_token_id=0, max_response_length=8)
        items = build_items(str(tiny_model_dir), str(media))
        for item, lp in zip(items, actor.compute_log_probs(items)):
            item.old_log_probs = lp
        stats[packed] = actor._optimizer_step(items)
    assert stats[True]["actor/pg_loss"] == pytest.approx(stats[False]["actor/pg_loss"], rel=1e-4, abs=1e-6)
    assert stats[True]["actor/grad_norm"] == pytest.approx(stats[False]["actor/grad_norm"], rel=1e-4)


def test_non_finite_update_is_skipped(tiny_model_dir, tmp_path):
    from fsdp_worker import build_items

    from easyvideor1.config import load_config
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import init_world

    cfg = load_config(None, [f"worker.actor.model_path={tiny_model_dir}", "worker.actor.optim.lr=1e-2",
                             "worker.actor.gradient_checkpointing=false"])
    actor = Actor(str(tiny_model_dir), cfg.worker.actor, cfg.algorithm, init_world("cpu"), total_steps=1,
                  pad_token_id=0, max_response_length=8)
    items = build_items(str(tiny_model_dir), str(make_media(tmp_path / "media")))
    for item, lp in zip(items, actor.compute_log_probs(items)):
        item.old_log_probs = lp
    items[0].advantages = torch.full_like(items[0].advantages, float("nan"))
    before = {k: v.clone() for k, v in actor.full_state_dict().items()}
    stats = actor._optimizer_step(items)
    assert stats.get("skipped") == 1.0
    for name, value in actor.full_state_dict().items():
        assert torch.equal(value, before[name]), f"{name} changed by a skipped update"
