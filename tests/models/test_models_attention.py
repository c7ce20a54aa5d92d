"""The packed attention path gives the same log-probs as transformers' sdpa path."""

import dataclasses

import numpy as np
import pytest
import torch

from easyvideor1.models import attention
from easyvideor1.models.forward import collate_forward_batch, compute_log_probs
from easyvideor1.models.inputs import ImageInput, PromptBuilder, VideoInput
from easyvideor1.models.tiny import perturb_weights
from easyvideor1.video.metadata import VideoMetadata


def _video(t: int = 8, h: int = 56, w: int = 84) -> VideoInput:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, size=(t, h, w, 3), dtype=np.uint8)
    meta = VideoMetadata(source_fps=4.0, total_frames=t, duration=t / 4, frame_indices=tuple(range(t)),
                         timestamps=tuple(i / 4 for i in range(t)), height=h, width=w, source_height=h,
                         source_width=w, factor=28, decoder="test")
    return VideoInput(frames, meta)


def test_packed_segments_match_per_segment_attention():
    torch.manual_seed(0)
    q, k, v = (torch.randn(23, 4, 8) for _ in range(3))
    cu = torch.tensor([0, 5, 12, 23])
    got = attention.packed_attention(q, k, v, cu, 11, None)
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1)).transpose(0, 1)
        torch.testing.assert_close(got[a:b], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl"])
def test_log_probs_match_sdpa(tiny_model_factory, family, monkeypatch):
    from transformers import AutoModelForImageTextToText

    model_dir = tiny_model_factory(family)
    builder = PromptBuilder.from_pretrained(str(model_dir))
    image = np.random.default_rng(1).integers(0, 255, size=(56, 56, 3), dtype=np.uint8)
    prompts = [builder.build("<video>\nWhat moves?", [_video()], sample_id="v"),
               builder.build("<image>\nWhat is it?", images=[ImageInput(image)], sample_id="i"),
               builder.build("Say hello.", sample_id="t")]
    batch = collate_forward_batch(prompts, [[5, 6, 7], [8, 9], [10, 11, 12, 13]], pad_token_id=0)
    calls = []
    real = attention.packed_attention
    monkeypatch.setattr(attention, "packed_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    results = []
    for impl in ("sdpa", attention.register()):
        torch.manual_seed(0)
        model = AutoModelForImageTextToText.from_pretrained(model_dir, attn_implementation=impl,
                                                            dtype=torch.float32)
        if impl != "sdpa":
            attention.use_packed_attention(model)
        perturb_weights(model, seed=3)
        with torch.no_grad():
            results.append(compute_log_probs(model, batch)[0])
    torch.testing.assert_close(results[1], results[0], rtol=1e-4, atol=1e-5)
    assert calls, "the vision blocks ran through the packed path"


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_padding_free_packing_matches_padded(tiny_model_factory, family):
    """Several prompts + responses packed in one row give the padded batch's log-probs and entropy."""
    from transformers import AutoModelForImageTextToText

    from easyvideor1.models.packing import pack_forward_batch, packed_log_probs

    model_dir = tiny_model_factory(family)
    builder = PromptBuilder.from_pretrained(str(model_dir))
    factor = builder.family.factor
    image = np.random.default_rng(1).integers(0, 255, size=(2 * factor, 2 * factor, 3), dtype=np.uint8)
    video = _video(h=2 * factor, w=3 * factor)
    video = VideoInput(video.frames, dataclasses.replace(video.metadata, factor=factor))
    prompts = [builder.build("<video>\nWhat moves?", [video], sample_id="v"),
               builder.build("Say hello.", sample_id="t"),
               builder.build("<image>\nWhat is it?", images=[ImageInput(image)], sample_id="i")]
    responses = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    model = AutoModelForImageTextToText.from_pretrained(model_dir, attn_implementation=attention.register(),
                                                        dtype=torch.float32)
    attention.use_packed_attention(model)
    perturb_weights(model, seed=3)
    with torch.no_grad():
        padded = compute_log_probs(model, collate_forward_batch(prompts, responses, pad_token_id=0))
        packed = packed_log_probs(model, pack_forward_batch(prompts, responses))
    torch.testing.assert_close(packed[0], padded[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(packed[1], padded[1], rtol=1e-4, atol=1e-5)
