"""Dynamic batching: split a batch into micro-batches under a token budget.

Sequences are packed first-fit-decreasing by length, so micro-batches are few and even; a
sequence longer than the budget gets a micro-batch of its own (it is never truncated).
The loss of each micro-batch is normalised by the token count of the *whole* batch (all
micro-batches and all data-parallel ranks), which keeps the sum of micro-batch losses equal
to the full-batch token mean.
"""

from __future__ import annotations


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
