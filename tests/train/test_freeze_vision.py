"""worker.actor.freeze_vision_tower: the vision encoder's weights stay as loaded while the language
model trains, in one process and under FSDP2 on two ranks, and a resume that changes the choice is
refused with the reason."""

from __future__ import annotations

import pytest
import torch
from fsdp_worker import build_items, make_media, one_rank_and_two
from servers import free_port


def _actor(model_dir, *overrides):
    from easyvideor1.config import load_config
    from easyvideor1.train.actor import Actor
    from easyvideor1.train.distributed import init_world

    cfg = load_config(None, [f"worker.actor.model_path={model_dir}", "worker.actor.optim.lr=1e-2",
                             "worker.actor.gradient_checkpointing=false", *overrides])
    torch.manual_seed(0)
    return Actor(str(model_dir), cfg.worker.actor, cfg.algorithm, init_world("cpu"), total_steps=1,
                 pad_token_id=0, max_response_length=8)


def _step(actor, model_dir, media):
    items = build_items(str(model_dir), str(media))
    for item, lp in zip(items, actor.compute_log_probs(items)):
        item.old_log_probs = lp
    before = {k: v.clone() for k, v in actor.full_state_dict().items()}
    actor._optimizer_step(items)
    after = actor.full_state_dict()
    return {name: not torch.equal(after[name], value) for name, value in before.items()}


def test_frozen_vision_tower_keeps_its_weights_and_the_language_model_trains(tiny_model_dir, tmp_path):
    media = make_media(tmp_path / "media")
    frozen = _actor(tiny_model_dir, "worker.actor.freeze_vision_tower=true")
    changed = _step(frozen, tiny_model_dir, media)
    vision = [n for n in changed if ".visual." in f".{n}"]
    language = [n for n in changed if n not in vision]
    assert vision and language
    assert not any(changed[n] for n in vision), [n for n in vision if changed[n]]
    assert any(changed[n] for n in language)
    trained = sum(p.numel() for group in frozen.optimizer.param_groups for p in group["params"])
    assert trained == sum(p.numel() for n, p in frozen.model.named_parameters() if ".visual." not in f".{n}")

    # The same step without freezing moves the vision tower: the test above can fail.
    unfrozen = _step(_actor(tiny_model_dir), tiny_model_dir, media)
    assert any(unfrozen[n] for n in vision)


def test_resume_with_another_freeze_choice_is_refused(tiny_model_dir):
    from easyvideor1.errors import ConfigError

    state = _actor(tiny_model_dir).trainer_state()
    frozen = _actor(tiny_model_dir, "worker.actor.freeze_vision_tower=true")
    with pytest.raises(ConfigError, match="freeze_vision_tower"):
        frozen.load_trainer_state(state)


def test_two_ranks_match_one_with_the_vision_tower_frozen(tiny_model_dir, tmp_path):
    media = make_media(tmp_path / "media")
    single, sharded = one_rank_and_two(tiny_model_dir, media, tmp_path, (free_port(), free_port()), frozen=True)
    assert single["grads"] and not any("visual" in name for name in single["grads"])
    # Resume under FSDP too: the frozen actor's own state loads, an unfrozen one's is refused.
    for world in (single, sharded):
        assert world["own_state_loaded"]
        assert "freeze_vision_tower" in world["unfrozen_state_refused"]
