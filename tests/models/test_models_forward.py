"""The trainer's log-prob function: padding-invariant, checked, differentiable, float32."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.models import (
    PlaceholderMismatchError,
    build_prompt,
    collate_forward_batch,
    compute_log_probs,
)
from easyvideor1.models.forward import response_log_probs_numpy
from easyvideor1.models.tiny import random_image_input, random_video_input


def _prompts(processor, name):
    return [
        build_prompt(processor, "<video>What moves first?", [random_video_input(name, 6, 1, 2, seed=1)],
                     family=name, sample_id="video"),
        build_prompt(processor, "Count to three.", family=name, sample_id="text"),
        build_prompt(processor, "<image><video>Same colour?", [random_video_input(name, 4, 2, 1, seed=2)],
                     [random_image_input(name, 1, 1, seed=3)], family=name, sample_id="both"),
    ]


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen3_vl", "qwen3_5"])
def test_batched_equals_one_by_one(processors, hf_models, name):
    model = hf_models[name]
    prompts = _prompts(processors[name], name)
    responses = [[11, 12, 13, 14, 15], [21, 22], [31, 32, 33]]
    batch = collate_forward_batch(prompts, responses, pad_token_id=0, response_length=6)
    assert batch.input_ids.shape == (3, max(len(p.prompt_ids) for p in prompts) + 6)
    with torch.no_grad():
        log_probs, entropy = compute_log_probs(model, batch)
    assert log_probs.dtype == torch.float32 and log_probs.shape == (3, 6)
    assert (log_probs[1, 2:] == 0).all() and (entropy[1, 2:] == 0).all()
    assert (entropy[batch.response_mask.bool()] > 0).all()
    batched = response_log_probs_numpy(log_probs, batch)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        single = collate_forward_batch([prompt], [response], pad_token_id=0)
        with torch.no_grad():
            alone, _ = compute_log_probs(model, single)
        assert abs(alone[0].numpy() - batched[row]).max() < 1e-4, prompt.sample_id


def test_temperature_and_gradients(processors, hf_models):
    model = hf_models["qwen2_5_vl"]
    prompts = _prompts(processors["qwen2_5_vl"], "qwen2_5_vl")[:1]
    batch = collate_forward_batch(prompts, [[40, 41, 42]], pad_token_id=0)
    with torch.no_grad():
        plain, plain_entropy = compute_log_probs(model, batch)
        hot, hot_entropy = compute_log_probs(model, batch, temperature=2.0)
    assert not torch.allclose(plain, hot) and (hot_entropy > plain_entropy).all()
    log_probs, _ = compute_log_probs(model, batch, with_entropy=False)
    log_probs.sum().backward()
    grad = model.get_input_embeddings().weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    model.zero_grad(set_to_none=True)


def test_generated_placeholder_is_caught_before_the_forward(processors, hf_models):
    processor = processors["qwen3_vl"]
    prompts = _prompts(processor, "qwen3_vl")[:1]
    batch = collate_forward_batch(prompts, [[40, processor.video_token_id, 42]], pad_token_id=0)
    with pytest.raises(PlaceholderMismatchError,
                       match=r"sample 'video': video features and video tokens do not match: 7 video placeholder"
                             r" tokens in the sequence, 6 video features"):
        compute_log_probs(hf_models["qwen3_vl"], batch)


def test_response_longer_than_limit_is_refused(processors):
    prompts = _prompts(processors["qwen2_vl"], "qwen2_vl")[1:2]
    with pytest.raises(ValueError, match="more than response_length=2"):
        collate_forward_batch(prompts, [[1, 2, 3]], pad_token_id=0, response_length=2)
