"""Bucketed weight sync (weight_sync/sender.py -> the worker extension's evr1_load_bucket) into a
real vLLM CPU engine: a lowered bucket size forces many buckets and the engine then serves
exactly what a fresh engine on the same weights serves; frozen parameters, tied copies and
unchanged layers never travel; a sync with nothing changed sends nothing and still bumps the
version; memory stays flat over 100 syncs; FSDP2 shards on two gloo ranks are gathered layer
by layer into the same bytes as the unsharded model.
"""

from __future__ import annotations

import shutil
import types

import pytest
import torch
import torch.multiprocessing as mp

from easyvideor1.models import build_tiny_model, perturb_weights
from easyvideor1.models.tiny import random_video_input
from easyvideor1.rollout import RolloutRequest, SamplingConfig
from easyvideor1.weight_sync.buckets import Slot, plan_buckets, views
from easyvideor1.weight_sync.host import weight_unit
from easyvideor1.weight_sync.policy import EnginePolicySync
from easyvideor1.weight_sync.sender import BucketSender, HostTransport, clean_name

GREEDY = SamplingConfig(max_tokens=8, temperature=0.0)
SMALL = 64 << 10  # a tiny model's weights in many buckets


def _signature(engine):
    video = random_video_input("qwen2_5_vl", 8, 1, 2, source_fps=4.0, stride=3, seed=5)
    out = []
    # One prompt per generate call: batch composition must not decide near-ties.
    for request in (RolloutRequest("video", messages="<video>Which object moves first?", videos=[video]),
                    RolloutRequest("text", messages="How many objects move from left to right?")):
        out += [(c.token_ids, c.logprobs) for r in engine.generate([request], GREEDY) for c in r.completions]
    return out


def _assert_same(ours, fresh, tol=1e-5):
    for (ids_a, lp_a), (ids_b, lp_b) in zip(ours, fresh):
        assert ids_a == ids_b
        assert max(abs(a - b) for a, b in zip(lp_a, lp_b)) <= tol


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """One engine on the base weights, the actor's model on perturbed ones, and what a fresh
    engine on the actor's weights serves."""
    from transformers import AutoModelForImageTextToText

    from easyvideor1.rollout import VLLMEngine

    root = tmp_path_factory.mktemp("bucket_sync")
    base = build_tiny_model("qwen2_5_vl", root / "base", seed=0)
    model = AutoModelForImageTextToText.from_pretrained(base)
    perturb_weights(model, seed=1)
    model.save_pretrained(base)
    perturb_weights(model, 0.5, seed=2)
    target = root / "target"
    shutil.copytree(base, target)
    model.save_pretrained(target)
    fresh = VLLMEngine(target, max_model_len=2048, max_num_seqs=8)
    reference = _signature(fresh)
    fresh.close()
    engine = VLLMEngine(base, max_model_len=2048, max_num_seqs=8)
    yield engine, model, reference
    engine.close()


class Recording(HostTransport):
    """The real host transport, remembering which tensors each sync sent."""

    def __init__(self, rpc):
        super().__init__(rpc)
        self.names: list[str] = []

    def send(self, slots, last):
        self.names += [s.name for s in slots]
        return super().send(slots, last)


def test_plan_keeps_units_whole_and_aligned():
    entries = [(f"model.layers.{i}.{p}", (32, 32), torch.float32) for i in range(4) for p in ("q.weight", "k.weight")]
    entries.append(("model.embed_tokens.weight", (512, 32), torch.float32))  # 64 KiB: over the bucket
    plan = plan_buckets(entries, 3 * 8192)
    assert len(plan) == 3
    for slots in plan:
        assert len({weight_unit(s.name) for s in slots}) >= 1
        assert all(s.offset % 256 == 0 for s in slots)
    units = [{weight_unit(s.name) for s in slots} for slots in plan]
    assert all(not (a & b) for i, a in enumerate(units) for b in units[i + 1:])  # a unit in one bucket only
    assert plan[-1] == [Slot("model.embed_tokens.weight", "float32", (512, 32), 0, 65536)]
    bucket = torch.arange(65536, dtype=torch.uint8)
    (_, view), = views(bucket, plan[-1])
    assert view.shape == (512, 32) and view.data_ptr() == bucket.data_ptr()  # a view, not a copy


def test_many_buckets_give_the_engine_the_actors_weights(setup):
    engine, model, reference = setup
    sync = EnginePolicySync(engine, owns_engine=False, bucket_bytes=SMALL)
    sync.sync(types.SimpleNamespace(model=model), 1)
    assert engine.policy_version == 1
    sent = engine.last_update
    assert sent["transport"] == "HostTransport" and sent["buckets"] >= 5, sent
    assert sent["frozen"] == 0 and sent["unchanged"] == 0
    _assert_same(_signature(engine), reference)


def _send(sender, engine, model, version):
    stats = sender.send(model)
    engine.finish_weights(version, stats.summary(), changed=stats.tensors > 0)  # as EnginePolicySync does
    return stats


