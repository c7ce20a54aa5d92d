"""Shared-prefix forward: the rows of a group lay their prompt out once, and the log-probs, the
entropy and every parameter's gradient equal those of one forward per response (float32, CPU),
for every family whose layers are all attention; a multi-turn trajectory (tool media inside
its own segment) is one more member of its group. Qwen3.5's recurrent layers are refused."""

from __future__ import annotations

import pytest
import torch
from equivalence import max_abs, max_rel, rel_norm, report
from test_trajectory_forward import two_call_trajectory

from easyvideor1.models import attention, perturb_weights
from easyvideor1.models.forward import collate_forward_batch, compute_log_probs
from easyvideor1.models.inputs import PromptBuilder
from easyvideor1.models.packing import (
    pack_forward_batch,
    pack_shared_batch,
    packed_log_probs,
    packed_response_logits,
    shared_prefix_unsupported,
)
from easyvideor1.models.tiny import random_image_input, random_video_input

RTOL = 1e-5
WIDTH = 256  # wider than every response (the trajectory holds tool turns)


def _model(model_dir):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir, attn_implementation=attention.register(),
                                                        dtype=torch.float32)
    attention.use_packed_attention(model)
    perturb_weights(model, seed=3)
    return model.eval()


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def rows(request, tiny_model_factory):
    """A video group (three responses and a multi-turn trajectory), an image group (two) and a
    text group (one), interleaved as a shuffled batch would hold them."""
    name = request.param
    model_dir = tiny_model_factory(name)
    builder = PromptBuilder.from_pretrained(str(model_dir))
    video = builder.build("<video>\nWhat moves?", [random_video_input(name, 4, 2, 3, seed=1)], sample_id="v")
    image = builder.build("<image>\nWhat is it?", images=[random_image_input(name, 2, 2, seed=2)], sample_id="i")
    text = builder.build("Say hello.", sample_id="t")
    trajectory, *_ = two_call_trajectory(builder, video, name)
    prompts = [video, image, video, text, video, image, video]
    responses = [[5, 6, 7], [13, 14], [8], [18, 19], trajectory.token_ids, [15, 16, 17], [9, 10, 11, 12]]
    trajectories = [None, None, None, None, trajectory, None, None]
    return name, _model(model_dir), prompts, responses, trajectories


def _weighted_loss(log_probs, entropy, mask, seed=0):
    generator = torch.Generator().manual_seed(seed)
    w = torch.randn(log_probs.shape, generator=generator)
    return ((log_probs * w + 0.3 * entropy * w.flip(-1)) * mask).sum()


def _grads(model) -> dict[str, torch.Tensor]:
    out = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def test_shared_layout_lays_each_prompt_out_once(rows):
    _, _, prompts, responses, trajectories = rows
    shared = pack_shared_batch(prompts, responses, trajectories=trajectories)
    unshared = pack_forward_batch(prompts, responses, trajectories=trajectories)
    distinct = {p.sample_id: len(p.prompt_ids) for p in prompts}
    assert shared.tokens == sum(distinct.values()) + sum(len(r) for r in responses)
    assert unshared.tokens == sum(len(p.prompt_ids) for p in prompts) + sum(len(r) for r in responses)
    # The video's pixels once (plus the trajectory's tool clip), not once per response.
    video_prompt = prompts[0].tensors["pixel_values_videos"]
    tool_clip = trajectories[4].tensors["pixel_values_videos"]
    assert shared.visual["pixel_values_videos"].shape[0] == video_prompt.shape[0] + tool_clip.shape[0]
    # Each response keeps its own sequence's positions.
    for row, prompt in enumerate(prompts):
        start, n = shared.response_starts[row], shared.response_lengths[row]
        got = shared.position_ids[:, 0, start:start + n]
        if trajectories[row] is None:
            assert got[:, 0].tolist() == [prompt.next_position] * 3
        else:
            assert torch.equal(got, torch.from_numpy(trajectories[row].position_ids))
    torch.testing.assert_close(shared.loss_mask, unshared.loss_mask)


