"""vLLM vs the trainer's forward: same prompt tokens, same visual token counts, same log-probs.

For every family and for text, image and multi-frame video inputs, on perturbed weights,
before and after an in-place weight update. Also shows that each of the two fixes matters:
transformers' own positions (Trap 1) and a reload without the tied-head fix (Trap 2) both
leave the log-probs far off.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from easyvideor1.models import FAMILIES, collate_forward_batch, compute_log_probs, visual_token_count
from easyvideor1.models.forward import response_log_probs_numpy
from easyvideor1.models.inputs import hf_video_metadata
from easyvideor1.models.tiny import random_image_input, random_video_input
from easyvideor1.rollout import RolloutRequest, SamplingConfig

FAMILY_NAMES = tuple(FAMILIES)
SAMPLING = SamplingConfig(max_tokens=8, temperature=1.0, seed=3)


def _requests(name):
    # 8 frames of 1x2 units: 4 temporal patches exceed the 2-unit spatial extent (Trap 1 territory).
    video = random_video_input(name, 8, 1, 2, source_fps=4.0, stride=3, seed=5)
    image = random_image_input(name, 2, 1, seed=6)
    return [
        RolloutRequest("text", messages="How many objects move from left to right?", n=2),
        RolloutRequest("image", messages="<image>What color is the square?", images=[image], n=2),
        RolloutRequest("video", messages="<video>Which object moves first?", videos=[video], n=2),
    ]


def _max_logprob_gap(model, result):
    batch = collate_forward_batch([result.prompt] * len(result.completions),
                                  [c.token_ids for c in result.completions], pad_token_id=0)
    with torch.no_grad():
        ours, _ = compute_log_probs(model, batch)
    ours = response_log_probs_numpy(ours, batch)
    return max(float(np.abs(np.asarray(c.logprobs) - mine).max()) for c, mine in zip(result.completions, ours))


def _mixed_request(name):
    videos = [random_video_input(name, 5, 2, 1, source_fps=6.0, stride=4, seed=7),
              random_video_input(name, 2, 1, 1, source_fps=2.0, stride=1, seed=8)]
    return RolloutRequest("mixed", messages="<video> then <image> then <video>: same object?", videos=videos,
                          images=[random_image_input(name, 1, 2, seed=9)], n=1)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_prompt_tokens_and_visual_counts_agree(pairs, name):
    pair = pairs[name]
    processor = pair.engine.builder.processor
    requests = _requests(name) + [_mixed_request(name)]
    results = pair.engine.generate(requests, SAMPLING)
    for request, result in zip(requests, results):
        direct = processor(text=[result.prompt.prompt_text], videos=[v.frames for v in request.videos] or None,
                           video_metadata=[hf_video_metadata(v.metadata) for v in request.videos] or None,
                           images=[i.image for i in request.images] or None, do_sample_frames=False,
                           do_resize=False)
        assert result.prompt_token_ids == result.prompt.prompt_ids == list(direct["input_ids"][0])
        expected = sum(visual_token_count(name, v.frames.shape) for v in request.videos) + sum(
            visual_token_count(name, i.image.shape, kind="image") for i in request.images)
        assert result.num_visual_tokens == expected
        assert (expected > 0) == (request.request_id != "text")


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_logprobs_match_before_and_after_weight_update(pairs, name):
    pair = pairs[name]
    before = pair.engine.generate(_requests(name), SAMPLING)
    for result in before:
        assert len(result.completions) == 2 and all(len(c.logprobs) == len(c.token_ids) for c in result.completions)
        gap = _max_logprob_gap(pair.model, result)
        assert gap <= pair.tolerance, (name, result.request_id, gap)
    version = pair.engine.policy_version + 1
    pair.perturb_and_push(seed=100 + version, version=version)
    after = pair.engine.generate(_requests(name), SAMPLING)
    changed = 0
    for old, new in zip(before, after):
        assert new.policy_version == version
        gap = _max_logprob_gap(pair.model, new)
        assert gap <= pair.tolerance, (name, new.request_id, gap)
        first_old = [c.logprobs[0] for c in old.completions]
        first_new = [c.logprobs[0] for c in new.completions]
        changed += any(abs(a - b) > 1e-3 for a, b in zip(first_old, first_new)) or \
            [c.token_ids for c in old.completions] != [c.token_ids for c in new.completions]
    assert changed == len(after)


def test_update_from_safetensors_file(pairs, tmp_path):
    from safetensors.torch import save_file

    from easyvideor1.weight_sync.host import unique_tensors

    pair = pairs["qwen3_vl"]
    perturbed_state = {k: v.clone() for k, v in pair.model.state_dict().items()}
    generator = torch.Generator().manual_seed(77)
    for tensor in perturbed_state.values():
        tensor.add_(0.5 * tensor.std().nan_to_num() * torch.randn(tensor.shape, generator=generator))
    pair.model.load_state_dict(perturbed_state)
    pair.model.tie_weights()
    path = tmp_path / "policy.safetensors"
    save_file(unique_tensors(pair.model.state_dict()), str(path))
    version = pair.engine.policy_version + 1
    pair.engine.update_weights(path, version)
    for result in pair.engine.generate(_requests("qwen3_vl"), SAMPLING):
        assert result.policy_version == version
        assert _max_logprob_gap(pair.model, result) <= pair.tolerance


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen2_5_vl"])
def test_trap1_transformers_positions_put_logprobs_off(pairs, name):
    pair = pairs[name]
    # 16 frames of one unit: 8 temporal patches, so transformers restarts text 7 positions early.
    clip = random_video_input(name, 16, 1, 1, source_fps=4.0, stride=2, seed=8)
    request = RolloutRequest("video", messages="<video>Which object moves first?", videos=[clip], n=2)
    video = pair.engine.generate([request], SAMPLING)[0]
    assert _max_logprob_gap(pair.model, video) <= pair.tolerance
    batch = collate_forward_batch([video.prompt] * 2, [c.token_ids for c in video.completions], pad_token_id=0)
    extra = {"second_per_grid_ts": batch.visual["second_per_grid_ts"]} if "second_per_grid_ts" in batch.visual else {}
    # What transformers 5.19 computes by itself over prompt + response.
    batch.position_ids, _ = pair.model.model.get_rope_index(
        batch.input_ids, mm_token_type_ids=batch.mm_token_type_ids, video_grid_thw=batch.visual["video_grid_thw"],
        attention_mask=batch.attention_mask, **extra)
    with torch.no_grad():
        theirs, _ = compute_log_probs(pair.model, batch)
    theirs = response_log_probs_numpy(theirs, batch)
    gap = max(float(np.abs(np.asarray(c.logprobs) - t).max()) for c, t in zip(video.completions, theirs))
    # Far outside the parity tolerance (our positions are within it, asserted above).
    assert gap > 100 * pair.tolerance, gap


def test_trap2_reload_without_tied_head_fix_leaves_vllm_off(pairs):
    pair = pairs["qwen2_vl"]
    version = pair.engine.policy_version + 1
    pair.perturb_and_push(seed=900, version=version, refresh_tied_head=False)
    try:
        stale = pair.engine.generate(_requests("qwen2_vl")[:1], SAMPLING)[0]
        assert _max_logprob_gap(pair.model, stale) > 100 * pair.tolerance
    finally:
        pair.resync(version + 1)
    fixed = pair.engine.generate(_requests("qwen2_vl")[:1], SAMPLING)[0]
    assert fixed.policy_version == version + 1
    assert _max_logprob_gap(pair.model, fixed) <= pair.tolerance
