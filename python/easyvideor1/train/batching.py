"""Dynamic batching: split a batch into micro-batches under a token budget.

Sequences are packed first-fit-decreasing by length, so micro-batches are few and even; a
sequence longer than the budget gets a micro-batch of its own (it is never truncated).
The loss of each micro-batch is normalised by the token count of the *whole* batch (all
micro-batches and all data-parallel ranks), which keeps the sum of micro-batch losses equal
to the full-batch token mean.

With a shared prefix (models/packing.py ``pack_shared_batch``) a group of rows that share a
prompt costs the prompt once plus its responses: :func:`shared_prefix_microbatches` keeps
groups whole where they fit and cuts a larger one into chunks of responses, each chunk laying
the prompt out again.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any


def token_budget_microbatches(lengths: list[int], budget: int, *, packed: bool = False) -> list[list[int]]:
    """Indices grouped so that a group's size <= ``budget``: count x longest when padded, the sum
    of lengths when packed without padding."""
    if budget <= 0:
        raise ValueError(f"token budget must be > 0, got {budget}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    longest: list[int] = []
    for index in order:
        length = lengths[index]
        for g, members in enumerate(groups):
            if packed:
                size = sum(lengths[i] for i in members) + length
            else:
                size = max(longest[g], length) * (len(members) + 1)
            if size <= budget:
                members.append(index)
                longest[g] = max(longest[g], length)
                break
        else:
            groups.append([index])
            longest.append(length)
    return [sorted(g) for g in groups]


def group_positions(keys: Sequence[Hashable]) -> list[list[int]]:
    """Positions of each distinct key, in order of first appearance."""
    groups: dict[Hashable, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def shared_prefix_microbatches(prompt_lengths: Sequence[int], response_lengths: Sequence[int],
                               keys: Sequence[Hashable], budget: int) -> list[list[int]]:
    """Indices grouped so that each micro-batch, laid out with one prompt per group (or chunk of a
    group), holds at most ``budget`` tokens (a chunk of one response may exceed it alone)."""
    if budget <= 0:
        raise ValueError(f"token budget must be > 0, got {budget}")
    units: list[tuple[int, list[int]]] = []  # (tokens as laid out, indices)
    for members in group_positions(keys):
        prompt = int(prompt_lengths[members[0]])
        chunk: list[int] = []
        cost = prompt
        for index in sorted(members, key=lambda i: -response_lengths[i]):
            if chunk and cost + response_lengths[index] > budget:
                units.append((cost, chunk))
                chunk, cost = [], prompt
            chunk.append(index)
            cost += int(response_lengths[index])
        units.append((cost, chunk))
    packed = token_budget_microbatches([cost for cost, _ in units], budget, packed=True)
    return [sorted(i for unit in group for i in units[unit][1]) for group in packed]


def prompt_keys(items: Sequence[Any]) -> list[tuple[str, tuple[int, ...]]]:
    """What makes training items share a laid-out prompt (as models/packing.py groups them)."""
    return [(it.prompt.sample_id, tuple(it.prompt.prompt_ids)) for it in items]


def laid_out_costs(items: Sequence[Any], shared: bool) -> list[int]:
    """Tokens each training item adds to a forward: with a shared prefix its group's first item
    carries the prompt, the others their responses only (what shards and budgets balance)."""
    if not shared:
        return [it.length for it in items]
    costs = [len(it.response) for it in items]
    for members in group_positions(prompt_keys(items)):
        costs[members[0]] += len(items[members[0]].prompt.prompt_ids)
    return costs
