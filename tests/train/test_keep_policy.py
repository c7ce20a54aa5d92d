"""The adaptive keep policy (models/checkpointing.py) against a memory model: per micro-batch it
keeps as many layers as the budget allows and never more, decoder layers first; with costs that
were underestimated it becomes careful once it has seen one micro-batch; on the tiny model its
choice is what the layers then do."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch

from easyvideor1.config.schema import ActorConfig
from easyvideor1.models.checkpointing import (
    GIB,
    ActivationCosts,
    AdaptiveKeep,
    MicroBatchSize,
    choose_kept,
    make_keep_policy,
    micro_batch_size,
    set_kept_layers,
)

# A 3B-like memory model (bytes): 36 decoder layers, 32 vision blocks.
COSTS = ActivationCosts(lm_layer_per_token=139e3, vision_block_per_patch=66e3, base_per_token=466e3,
                        base_per_patch=240e3, per_response_token=2.7e6, fixed=7.5e9)
LM, VISION = 36, 32
SIZES = [MicroBatchSize(tokens, patches, responses)
         for tokens, patches, responses in [(600, 0, 300), (5_700, 21_500, 2_056), (21_813, 86_016, 2_056),
                                            (43_000, 172_000, 2_056), (86_000, 344_000, 257)]]


@pytest.mark.parametrize("size, budget_gib", list(itertools.product(SIZES, [8, 20, 40, 80, 120])))
def test_never_more_than_the_budget_and_nothing_left_unused(size, budget_gib):
    budget = budget_gib * GIB
    lm, vision = choose_kept(budget, size, COSTS, lm_layers=LM, vision_layers=VISION)
    assert 0 <= lm <= LM and 0 <= vision <= VISION
    if COSTS.full_checkpointing(size) > budget:
        assert (lm, vision) == (0, 0)  # full checkpointing: the best chance
        return
    assert COSTS.predict(size, lm=lm, vision=vision) <= budget
    # Maximal: one more layer of either kind would not fit (or there is none left).
    if lm < LM:
        assert vision == 0 or size.patches == 0
        assert COSTS.predict(size, lm=lm + 1, vision=vision) > budget
    if vision < VISION and size.patches:
        assert COSTS.predict(size, lm=lm, vision=vision + 1) > budget


def test_more_tokens_never_keep_more():
    budget = 80 * GIB
    kept = [choose_kept(budget, s, COSTS, lm_layers=LM, vision_layers=VISION) for s in SIZES]
    assert kept[0] == (LM, VISION)  # a short text batch keeps everything
    assert all(a[0] >= b[0] for a, b in zip(kept, kept[1:]))
    assert kept[-1] == (0, 0)


class FakeModel(torch.nn.Module):
    """Layers only: what AdaptiveKeep toggles."""

    def __init__(self):
        from transformers.modeling_layers import GradientCheckpointingLayer

        super().__init__()
        self.config = SimpleNamespace(  # the 3B shape's
            text_config=SimpleNamespace(hidden_size=2048, intermediate_size=11008, num_attention_heads=16,
                                        num_key_value_heads=2, vocab_size=151936),
            vision_config=SimpleNamespace(hidden_size=1280, intermediate_size=3420, patch_size=14,
                                          temporal_patch_size=2))
        self.model = torch.nn.Module()
        self.model.language_model = torch.nn.ModuleList(GradientCheckpointingLayer() for _ in range(LM))
        self.model.visual = torch.nn.ModuleList(GradientCheckpointingLayer() for _ in range(VISION))
        for layer in self.modules():
            if hasattr(layer, "gradient_checkpointing"):
                layer.gradient_checkpointing = True


class Batch:
    def __init__(self, size: MicroBatchSize):
        self.input_ids = torch.zeros(1, size.tokens)
        self.visual = {"pixel_values_videos": torch.zeros(size.patches, 1)} if size.patches else {}
        self.response_lengths = [size.response_tokens]


def test_underestimated_costs_are_corrected_after_one_micro_batch():
    """The device really needs 1.8x the estimate: the first micro-batch (scale 1.25) may overrun,
    every later one fits the budget as the device measures it."""
    model = FakeModel()
    budget = 60 * GIB
    policy = AdaptiveKeep(model, torch.device("cpu"), budget_bytes=budget, costs=COSTS)
    true = 1.8
    overruns = []
    for size in [SIZES[1], SIZES[2], SIZES[1], SIZES[2], SIZES[1]]:
        kept = policy.before(Batch(size))
        used = true * COSTS.predict(size, lm=kept["lm"], vision=kept["vision"])
        # Keeping nothing is full checkpointing: an overrun then is not the policy's to avoid.
        overruns.append(used > budget and (kept["lm"], kept["vision"]) != (0, 0))
        policy.observe(used)
        flags = [layer.gradient_checkpointing for layer in model.model.language_model]
        assert flags == [False] * kept["lm"] + [True] * (LM - kept["lm"])
    assert not any(overruns[1:]) and policy.last["lm"] > 0
    assert policy.scale == pytest.approx(true)


def test_an_overestimated_base_is_fitted_and_more_layers_are_kept():
    """As measured on the H200: kept layers cost what was estimated, the full-checkpointing base
    0.4x its estimate. With the base allowed below its estimate, after one micro-batch the policy
    keeps more layers, and none overruns; by default (base_floor 1) the base is never trusted lower."""
    model = FakeModel()
    size = SIZES[1]
    base = COSTS.full_checkpointing(size)
    budget = base * 1.3 + 3 * COSTS.lm_layer_per_token * size.tokens
    policy = AdaptiveKeep(model, torch.device("cpu"), budget_bytes=budget, costs=COSTS, base_floor=0.25)
    first = policy.before(Batch(size))
    kept_layers = COSTS.predict(size, lm=first["lm"], vision=first["vision"]) - base
    policy.observe(0.4 * base + kept_layers)
    assert policy.base_scale == pytest.approx(0.4) and policy.scale == 1.0
    second = policy.before(Batch(size))
    assert second["lm"] > first["lm"]
    used = 0.4 * base + (COSTS.predict(size, lm=second["lm"], vision=second["vision"]) - base)
    assert used <= budget
    default = AdaptiveKeep(model, torch.device("cpu"), budget_bytes=budget, costs=COSTS)
    default.before(Batch(size))
    default.observe(0.4 * base)
    assert default.base_scale == 1.0


def test_policy_choice_per_config():
    model = FakeModel()
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert make_keep_policy(model, ActorConfig(), cpu) is None  # auto: adaptive on CUDA only
    assert make_keep_policy(model, ActorConfig(keep_policy="fixed"), cuda) is None
    assert make_keep_policy(model, ActorConfig(gradient_checkpointing=False, keep_policy="adaptive"), cpu) is None
    policy = make_keep_policy(model, ActorConfig(keep_policy="adaptive", activation_budget_gib=2.0), cpu)
    assert isinstance(policy, AdaptiveKeep) and policy.budget() == 2 * GIB
    # The estimate from the config is the memory model's order of magnitude.
    assert 0.5 < policy.costs.lm_layer_per_token / COSTS.lm_layer_per_token < 2
    assert 0.5 < policy.costs.vision_block_per_patch / COSTS.vision_block_per_patch < 2


def test_on_the_tiny_model(tiny_model_dir):
    """The trainer's forward batch drives the choice; gradients are those of full checkpointing."""
    from transformers import AutoModelForImageTextToText

    from easyvideor1.models import collate_forward_batch, compute_log_probs
    from easyvideor1.models.inputs import PromptBuilder
    from easyvideor1.models.tiny import random_video_input

    builder = PromptBuilder.from_pretrained(tiny_model_dir)
    video = random_video_input("qwen2_5_vl", 8, 2, 2, seed=1)
    prompt = builder.build("<video>What moves?", [video], sample_id="s")
    batch = collate_forward_batch([prompt, prompt], [[5, 6, 7], [8, 9]], pad_token_id=0)
    size = micro_batch_size(batch)
    assert size.tokens == batch.input_ids.numel() and size.patches > 0 and size.response_tokens == 2 * 4
    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    grads = []
    for keep_all in (False, True):
        set_kept_layers(model, lm=0, vision=0)
        costs = ActivationCosts.estimate(model.config, lm_layers=2, vision_layers=2)
        budget = costs.predict(size, lm=2, vision=2) * 1.25 + 1 if keep_all else costs.full_checkpointing(size) * 2
        policy = AdaptiveKeep(model, torch.device("cpu"), budget_bytes=budget, costs=costs)
        kept = policy.before(batch)
        assert (kept["lm"], kept["vision"]) == ((2, 2) if keep_all else (kept["lm"], 0))
        model.zero_grad(set_to_none=True)
        log_probs, _ = compute_log_probs(model, batch)
        log_probs.sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        policy.after()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], msg=name)