def test_log_probs_entropy_and_gradients_equal_one_forward_per_response(rows):
    name, model, prompts, responses, trajectories = rows
    model.train()
    reference_lp, reference_ent, reference_grads = [], [], None
    total = None
    for row in range(len(prompts)):  # one sequence per response, as the trainer did before
        batch = collate_forward_batch([prompts[row]], [responses[row]], pad_token_id=0,
                                      trajectories=[trajectories[row]])
        lp, ent = compute_log_probs(model, batch)
        reference_lp.append(lp[0].detach())
        reference_ent.append(ent[0].detach())
        loss = _weighted_loss(_pad(lp, WIDTH), _pad(ent, WIDTH), _pad(batch.loss_mask, WIDTH), seed=row)
        total = loss if total is None else total + loss
    total.backward()
    reference_grads = _grads(model)

    shared = pack_shared_batch(prompts, responses, trajectories=trajectories)
    lp, ent = packed_log_probs(model, shared)
    mask = shared.loss_mask
    pairs = {"log_probs": [], "entropy": []}
    for row in range(len(prompts)):
        n = len(responses[row])
        pairs["log_probs"].append((lp[row, :n].detach(), reference_lp[row][:n]))
        pairs["entropy"].append((ent[row, :n].detach(), reference_ent[row][:n]))
        for got, want in (pairs["log_probs"][-1], pairs["entropy"][-1]):
            torch.testing.assert_close(got, want, rtol=RTOL, atol=1e-6)
    total = sum(_weighted_loss(_pad(lp[row:row + 1], WIDTH), _pad(ent[row:row + 1], WIDTH),
                               _pad(mask[row:row + 1], WIDTH), seed=row) for row in range(len(prompts)))
    total.backward()
    grads = _grads(model)
    assert set(grads) == set(reference_grads)
    worst = max(rel_norm(grads[k], reference_grads[k]) for k in grads)
    diffs = {f"{what}_{kind}": max(f(a, b) for a, b in rows) for what, rows in pairs.items()
             for kind, f in (("max_abs", max_abs), ("max_rel", max_rel))}
    report("forward-backward", name, **diffs, grad_worst_rel_norm=worst,
           grad_max_abs=max(max_abs(grads[k], reference_grads[k]) for k in grads))
    assert worst < RTOL, (name, worst)
    assert any("visual" in k and float(reference_grads[k].abs().sum()) > 0 for k in grads)


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    out = torch.zeros((t.shape[0], width), dtype=torch.float32)
    out[:, :t.shape[1]] = t.float()
    return out


def test_full_vocabulary_logits_equal_the_padded_forward(rows):
    name, model, prompts, responses, _ = rows
    from easyvideor1.train.actor import response_logits

    plain = [row for row, r in enumerate(responses) if len(r) < 10]
    prompts, responses = [prompts[r] for r in plain], [responses[r] for r in plain]
    with torch.no_grad():
        shared = packed_response_logits(model, pack_shared_batch(prompts, responses))
        padded = response_logits(model, collate_forward_batch(prompts, responses, pad_token_id=0))
    pairs = [(shared[row, :len(response)], padded[row, :len(response)]) for row, response in enumerate(responses)]
    # Logits near 0 have no scale of their own: relative over each row's whole vocabulary.
    report("full-vocabulary-logits", name, logits_max_abs=max(max_abs(a, b) for a, b in pairs),
           logits_worst_row_rel_norm=max(rel_norm(a, b) for a, b in pairs))
    for a, b in pairs:
        torch.testing.assert_close(a, b, rtol=RTOL, atol=1e-5)


def test_shared_attention_matches_an_explicit_mask():
    """The layout's attention against one SDPA call with the boolean mask it stands for."""
    torch.manual_seed(0)
    # Prompt 0..5, responses 6..8 and 9..10; prompt 11..14, response 15..17.
    groups = [(range(0, 6), [range(6, 9), range(9, 11)]), (range(11, 15), [range(15, 18)])]
    length = 18
    allowed = torch.zeros(length, length, dtype=torch.bool)
    seg_q, keys, kinds = [0], [], []
    for prompt, members in groups:
        for i in prompt:
            allowed[i, prompt.start:i + 1] = True
        seg_q.append(prompt.stop)
        keys.append(list(prompt))
        kinds.append(0)
        for response in members:
            for i in response:
                allowed[i, prompt.start:prompt.stop] = True
                allowed[i, response.start:i + 1] = True
            seg_q.append(response.stop)
            keys.append(list(prompt) + list(response))
            kinds.append(1)
    kind = torch.tensor(kinds)
    layout = attention.SharedLayout(
        cu_q=torch.tensor(seg_q, dtype=torch.int32),
        cu_k=torch.tensor([0] + [sum(len(k) for k in keys[:i + 1]) for i in range(len(keys))], dtype=torch.int32),
        key_index=torch.tensor([i for k in keys for i in k]), max_q=6, max_k=9,
        buckets=tuple(torch.nonzero(kind == k).flatten() for k in (0, 1)))
    q = torch.randn(length, 4, 8)
    k, v = torch.randn(length, 2, 8), torch.randn(length, 2, 8)
    got = attention.shared_attention(q, k, v, layout, None)
    kk, vv = (t.repeat_interleave(2, dim=1).transpose(0, 1) for t in (k, v))
    want = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), kk, vv, attn_mask=allowed)
    torch.testing.assert_close(got, want.transpose(0, 1), rtol=1e-5, atol=1e-6)


def test_recurrent_layers_are_refused(tiny_model_factory):
    from transformers import AutoConfig

    assert shared_prefix_unsupported(AutoConfig.from_pretrained(tiny_model_factory("qwen3_5"))) is not None
    assert shared_prefix_unsupported(AutoConfig.from_pretrained(tiny_model_factory("qwen3_vl"))) is None
