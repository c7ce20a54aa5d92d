"""Advantage estimators: hand-computed cases, error messages and hypothesis properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from easyvideor1.algos import ADVANTAGE_ESTIMATORS, AlgoInputError, compute_advantage, discounted_returns
from easyvideor1.errors import ConfigError

GROUP_ESTIMATORS = ("grpo", "dr_grpo", "grpo_passk", "rloo", "reinforce_plus_plus_baseline", "gdpo")
FAST = settings(max_examples=50, deadline=None)


def outcome_rewards(scores, length=3, dtype=torch.float64):
    """Rewards placed on the last token of full-length responses."""
    rewards = torch.zeros(len(scores), length, dtype=dtype)
    rewards[:, -1] = torch.tensor(scores, dtype=dtype)
    return rewards, torch.ones(len(scores), length)


def extra_for(name, scores):
    if name == "remax":
        return {"reward_baselines": [0.0] * len(scores)}
    if name == "gdpo":
        return {"components": {"accuracy": list(scores)}}
    return {}


def test_grpo_hand_computed_with_interleaved_uids():
    # group p: [1, 0, 1, 1] -> mean 0.75, unbiased std 0.5; group q: [2, 4] -> mean 3, std sqrt(2)
    rewards, mask = outcome_rewards([1, 2, 0, 4, 1, 1])
    uids = ["p", "q", "p", "q", "p", "p"]
    advantages, returns = compute_advantage("grpo", rewards, mask, uids, eps=0.0)
    expected = torch.tensor([0.5, -1 / math.sqrt(2), -1.5, 1 / math.sqrt(2), 0.5, 0.5], dtype=torch.float64)
    torch.testing.assert_close(advantages, expected[:, None].expand(6, 3))
    torch.testing.assert_close(returns, advantages)


def test_grpo_eps_enters_denominator():
    rewards, mask = outcome_rewards([1, 0])
    advantages, _ = compute_advantage("grpo", rewards, mask, [7, 7], eps=0.5)
    std = math.sqrt(0.5)
    assert advantages[0, 0].item() == pytest.approx(0.5 / (std + 0.5))


def test_dr_grpo_and_rloo_hand_computed():
    rewards, mask = outcome_rewards([1, 0, 1, 1])
    uids = ["a"] * 4
    dr, _ = compute_advantage("dr_grpo", rewards, mask, uids)
    torch.testing.assert_close(dr[:, 0], torch.tensor([0.25, -0.75, 0.25, 0.25], dtype=torch.float64))
    loo, _ = compute_advantage("rloo", rewards, mask, uids)
    # r_i minus the mean of the other three
    torch.testing.assert_close(loo[:, 0], torch.tensor([1 / 3, -1.0, 1 / 3, 1 / 3], dtype=torch.float64))


def test_grpo_passk_credits_only_the_best():
    rewards, mask = outcome_rewards([0.2, 3.0, 0.9, 0.5, 3.0])
    advantages, _ = compute_advantage("grpo_passk", rewards, mask, ["g", "h", "g", "g", "h"], eps=0.0)
    values = [0.2, 0.9, 0.5]
    mean = sum(values) / 3
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
    expected = torch.tensor([0.0, 0.0, 0.4 / std, 0.0, 0.0], dtype=torch.float64)  # group h is a tie
    torch.testing.assert_close(advantages[:, 0], expected)


def test_reinforce_plus_plus_discounted_whitened():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, float("nan")]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    advantages, returns = compute_advantage("reinforce_plus_plus", rewards, mask, None, gamma=0.5)
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]], dtype=torch.float64))
    valid = torch.tensor([0.25, 0.5, 1.0, 1.0, 2.0], dtype=torch.float64)
    std = math.sqrt(((valid - 0.95) ** 2).sum().item() / 4 + 1e-8)
    expected = torch.tensor([[-0.7, -0.45, 0.05], [0.05, 1.05, 0.0]], dtype=torch.float64) / std
    expected[1, 2] = 0.0
    torch.testing.assert_close(advantages, expected)


def test_return_to_go_resets_after_a_masked_position():
    rewards = torch.tensor([[0.0, 9.0, 1.0]])
    mask = torch.tensor([[True, False, True]])
    returns = discounted_returns(torch.where(mask, rewards, 0.0), mask, gamma=1.0)
    torch.testing.assert_close(returns, torch.tensor([[0.0, 0.0, 1.0]]))


def test_reinforce_plus_plus_baseline_hand_computed():
    # groups: a = [1, 3] -> centred [-1, 1]; b = [2, 2] constant -> 0 (and 0 after whitening)
    rewards, mask = outcome_rewards([1, 3, 2, 2], length=2)
    advantages, _ = compute_advantage("reinforce_plus_plus_baseline", rewards, mask, ["a", "a", "b", "b"])
    tokens = torch.tensor([-1, -1, 1, 1, 0, 0, 0, 0], dtype=torch.float64)
    std = math.sqrt(tokens.square().sum().item() / 7 + 1e-8)
    torch.testing.assert_close(advantages[:, 0], torch.tensor([-1 / std, 1 / std, 0, 0], dtype=torch.float64))


def test_remax_subtracts_greedy_baseline():
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
    mask = torch.ones(2, 3)
    advantages, returns = compute_advantage("remax", rewards, mask, None, reward_baselines=torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 0.0], [3.0, 3.0, 3.0]]))
    torch.testing.assert_close(advantages, torch.tensor([[0.5, 0.5, -0.5], [2.0, 2.0, 2.0]]))


def test_gdpo_normalises_components_separately():
    rewards, mask = outcome_rewards([0, 0, 0, 0], length=2)
    components = {"accuracy": [1.0, 0.0, 1.0, 0.0], "format": [1.0, 1.0, 0.0, 0.0]}
    advantages, _ = compute_advantage(
        "gdpo", rewards, mask, ["a", "a", "b", "b"], eps=0.0, components=components,
        component_weights={"format": 0.5},
    )
    # format is constant inside each group -> 0; accuracy gives +-1/sqrt(2); whitening over 8 tokens
    # with unbiased variance 4/7 turns 1/sqrt(2) into sqrt(7/8)
    value = math.sqrt(7 / 8)
    torch.testing.assert_close(
        advantages[:, 0], torch.tensor([value, -value, value, -value], dtype=torch.float64), atol=1e-7, rtol=0
    )


def test_gdpo_weights_scale_components_before_whitening():
    rewards, mask = outcome_rewards([0, 0, 0, 0], length=1)
    uids = ["a", "a", "b", "b"]
    components = {"x": [1.0, 0.0, 1.0, 0.0], "y": [1.0, 0.0, 0.0, 1.0]}
    equal, _ = compute_advantage("gdpo", rewards, mask, uids, components=components)
    tilted, _ = compute_advantage("gdpo", rewards, mask, uids, components=components, component_weights={"y": 3.0})
    assert equal[2, 0].item() == pytest.approx(0.0, abs=1e-9)  # x and y cancel in group b
    assert tilted[2, 0].item() < 0  # y dominates once weighted


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "ppo_gae"}, "known: grpo, dr_grpo"),
        ({"uids": ["a"]}, "got 1 uids for a batch of 2"),
        ({"uids": [["x"], ["y"]]}, "not hashable"),
        ({"uids": None}, "uids are required"),
        ({"gamma": 1.5}, "gamma"),
    ],
)
def test_bad_input_is_named(kwargs, message):
    call = {"name": "grpo", "uids": ["a", "a"]} | kwargs
    rewards, mask = outcome_rewards([1, 0])
    with pytest.raises((ConfigError, AlgoInputError), match=message):
        compute_advantage(call["name"], rewards, mask, call["uids"], gamma=call.get("gamma", 1.0))


def test_shape_and_missing_extras_errors():
    rewards, mask = outcome_rewards([1, 0])
    with pytest.raises(AlgoInputError, match=r"response_mask has shape \(2, 2\), expected \(2, 3\)"):
        compute_advantage("grpo", rewards, mask[:, :2], ["a", "a"])
    with pytest.raises(AlgoInputError, match="reward_baselines"):
        compute_advantage("remax", rewards, mask, None)
    with pytest.raises(AlgoInputError, match="needs components"):
        compute_advantage("gdpo", rewards, mask, ["a", "a"])
    with pytest.raises(AlgoInputError, match=r"unknown component\(s\) \['speed'\]"):
        compute_advantage("gdpo", rewards, mask, ["a", "a"], components={"acc": [1, 0]},
                          component_weights={"speed": 1.0})
    with pytest.raises(AlgoInputError, match="only 0 and 1"):
        compute_advantage("grpo", rewards, mask * 2, ["a", "a"])
    with pytest.raises(AlgoInputError, match="floating-point"):
        compute_advantage("grpo", rewards.long(), mask, ["a", "a"])
    rewards[0, 1] = float("inf")
    with pytest.raises(AlgoInputError, match=r"not finite under the mask for sample\(s\) \[0\]"):
        compute_advantage("grpo", rewards, mask, ["a", "a"])


def test_tensor_uids_group_by_value():
    rewards, mask = outcome_rewards([1, 0, 0, 1])
    by_tensor, _ = compute_advantage("grpo", rewards, mask, torch.tensor([5, 6, 5, 6]))
    by_list, _ = compute_advantage("grpo", rewards, mask, [5, 6, 5, 6])
    torch.testing.assert_close(by_tensor, by_list)
    assert by_list[0, 0] > 0 and by_list[1, 0] < 0


# ---------------------------------------------------------------- properties


@st.composite
def batches(draw, max_batch=8, max_length=5):
    size = draw(st.integers(1, max_batch))
    length = draw(st.integers(1, max_length))
    rewards = draw(st.lists(st.floats(-3, 3, allow_nan=False), min_size=size * length, max_size=size * length))
    mask = draw(st.lists(st.booleans(), min_size=size * length, max_size=size * length))
    uids = draw(st.lists(st.sampled_from("abc"), min_size=size, max_size=size))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    return (torch.tensor(rewards, dtype=dtype).view(size, length), torch.tensor(mask).view(size, length), uids)


def with_junk(values, mask):
    junk = torch.full_like(values, float("nan"))
    junk[:, ::2] = float("inf")
    return torch.where(mask, values, junk)


@FAST
@given(batches(), st.sampled_from(ADVANTAGE_ESTIMATORS))
def test_shapes_masks_junk_and_finiteness(batch, name):
    rewards, mask, uids = batch
    scores = torch.where(mask, rewards, 0).sum(-1)
    extra = extra_for(name, scores.tolist())
    clean, clean_returns = compute_advantage(name, torch.where(mask, rewards, 0), mask, uids, **extra)
    dirty, dirty_returns = compute_advantage(name, with_junk(rewards, mask), mask, uids, **extra)
    assert clean.shape == rewards.shape and clean.dtype == rewards.dtype
    assert torch.isfinite(dirty).all() and torch.isfinite(dirty_returns).all()
    torch.testing.assert_close(dirty, clean)
    torch.testing.assert_close(dirty_returns, clean_returns)
    assert (dirty[~mask] == 0).all() and (dirty_returns[~mask] == 0).all()


@FAST
@given(batches(), st.sampled_from(GROUP_ESTIMATORS), st.floats(-5, 5))
def test_group_estimators_invariant_to_group_constant(batch, name, shift):
    rewards, mask, uids = batch
    rewards = rewards.double()
    shifted = rewards.clone()
    rows_a = [i for i, u in enumerate(uids) if u == "a"]
    for row in rows_a:  # add `shift` to the outcome reward of every member of group a
        valid = mask[row].nonzero().flatten()
        if len(valid):
            shifted[row, valid[-1]] += shift
    assume(all(mask[row].any() for row in rows_a))  # an empty response cannot carry the shift
    base_scores = torch.where(mask, rewards, 0).sum(-1).tolist()
    shifted_scores = torch.where(mask, shifted, 0).sum(-1).tolist()
    base, _ = compute_advantage(name, rewards, mask, uids, **extra_for(name, base_scores))
    moved, _ = compute_advantage(name, shifted, mask, uids, **extra_for(name, shifted_scores))
    torch.testing.assert_close(moved, base, atol=1e-6, rtol=1e-6)


@FAST
@given(batches(), st.sampled_from(GROUP_ESTIMATORS))
def test_constant_and_single_member_groups_get_exact_zero(batch, name):
    rewards, mask, uids = batch
    uids = list(uids)
    uids[0] = "solo"  # a group of one
    for row, uid in enumerate(uids):  # group b: every member has outcome reward 2
        if uid == "b":
            rewards[row] = 0
            rewards[row, 0] = 2.0
            mask[row, 0] = True
    scores = torch.where(mask, rewards, 0).sum(-1).tolist()
    advantages, _ = compute_advantage(name, rewards, mask, uids, **extra_for(name, scores))
    degenerate = [row for row, uid in enumerate(uids) if uid in ("solo", "b")]
    assert (advantages[degenerate] == 0).all()
    assert torch.isfinite(advantages).all()


@FAST
@given(batches(), st.sampled_from(ADVANTAGE_ESTIMATORS), st.randoms(use_true_random=False))
def test_permuting_samples_permutes_advantages(batch, name, rng):
    rewards, mask, uids = batch
    order = list(range(len(uids)))
    rng.shuffle(order)
    scores = torch.where(mask, rewards, 0).sum(-1).tolist()
    base, _ = compute_advantage(name, rewards, mask, uids, **extra_for(name, scores))
    permuted, _ = compute_advantage(
        name, rewards[order], mask[order], [uids[i] for i in order], **extra_for(name, [scores[i] for i in order])
    )
    if name == "grpo_passk":  # ties pick the first in batch order, but a tie credits nobody
        base, permuted = base.abs(), permuted.abs()
    torch.testing.assert_close(permuted, base[order], atol=1e-5, rtol=1e-5)


@FAST
@given(batches())
def test_grpo_matches_a_per_group_loop(batch):
    rewards, mask, uids = batch
    rewards = rewards.double()
    scores = torch.where(mask, rewards, 0).sum(-1)
    expected = torch.zeros_like(scores)
    for uid in set(uids):
        rows = [i for i, u in enumerate(uids) if u == uid]
        group = scores[rows]
        if len(rows) > 1 and group.max() > group.min():
            expected[rows] = (group - group.mean()) / (group.std() + 1e-6)
    advantages, _ = compute_advantage("grpo", rewards, mask, uids)
    torch.testing.assert_close(advantages, torch.where(mask, expected[:, None], 0.0))