def test_only_what_changed_travels(setup):
    engine, model, reference = setup
    sender = BucketSender(None, bucket_bytes=SMALL)  # replaced below by a recording transport
    sender.transport = Recording(engine.collective_rpc)
    frozen = [n for n, p in model.named_parameters() if n.startswith("model.visual.")]
    assert frozen
    for name, param in model.named_parameters():
        param.requires_grad_(not name.startswith("model.visual."))
    try:
        stats = _send(sender, engine, model, 2)
        trainable = [clean_name(n) for n, p in model.named_parameters() if p.requires_grad]
        assert sorted(sender.transport.names) == sorted(trainable)
        assert stats.frozen == len(frozen) and not any(n.startswith("model.visual.") for n in sender.transport.names)
        if model.config.get_text_config().tie_word_embeddings:
            assert "lm_head.weight" not in sender.transport.names  # the tied copy stays behind
        assert stats.nbytes == sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)

        sender.transport.names.clear()
        stats = _send(sender, engine, model, 3)  # nothing written since
        assert stats.tensors == 0 and stats.buckets == 0 and not sender.transport.names

        # One layer written in place: that layer alone travels, whole.
        layer = next(p for n, p in model.named_parameters() if ".layers.1.mlp." in n)
        original = layer.detach().clone()
        with torch.no_grad():
            layer.add_(0.25)
        stats = _send(sender, engine, model, 4)
        units = {weight_unit(n) for n in sender.transport.names}
        assert len(units) == 1 and next(iter(units)).endswith("layers.1")
        assert len(sender.transport.names) == sum(1 for n in trainable if weight_unit(n) in units)
        assert _signature(engine) != reference  # the engine really took the change
        with torch.no_grad():
            layer.copy_(original)
        _send(sender, engine, model, 5)
        _assert_same(_signature(engine), reference)
    finally:
        for param in model.parameters():
            param.requires_grad_(True)


def test_nothing_changed_keeps_the_weights_and_bumps_the_version(setup):
    engine, model, reference = setup
    sync = EnginePolicySync(engine, owns_engine=False, bucket_bytes=SMALL)
    actor = types.SimpleNamespace(model=model)
    sync.sync(actor, 3)
    sync.sync(actor, 4)
    assert engine.policy_version == 4 and engine.last_update["tensors"] == 0
    assert sync.last_sync["tensors"] == 0
    _assert_same(_signature(engine), reference)


def _rss_mib() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_memory_flat_over_100_syncs(setup):
    engine, model, reference = setup
    sync = EnginePolicySync(engine, owns_engine=False, bucket_bytes=SMALL)
    actor = types.SimpleNamespace(model=model)
    params = list(model.parameters())
    rss = []
    for version in range(10, 110):
        with torch.no_grad():
            params[version % len(params)].mul_(1.0)  # written (its version moves), values kept
        sync.sync(actor, version)
        if version in (19, 109):
            rss.append(_rss_mib())
    assert engine.policy_version == 109
    assert rss[1] - rss[0] < 64, rss  # loose: a leak of one bucket per sync would be far more
    _assert_same(_signature(engine), reference)


def _fsdp_rank(rank: int, model_dir: str, port: int, out, path: str) -> None:
    import os

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForImageTextToText

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        model = AutoModelForImageTextToText.from_pretrained(model_dir)
        for layer in model.model.language_model.layers:
            fully_shard(layer)
        fully_shard(model)
        received: dict[str, torch.Tensor] = {}

        def rpc(method, args):
            kind, data, slots, last = args
            bucket = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            received.update({n: t.clone() for n, t in views(bucket, [Slot.from_wire(s) for s in slots])})
            return [{}]

        sender = BucketSender(HostTransport(rpc) if rank == 0 else None, dtype=torch.bfloat16, bucket_bytes=SMALL)
        stats = sender.send(model)
        again = sender.send(model)
        if rank == 0:  # tensors through a file: a queue's shared memory dies with this process
            torch.save(received, path)
            out.put((stats.buckets, again.tensors))
    finally:
        dist.destroy_process_group()


def test_fsdp2_shards_on_two_gloo_ranks(setup, tmp_path):
    from servers import free_port
    from transformers import AutoModelForImageTextToText

    engine, model, reference = setup
    model_dir = tmp_path / "actor"
    model.save_pretrained(model_dir)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    path = str(tmp_path / "received.pt")
    procs = [ctx.Process(target=_fsdp_rank, args=(r, str(model_dir), port, out, path)) for r in range(2)]
    for proc in procs:
        proc.start()
    buckets, again = out.get(timeout=600)
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    received = torch.load(path)
    whole = AutoModelForImageTextToText.from_pretrained(model_dir)
    expected = {n: p.detach().to(torch.bfloat16) for n, p in whole.named_parameters()}
    assert buckets >= 5 and again == 0
    assert received.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(received[name], tensor), name
