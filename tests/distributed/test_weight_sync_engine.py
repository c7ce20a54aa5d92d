"""A published version loaded into a REAL rollout engine (HFEngine on a tiny Qwen2-VL) through
SeaweedFS S3 and a Redis version board: the engine's outputs follow the published weights."""

from __future__ import annotations

import uuid

import pytest
import torch

from easyvideor1.models.tiny import build_tiny_model
from easyvideor1.queue import open_version_board
from easyvideor1.rollout.base import RolloutRequest, SamplingConfig
from easyvideor1.rollout.hf_engine import HFEngine
from easyvideor1.weight_sync.publish import WeightPublisher, WeightSubscriber

GREEDY = SamplingConfig(max_tokens=12, temperature=0.0)
PROMPT = [RolloutRequest("p", prompt_token_ids=[5, 17, 42, 99, 7, 3])]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    model_dir = build_tiny_model("qwen2_vl", tmp_path_factory.mktemp("tiny-qwen2vl"), seed=0)
    with HFEngine(model_dir) as e:
        yield e


def _greedy(engine) -> tuple[list[int], list[float]]:
    completion = engine.generate(PROMPT, GREEDY)[0].completions[0]
    return completion.token_ids, completion.logprobs


def _perturbed(state: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Relative noise on every float tensor: the default init's near-flat logits would hide a
    load that did nothing."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, tensor in state.items():
        if tensor.is_floating_point():
            scale = float(tensor.float().std()) if tensor.numel() > 1 else 0.02
            tensor = tensor + torch.randn(tensor.shape, generator=g) * 2.0 * max(scale, 0.02)
        out[name] = tensor
    return out


def test_apply_published_versions_to_a_real_engine(engine, s3, redis_url, monkeypatch):
    for key, value in s3.url_env.items():
        monkeypatch.setenv(key, value)
    store = f"s3://evr1-weights/engine-{uuid.uuid4().hex[:8]}"
    board = open_version_board(redis_url, f"ws-engine-{uuid.uuid4().hex[:8]}")
    publisher, subscriber = WeightPublisher(store, board, keep=2), WeightSubscriber(store, board)
    base = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    tokens0, logprobs0 = _greedy(engine)
    loads: list[int] = []
    real_update = engine.update_weights

    def counted_update(weights, version):
        loads.append(version)
        return real_update(weights, version)

    monkeypatch.setattr(engine, "update_weights", counted_update)

    changed = _perturbed(base, seed=1)
    publisher.publish(1, changed)
    assert subscriber.apply_to(engine) == 1
    assert engine.policy_version == 1
    loaded = engine.model.state_dict()
    probe = "model.language_model.layers.0.mlp.up_proj.weight"
    assert probe in loaded and torch.equal(loaded[probe], changed[probe])
    tokens1, logprobs1 = _greedy(engine)
    assert (tokens1, logprobs1) != (tokens0, logprobs0)
    assert engine.generate(PROMPT, GREEDY)[0].policy_version == 1

    # Already at the latest version: nothing is reloaded.
    assert subscriber.apply_to(engine) == 1
    assert loads == [1]

    publisher.publish(2, base)  # back to the original weights, as version 2
    assert subscriber.apply_to(engine, min_version=2, timeout=5) == 2
    assert engine.policy_version == 2
    assert _greedy(engine) == (tokens0, logprobs0)  # bit for bit
    assert loads == [1, 2]
    board.close()
