"""Weight sync in parts: a state dict over the part limit reaches vLLM in several RPCs, whole layers
together, and the engine then serves exactly what a fresh engine on the same weights serves.

The part limit is lowered so that a tiny model needs >= 3 parts (a 3B bf16 model needs 4 at the
real 2 GiB limit). Covers the unsharded state dict, an FSDP2-sharded one (DTensors, gathered part
by part) and the shared-memory file, with the CPU traps: the tied ``lm_head`` is re-dispatched
after the last part only, the caches are reset once, the version is set once.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from easyvideor1.models import build_tiny_model, perturb_weights
from easyvideor1.models.tiny import random_video_input
from easyvideor1.rollout import RolloutRequest, SamplingConfig
from easyvideor1.weight_sync import host as weights_mod
from easyvideor1.weight_sync.host import plan_parts, tied_duplicates, weight_payloads, weight_unit

GREEDY = SamplingConfig(max_tokens=8, temperature=0.0)


def _requests():
    video = random_video_input("qwen2_5_vl", 8, 1, 2, source_fps=4.0, stride=3, seed=5)
    return [RolloutRequest("video", messages="<video>Which object moves first?", videos=[video]),
            RolloutRequest("text", messages="How many objects move from left to right?")]


def _signature(engine):
    return [(c.token_ids, c.logprobs) for r in engine.generate(_requests(), GREEDY) for c in r.completions]


def _assert_same(ours, fresh, tol=1e-5):
    for (ids_a, lp_a), (ids_b, lp_b) in zip(ours, fresh):
        assert ids_a == ids_b
        assert max(abs(a - b) for a, b in zip(lp_a, lp_b)) <= tol


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """An engine on the base weights, and a fresh engine on perturbed weights (the target)."""
    from transformers import AutoModelForImageTextToText

    from easyvideor1.rollout import VLLMEngine

    root = tmp_path_factory.mktemp("weight_parts")
    base = build_tiny_model("qwen2_5_vl", root / "base", seed=0)
    model = AutoModelForImageTextToText.from_pretrained(base)
    perturb_weights(model, seed=1)
    model.save_pretrained(base)
    perturb_weights(model, 0.5, seed=2)
    target = root / "target"
    shutil.copytree(base, target)  # tokenizer and processor files too
    model.save_pretrained(target)
    ours = VLLMEngine(base, max_model_len=2048, max_num_seqs=8)
    fresh = VLLMEngine(target, max_model_len=2048, max_num_seqs=8)
    yield ours, _signature(fresh), model
    # In-process engines share process-wide state: close them together, at the end.
    ours.close()
    fresh.close()


def _limit_for_parts(state, parts):
    total = sum(t.numel() * t.element_size() for n, t in state.items() if not n.startswith("lm_head."))
    return total // parts


def test_plan_keeps_layers_whole_and_under_the_limit(monkeypatch, tmp_path):
    state = {f"model.language_model.layers.{i}.{p}": torch.zeros(64, 64) for i in range(4)
             for p in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "mlp.gate_proj.weight")}
    state["model.visual.blocks.0.attn.qkv.weight"] = torch.zeros(64, 64)
    state["model.language_model.embed_tokens.weight"] = torch.zeros(128, 64)
    state["lm_head.weight"] = state["model.language_model.embed_tokens.weight"]
    drop, clone = tied_duplicates(state)
    assert drop == {"lm_head.weight"} and not clone
    layer = 3 * 64 * 64 * 4
    parts = plan_parts(state, limit=2 * layer, skip=drop)
    assert sorted(n for p in parts for n in p) == sorted(set(state) - drop)
    for part in parts:
        units = {weight_unit(n) for n in part}
        assert sum(state[n].numel() * 4 for n in part) <= 2 * layer or len(units) == 1
        for unit in units:  # a unit is never split across parts
            assert all(weight_unit(n) != unit for other in parts if other is not part for n in other)
    assert len(parts) >= 3
    # Cast to bf16 on the way: the plan counts the bytes that travel.
    assert len(plan_parts(state, limit=2 * layer, skip=drop, dtype=torch.bfloat16)) < len(parts)
    # The payloads carry every tensor once, bf16 when asked, in the planned parts.
    payloads = list(weight_payloads(state, dtype="bfloat16", limit=2 * layer, transport="parts"))
    assert [p.index for p in payloads] == list(range(len(payloads))) and payloads[-1].last
    from safetensors.torch import load

    loaded = {k: v for p in payloads for k, v in load(p.payload).items()}
    assert set(loaded) == set(state) - drop and all(v.dtype == torch.bfloat16 for v in loaded.values())
    # auto: one /dev/shm file when there is room (removed after the iteration), else the parts.
    monkeypatch.setattr(weights_mod, "SHM_DIR", str(tmp_path))
    (only,) = list(weight_payloads(state, dtype="bfloat16", limit=2 * layer))
    assert isinstance(only.payload, str) and only.count == 1 and not list(tmp_path.iterdir())
    monkeypatch.setattr(weights_mod, "_shm_file", lambda nbytes: None)  # no room
    assert len(list(weight_payloads(state, dtype="bfloat16", limit=2 * layer))) == len(payloads)
    # Copied tensor by tensor (the trainer's full_state_dict) the tie is gone: the engine names
    # the tied head from its config and it stays behind.
    copied = {k: v.clone() for k, v in state.items()}
    sent = {k for p in weight_payloads(copied, limit=2 * layer, skip=frozenset({"lm_head.weight"}))
            for k in load(p.payload)}
    assert sent == set(state) - {"lm_head.weight"}


def test_update_in_parts_equals_a_fresh_engine(setup, monkeypatch):
    ours, fresh_signature, model = setup
    assert weights_mod.tied_head_names(ours.model_dir) == {"lm_head.weight"}
    state = model.state_dict()
    monkeypatch.setattr(weights_mod, "RPC_PART_BYTES", _limit_for_parts(state, 4))
    calls, resets = [], []
    rpc, reset = ours.llm.collective_rpc, ours.llm.reset_prefix_cache

    def counted_rpc(method, *args, **kwargs):
        if method == "evr1_reload_weights":
            calls.append(kwargs["args"][1:])
        return rpc(method, *args, **kwargs)

    def counted_reset(*args, **kwargs):
        resets.append(ours.policy_version)
        return reset(*args, **kwargs)

    monkeypatch.setattr(ours.llm, "collective_rpc", counted_rpc)
    monkeypatch.setattr(ours.llm, "reset_prefix_cache", counted_reset)
    before = _signature(ours)
    # Without the tied-head fix the parts alone leave vLLM off (Trap 2): the fix is what makes it right.
    ours.update_weights(state, version=4, refresh_tied_head=False, transport="parts")
    with pytest.raises(AssertionError):
        _assert_same(_signature(ours), fresh_signature)
    calls.clear()
    resets.clear()
    ours.update_weights(state, version=5, transport="parts")
    assert len(calls) >= 3
    # (refresh_tied_head, last, partial): the tied head is fixed after the last part only.
    assert [last for _, last, _ in calls] == [False] * (len(calls) - 1) + [True]
    assert all(partial for _, _, partial in calls)
    assert resets == [4] and ours.policy_version == 5  # caches reset once, after all parts
    after = _signature(ours)
    assert after != before
    _assert_same(after, fresh_signature)


def test_update_from_fsdp2_shards_and_through_shm(setup, monkeypatch, tmp_path):
    """DTensor values (an FSDP2 actor's own state dict) are gathered part by part; the /dev/shm
    file path gives the same result."""
    import copy

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    ours, fresh_signature, model = setup
    if not dist.is_initialized():  # in-process vLLM usually made the one-rank group already
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    sharded = copy.deepcopy(model)
    for layer in sharded.model.language_model.layers:
        fully_shard(layer)
    fully_shard(sharded)
    state = sharded.state_dict()
    assert any(hasattr(v, "full_tensor") for v in state.values())
    monkeypatch.setattr(weights_mod, "RPC_PART_BYTES", _limit_for_parts(model.state_dict(), 3))
    ours.update_weights(build_tiny_model("qwen2_5_vl", tmp_path / "other", seed=3), version=6)  # move away
    ours.update_weights(state, version=7, transport="parts")
    _assert_same(_signature(ours), fresh_signature)
    ours.update_weights(build_tiny_model("qwen2_5_vl", tmp_path / "other2", seed=4), version=8)
    monkeypatch.setattr(weights_mod, "SHM_DIR", str(tmp_path))  # same code path, a private folder
    ours.update_weights(model.state_dict(), version=9, transport="shm")
    assert not list(tmp_path.glob("evr1-weights-*"))  # the file is gone after the update
    _assert_same(_signature(ours), fresh_signature)
