"""Weights by broadcast (weight_sync/broadcast.py) into a real vLLM CPU engine in another process:
the test process is the trainer (rank 0 of a gloo group of its own, no default process group),
a child process runs the engine, whose worker joins as rank 1. Buckets lowered to force many;
the engine then serves exactly what a fresh engine on the same weights serves; a later sync
sends only the layer written, and a sync with nothing changed sends no bucket and still bumps
the version.
"""

from __future__ import annotations

import queue
import shutil
import threading

import pytest
import torch
import torch.multiprocessing as mp
from test_bucket_sync import SMALL, _assert_same, _signature

from easyvideor1.models import build_tiny_model, perturb_weights
from easyvideor1.weight_sync.broadcast import BroadcastGroup, BroadcastTransport
from easyvideor1.weight_sync.host import weight_unit
from easyvideor1.weight_sync.sender import BucketSender

BUDGET_S = 600  # generous: a vLLM start on two shared cores


def _engine_process(model_dir: str, port: int, commands, replies) -> None:
    """The pool engine: joins the group, then takes each sync the test asks it to and answers
    with the version, what the engine loaded and its greedy signature."""
    from easyvideor1.rollout import VLLMEngine
    from easyvideor1.weight_sync.broadcast import join_engine, receive_version

    engine = VLLMEngine(model_dir, max_model_len=2048, max_num_seqs=8)
    try:
        join_engine(engine, "127.0.0.1", port, 1, 2, backend="gloo", timeout_s=BUDGET_S)
        replies.put("joined")
        while commands.get(timeout=BUDGET_S) == "receive":
            version = receive_version(engine)
            replies.put((version, dict(engine.last_update), _signature(engine)))
    finally:
        engine.close()


def _connect(group, child) -> None:
    """Form the group (it returns once the engine's worker joined), failing at once if the
    engine process dies first."""
    joined = threading.Thread(target=group.connect, daemon=True)
    joined.start()
    while joined.is_alive():
        joined.join(timeout=1)
        assert child.is_alive() or not joined.is_alive(), f"the engine process died: exit code {child.exitcode}"


def _reply(replies, child):
    """The engine process's next answer; fails at once if it dies first."""
    for _ in range(BUDGET_S):
        try:
            return replies.get(timeout=1)
        except queue.Empty:
            assert child.is_alive(), f"the engine process died: exit code {child.exitcode}"
    raise AssertionError(f"no answer from the engine process in {BUDGET_S} s")


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """The trainer's model (perturbed away from the engine's base weights), a fresh engine's
    signature on those weights, the trainer's sender and the engine process's queues."""
    from servers import free_port
    from transformers import AutoModelForImageTextToText

    from easyvideor1.rollout import VLLMEngine

    root = tmp_path_factory.mktemp("weight_broadcast")
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

    ctx = mp.get_context("spawn")
    commands, replies = ctx.Queue(), ctx.Queue()
    group = BroadcastGroup("127.0.0.1", free_port(), 0, 2, backend="gloo", timeout_s=BUDGET_S)
    child = ctx.Process(target=_engine_process, args=(str(base), group.port, commands, replies))
    child.start()
    sender = None
    try:
        _connect(group, child)
        assert _reply(replies, child) == "joined"
        sender = BucketSender(BroadcastTransport(group), bucket_bytes=SMALL)

        def sync(version):
            sender.transport.version = version
            commands.put("receive")
            stats = sender.send(model)
            return stats, _reply(replies, child)

        yield model, reference, sync, sender
        commands.put("stop")
        child.join(timeout=BUDGET_S)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()  # by its handle: only the process this fixture started
            child.join()
        if sender is not None:
            sender.close()
        else:
            group.close()


def test_group_is_not_the_default_process_group(pool):
    import torch.distributed as dist

    assert not dist.is_initialized()  # the trainer's FSDP group stays free to form


def test_broadcast_in_many_buckets_gives_the_engine_the_trainers_weights(pool):
    model, reference, sync, _ = pool
    stats, (version, loaded, signature) = sync(1)
    assert version == 1 and stats.buckets >= 5, stats
    assert loaded["transport"] == "BroadcastTransport"
    assert (loaded["buckets"], loaded["tensors"], loaded["nbytes"]) == (stats.buckets, stats.tensors, stats.nbytes)
    _assert_same(signature, reference)


def test_only_the_written_layer_travels_then_nothing(pool):
    model, reference, sync, _ = pool
    layer = next(p for n, p in model.named_parameters() if ".layers.1.mlp." in n)
    original = layer.detach().clone()
    with torch.no_grad():
        layer.add_(0.25)
    stats, (version, loaded, signature) = sync(2)
    assert version == 2 and signature != reference  # the engine took the change
    units = {weight_unit(n) for n, p in model.named_parameters() if ".layers.1." in n}
    assert len(units) == 1
    assert stats.tensors == sum(1 for n, _ in model.named_parameters() if weight_unit(n) in units)
    with torch.no_grad():
        layer.copy_(original)
    stats, (version, loaded, signature) = sync(3)
    assert version == 3 and stats.tensors < 20
    _assert_same(signature, reference)
    stats, (version, loaded, signature) = sync(4)  # nothing written since
    assert version == 4 and stats.buckets == 0 and loaded["buckets"] == 0 and loaded["tensors"] == 0
    _assert_same(signature, reference)
