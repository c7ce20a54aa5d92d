"""Loss aggregation: hand values, global normalisation across micro-batches and ranks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from easyvideor1.algos import (
    LOSS_AGG_MODES,
    AlgoInputError,
    aggregate_loss,
    compute_policy_loss,
    loss_denominators,
)
from easyvideor1.errors import ConfigError

FAST = settings(max_examples=50, deadline=None)

VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, float("nan")], [7.0, 8.0, 9.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])  # last row empty


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 15.0 / 5),
        ("seq-mean-token-mean", (2.0 + 4.5) / 2),  # the empty row takes no part
        ("seq-mean-token-sum", (6.0 + 9.0) / 2),
        ("seq-mean-token-sum-norm", (6.0 + 9.0) / 3 / 2),  # sums divided by T = 3, then by S = 2
    ],
)
def test_modes_by_hand(mode, expected):
    assert aggregate_loss(VALUES, MASK, mode).item() == pytest.approx(expected)


def test_explicit_denominators_and_scale_factor():
    assert aggregate_loss(VALUES, MASK, "token-mean", global_tokens=10).item() == pytest.approx(1.5)
    assert aggregate_loss(VALUES, MASK, "seq-mean-token-sum", global_seqs=5).item() == pytest.approx(3.0)
    assert aggregate_loss(VALUES, MASK, "seq-mean-token-sum-norm", loss_scale_factor=100).item() == pytest.approx(0.075)
    assert aggregate_loss(VALUES, MASK, "token-mean", global_tokens=10, dp_size=4).item() == pytest.approx(6.0)


def test_empty_mask_gives_zero_with_graph():
    values = torch.ones(2, 3, requires_grad=True)
    for mode in LOSS_AGG_MODES:
        loss = aggregate_loss(values, torch.zeros(2, 3), mode)
        assert loss.item() == 0.0
        loss.backward()
        assert (values.grad == 0).all()


def test_bad_arguments():
    with pytest.raises(ConfigError, match="known: token-mean, seq-mean-token-mean"):
        aggregate_loss(VALUES, MASK, "mean")
    with pytest.raises(AlgoInputError, match="needs global_tokens"):
        aggregate_loss(VALUES, MASK, "token-mean", dp_size=2)
    with pytest.raises(AlgoInputError, match="needs global_seqs"):
        aggregate_loss(VALUES, MASK, "seq-mean-token-mean", dp_size=2)
    with pytest.raises(AlgoInputError, match="global_tokens must be >= 0"):
        aggregate_loss(VALUES, MASK, "token-mean", global_tokens=-1)
    with pytest.raises(AlgoInputError, match="loss_scale_factor must be > 0"):
        aggregate_loss(VALUES, MASK, "seq-mean-token-sum-norm", loss_scale_factor=0)
    with pytest.raises(AlgoInputError, match="dp_size"):
        aggregate_loss(VALUES, MASK, "token-mean", dp_size=0)


@st.composite
def batches(draw):
    size, length = draw(st.integers(2, 8)), draw(st.integers(1, 6))
    values = draw(st.lists(st.floats(-5, 5), min_size=size * length, max_size=size * length))
    mask = draw(st.lists(st.booleans(), min_size=size * length, max_size=size * length))
    cuts = sorted(draw(st.lists(st.integers(1, size - 1), max_size=3, unique=True)))
    return (torch.tensor(values, dtype=torch.float64).view(size, length),
            torch.tensor(mask).view(size, length), cuts)


def split(tensor, cuts):
    bounds = [0, *cuts, tensor.shape[0]]
    return [tensor[start:end] for start, end in zip(bounds, bounds[1:])]


def global_counts(masks):
    counts = [loss_denominators(mask) for mask in masks]
    return {key: sum(c[key] for c in counts) for key in ("global_tokens", "global_seqs")}


@FAST
@given(batches(), st.sampled_from(LOSS_AGG_MODES))
def test_gradient_accumulation_sums_to_the_full_batch_loss(batch, mode):
    values, mask, cuts = batch
    full_leaf = values.clone().requires_grad_(True)
    full = aggregate_loss(full_leaf, mask, mode, loss_scale_factor=values.shape[1])
    full.backward()

    micro_leaf = values.clone().requires_grad_(True)
    counts = global_counts(split(mask, cuts))
    total = sum(
        aggregate_loss(part, part_mask, mode, **counts, loss_scale_factor=values.shape[1])
        for part, part_mask in zip(split(micro_leaf, cuts), split(mask, cuts))
    )
    total.backward()
    torch.testing.assert_close(total, full)
    torch.testing.assert_close(micro_leaf.grad, full_leaf.grad)


@FAST
@given(batches(), st.sampled_from(LOSS_AGG_MODES))
def test_data_parallel_average_equals_full_batch(batch, mode):
    """Two ranks with uneven shares; the all-reduce averages, so each rank scales by dp_size."""
    values, mask, cuts = batch
    full = aggregate_loss(values, mask, mode)
    middle = values.shape[0] // 2
    ranks = [(values[:middle], mask[:middle]), (values[middle:], mask[middle:])]
    counts = global_counts([mask[:middle], mask[middle:]])
    per_rank = [aggregate_loss(v, m, mode, **counts, dp_size=2) for v, m in ranks]
    torch.testing.assert_close(sum(per_rank) / 2, full)


def test_policy_loss_accumulates_like_the_full_batch():
    generator = torch.Generator().manual_seed(0)
    old = torch.randn(6, 5, generator=generator, dtype=torch.float64)
    new = old + 0.2 * torch.randn(6, 5, generator=generator, dtype=torch.float64)
    adv = torch.randn(6, 5, generator=generator, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0],
                         [1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    full, _ = compute_policy_loss("ppo", old, new, adv, mask)
    counts = global_counts([mask[:1], mask[1:]])
    parts = [compute_policy_loss("ppo", old[s], new[s], adv[s], mask[s], **counts)[0]
             for s in (slice(0, 1), slice(1, 6))]
    torch.testing.assert_close(sum(parts), full)
    naive = sum(compute_policy_loss("ppo", old[s], new[s], adv[s], mask[s])[0] for s in (slice(0, 1), slice(1, 6)))
    assert abs(naive / 2 - full) > 1e-3  # averaging local token-means is not the global mean
