"""Mix-policy groups at the rollout layer: n - 1 sampled responses + the offline one last."""

from __future__ import annotations

import pytest

from easyvideor1.config.schema import MixPolicyConfig
from easyvideor1.models.tiny import random_video_input
from easyvideor1.rollout import RolloutError, RolloutRequest, SamplingConfig, generate_groups

OFFLINE = "<think> The red square moves first. </think> <answer>A</answer>"


def _requests():
    video = random_video_input("qwen2_vl", 4, 1, 2, seed=3)
    return [
        RolloutRequest("with-teacher", messages="<video>Which object moves first?", videos=[video], n=4),
        RolloutRequest("no-teacher", messages="Count to three.", n=4),
    ]


def test_unconditional_mix_policy_splices_offline_last(pairs):
    engine = pairs["qwen2_vl"].engine
    tokenizer = engine.tokenizer
    sampling = SamplingConfig(max_tokens=12, seed=9)
    results = generate_groups(engine, _requests(), [OFFLINE, None], sampling, MixPolicyConfig(enable=True))
    teacher, plain = results
    assert [c.is_offline for c in teacher.completions] == [False, False, False, True]
    assert [c.is_offline for c in plain.completions] == [False] * 4
    offline = teacher.completions[-1]
    expected = tokenizer.encode(OFFLINE, add_special_tokens=False)[:11] + [tokenizer.eos_token_id]
    assert offline.token_ids == expected and offline.logprobs is None and offline.finish_reason == "offline"
    assert offline.text == tokenizer.decode(expected, skip_special_tokens=True)
    assert all(len(c.logprobs) == len(c.token_ids) for c in teacher.completions[:3] + plain.completions)
    assert teacher.num_visual_tokens == 4 and teacher.prompt is not None

    off = generate_groups(engine, _requests(), [OFFLINE, None], sampling, MixPolicyConfig(enable=False))
    assert all(not c.is_offline for r in off for c in r.completions) and [len(r.completions) for r in off] == [4, 4]


def test_conditional_mix_policy_uses_the_scorer(pairs):
    engine = pairs["qwen2_vl"].engine
    config = MixPolicyConfig(enable=True, mode="conditional", accuracy_threshold=0.5)
    sampling = SamplingConfig(max_tokens=6, seed=2)
    seen = []

    def scorer(request, completions):
        seen.append((request.request_id, len(completions)))
        return [0.0] * len(completions) if request.request_id == "with-teacher" else [1.0] * len(completions)

    requests = _requests()
    requests[1].n = 2
    failing, _ = generate_groups(engine, requests, [OFFLINE, None], sampling, config, scorer=scorer)
    assert seen == [("with-teacher", 4)]
    assert [c.is_offline for c in failing.completions] == [False, False, False, True]

    passing, _ = generate_groups(engine, requests, [OFFLINE, None], sampling, config,
                                 scorer=lambda request, completions: [1.0] * len(completions))
    assert not any(c.is_offline for c in passing.completions) and len(passing.completions) == 4

    with pytest.raises(RolloutError, match="needs a scorer"):
        generate_groups(engine, requests, [OFFLINE, None], sampling, config)
    with pytest.raises(RolloutError, match="1 offline texts for 2 requests"):
        generate_groups(engine, requests, [OFFLINE], sampling, MixPolicyConfig(enable=True))
