"""Data-parallel split of the batch over FSDP ranks (train/data_parallel.py, train/actor.py).

The planning functions, then two real gloo ranks, each forwarding only its shard of an odd
batch of very different sequences (the image on one rank, the videos on the other, unequal
micro-batch counts), against one rank on the whole batch: same log-probs, losses, metrics and
gradients for every aggregation mode."""

from __future__ import annotations

import pytest
import torch
from dp_worker import CASES, run_split_world
from fsdp_worker import make_media
from servers import free_port

from easyvideor1.train.data_parallel import DataParallel, balanced_shards, rank_view, shard_batch, update_plan

REL = 1e-5


def test_balanced_shards_deal_longest_first_to_the_lightest_rank():
    costs = [5, 100, 7, 60, 58, 3, 41]
    shards = balanced_shards(costs, 2)
    assert shards == [[1, 6], [0, 2, 3, 4, 5]]  # 100 + 41 vs 60 + 58 + 7 + 5 + 3
    assert sorted(i for s in shards for i in s) == list(range(len(costs)))
    loads = [sum(costs[i] for i in s) for s in shards]
    assert abs(loads[0] - loads[1]) <= max(costs)
    three = balanced_shards(costs, 3)
    assert all(three) and sorted(i for s in three for i in s) == list(range(len(costs)))
    with pytest.raises(ValueError):
        balanced_shards(costs, 0)


def test_a_rank_without_sequences_borrows_the_shortest_as_filler():
    shards = shard_batch([40, 9], 3, positions=[7, 2])
    assert [s.indices for s in shards] == [[7], [2], []]
    assert [s.filler for s in shards] == [7, 2, 2]
    assert [s.cost for s in shards] == [40, 9, 0]


def test_update_plan_is_the_shuffled_schedule_split_per_mini_batch():
    costs, uids = [10, 20, 30, 40, 50, 60, 70], list("aabbccd")  # groups of 2 (7 // 4 uids = 1)
    one = update_plan(costs, uids, seed=3, ppo_epochs=2, mini_batch_size=3, world_size=1)
    two = update_plan(costs, uids, seed=3, ppo_epochs=2, mini_batch_size=3, world_size=2)
    assert [len(step[0].indices) for step in one] == [3, 3, 1] * 2
    for single, split in zip(one, two):
        assert sorted(split[0].indices + split[1].indices) == single[0].indices  # same mini-batches
        assert not set(split[0].indices) & set(split[1].indices)
    assert two[2][1].indices == [] and two[2][1].filler == two[2][0].indices[0]
    needed, local = rank_view([step[1] for step in two])
    for step, mine in zip(two, local):
        assert [needed[i] for i in mine.indices] == step[1].indices and needed[mine.filler] == step[1].filler


def test_share_rows_with_one_rank_is_the_identity():
    rows = {0: torch.tensor([1.0, 2.0]), 1: torch.tensor([]), 2: torch.tensor([3.0])}
    shared = DataParallel().share_rows([2, 0, 1], rows)
    assert [r.tolist() for r in shared] == [[1.0, 2.0], [], [3.0]]


@pytest.fixture(scope="module")
def worlds(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    media = make_media(root / "media")
    try:
        one = run_split_world(1, tiny_model_dir, media, root, port=free_port())
        two = run_split_world(2, tiny_model_dir, media, root, port=free_port())
    except TimeoutError as exc:
        pytest.fail(str(exc))
    return one, two


def rel_diff(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def test_each_rank_forwards_only_its_shard(worlds):
    (single,), (rank0, rank1) = worlds
    uids, lengths = single["uids"], single["lengths"]
    shards = [set(rank0["shard_uids"]), set(rank1["shard_uids"])]
    assert not shards[0] & shards[1] and shards[0] | shards[1] == set(uids)
    # The image and the videos land on different ranks: their vision calls differ.
    holds_image = [("image" in s) for s in shards]
    holds_video = [bool({"video", "video2"} & s) for s in shards]
    assert holds_image == [not v for v in holds_video] and any(holds_image)
    counts = [rank0["log_prob_shard"], rank1["log_prob_shard"]]
    assert [c["sequences"] for c in counts] == [len(s) for s in shards]
    assert sum(c["tokens"] for c in counts) == sum(lengths)
    assert single["log_prob_shard"]["sequences"] == len(uids)
    metrics = rank0["cases"]["token-mean"]["metrics"]
    per_rank = [metrics[f"dp/rank{r}/sequences"] for r in range(2)]
    assert sum(per_rank) == len(uids) and all(0 < n < len(uids) for n in per_rank)
    assert sum(metrics[f"dp/rank{r}/tokens"] for r in range(2)) == sum(lengths)
    assert single["cases"]["token-mean"]["metrics"]["dp/rank0/sequences"] == len(uids)
    # Unequal micro-batch counts, evened out with zero-weight padding micro-batches.
    micro = [metrics[f"dp/rank{r}/micro_batches"] for r in range(2)]
    padding = [metrics[f"dp/rank{r}/padding_micro_batches"] for r in range(2)]
    assert micro[0] != micro[1] and [m + p for m, p in zip(micro, padding)] == [max(micro)] * 2
    assert sum(c["padding_micro_batches"] for c in counts) > 0


def test_log_probs_come_back_in_batch_order(worlds):
    (single,), (rank0, rank1) = worlds
    for key in ("log_probs", "ref_log_probs"):
        for uid, want, got0, got1 in zip(single["uids"], single[key], rank0[key], rank1[key]):
            assert torch.equal(got0, got1), f"{key} of {uid}: the ranks disagree"
            assert got0.shape == want.shape
            torch.testing.assert_close(got0, want, rtol=REL, atol=1e-6, msg=f"{key} of {uid}")


@pytest.mark.parametrize("case", list(CASES))
def test_two_split_ranks_match_one_rank_on_the_whole_batch(worlds, case):
    (single,), (rank0, rank1) = worlds
    want, got = single["cases"][case], rank0["cases"][case]
    assert got["metrics"] == rank1["cases"][case]["metrics"]  # every rank logs the same values
    keys = [k for k in want["metrics"] if not k.startswith("dp/")]
    assert {"actor/pg_loss", "actor/kl_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy",
            "actor/grad_norm", "mix_policy/offline_loss_share"} <= set(keys)
    assert set(keys) == {k for k in got["metrics"] if not k.startswith("dp/")}
    for key in keys:
        assert got["metrics"][key] == pytest.approx(want["metrics"][key], rel=REL, abs=1e-9), key
    assert want["metrics"]["actor/kl_loss"] > 0 and want["metrics"]["actor/grad_norm"] > 0
    # A parameter one world never reached (the vision tower, for a text-only last step: the split
    # world's dummy vision calls give it exact zeros) has no gradient: compare as zeros.
    names = set(got["grads"]) | set(want["grads"])
    if case != "two-epochs-three-steps":  # its last mini-batch is one text sequence
        assert any("visual" in name and float(g.abs().sum()) > 0 for name, g in want["grads"].items())
    worst = 0.0
    for name in names:
        a, b = got["grads"].get(name), want["grads"].get(name)
        a = torch.zeros_like(b) if a is None else a
        b = torch.zeros_like(a) if b is None else b
        worst = max(worst, float((a - b).abs().max()) / (float(b.abs().max()) or 1.0))
    assert worst <= REL, f"{case}: gradients differ by {worst:.2e} (relative to each tensor's largest value)"
