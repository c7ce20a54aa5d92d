"""DAPO dynamic sampling (group filter and refill loop) and soft overlong punishment."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from easyvideor1.algos import (
    AlgoInputError,
    DynamicSamplingExhaustedError,
    ScoredBatch,
    collect_informative_groups,
    informative_group_mask,
    overlong_penalty,
)


def test_mask_keeps_groups_strictly_inside_bounds():
    uids = ["all-right", "mixed", "all-right", "mixed", "all-wrong", "all-wrong"]
    accuracy = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    keep = informative_group_mask(uids, accuracy)
    assert keep.tolist() == [False, True, False, True, False, False]
    # custom bounds: keep groups with mean in (0.2, 0.9) -> only "mixed" (mean 0.5)
    assert informative_group_mask(uids, torch.tensor(accuracy), low=0.2, high=0.9).tolist() == keep.tolist()
    with pytest.raises(AlgoInputError, match="low < high"):
        informative_group_mask(uids, accuracy, low=1.0, high=1.0)


def scripted(batches):
    source = iter(batches)
    return lambda: next(source)


def group_batch(prefix, accuracies_per_group, n=2):
    uids, values, items = [], [], []
    for index, accuracies in enumerate(accuracies_per_group):
        for position, value in enumerate(accuracies[:n]):
            uids.append(f"{prefix}{index}")
            values.append(value)
            items.append((prefix, index, position))
    return ScoredBatch(uids, values, items)


def test_refill_collects_exactly_the_target_number_of_groups():
    first = group_batch("a", [[1, 1], [1, 0], [0, 0]])  # one informative group
    second = group_batch("b", [[0, 1], [0, 0], [1, 0]])  # two more; only one is needed
    result = collect_informative_groups(scripted([first, second]), target_groups=2, max_tries=3)
    assert result.items == [("a", 1, 0), ("a", 1, 1), ("b", 0, 0), ("b", 0, 1)]
    assert result.uids == ["a1", "a1", "b0", "b0"]
    assert result.values == [1.0, 0.0, 0.0, 1.0]
    assert (result.groups_kept, result.groups_seen, result.batches_drawn) == (2, 6, 2)


def test_refill_gives_up_with_a_typed_error():
    hopeless = (group_batch(f"x{i}", [[1, 1], [0, 0]]) for i in itertools.count())
    with pytest.raises(DynamicSamplingExhaustedError, match=r"kept 0 of 1 required groups after 3"):
        collect_informative_groups(lambda: next(hopeless), target_groups=1, max_tries=3)


def test_refill_rejects_reused_uids_and_bad_arguments():
    same = group_batch("a", [[1, 0]])
    with pytest.raises(AlgoInputError, match=r"already appeared in an earlier generated batch"):
        collect_informative_groups(scripted([same, same]), target_groups=2, max_tries=2)
    with pytest.raises(AlgoInputError, match="max_tries must be an int >= 1"):
        collect_informative_groups(scripted([same]), target_groups=1, max_tries=0)
    with pytest.raises(AlgoInputError, match="must return a ScoredBatch"):
        collect_informative_groups(lambda: [1, 2], target_groups=1, max_tries=1)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=4), min_size=1, max_size=6))
def test_kept_groups_are_whole_and_informative(groups):
    batch = group_batch("g", groups, n=4)
    informative = [i for i, g in enumerate(groups) if 0 < sum(g) / len(g) < 1]
    if not informative:
        with pytest.raises(DynamicSamplingExhaustedError):
            collect_informative_groups(scripted([batch]), target_groups=1, max_tries=1)
        return
    result = collect_informative_groups(scripted([batch]), target_groups=len(informative), max_tries=1)
    assert sorted({index for _, index, _ in result.items}) == informative
    assert len(result.items) == sum(len(groups[i]) for i in informative)


def test_overlong_penalty_by_hand():
    lengths = torch.tensor([10, 12, 14, 16, 20])
    penalty = overlong_penalty(lengths, max_length=16, buffer_length=4, penalty_factor=0.5)
    # expected length 12: 0 up to 12, then linear to -0.5 at 16, capped beyond
    torch.testing.assert_close(penalty, torch.tensor([0.0, 0.0, -0.25, -0.5, -0.5]))
    assert overlong_penalty([3.0], max_length=4, buffer_length=4).dtype == torch.get_default_dtype()
    with pytest.raises(AlgoInputError, match=r"buffer_length must be an int in \[1, max_length=4\]"):
        overlong_penalty([1], max_length=4, buffer_length=5)
    with pytest.raises(AlgoInputError, match="penalty_factor"):
        overlong_penalty([1], max_length=4, buffer_length=2, penalty_factor=-1.0)
