r"""DAPO dynamic sampling (online group filtering) and soft overlong punishment.

Dynamic sampling keeps only groups whose mean of a chosen reward key (accuracy by default) lies
*strictly* inside (low, high): with 0/1 accuracy and the defaults (0, 1) this drops groups that are
all wrong or all right, whose group-relative advantage is 0 everywhere. Generation is repeated
until enough informative groups are collected or ``max_tries`` batches have been drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from easyvideor1.errors import EasyVideoR1Error

from ._checks import AlgoInputError, check_vector, uid_list
from ._groups import GroupIndex


class DynamicSamplingExhaustedError(EasyVideoR1Error):
    """``max_tries`` generated batches did not yield enough informative groups."""


def informative_group_mask(
    uids: Sequence[Hashable], values: Sequence[float] | torch.Tensor, *, low: float = 0.0, high: float = 1.0
) -> torch.Tensor:
    r"""(B,) bool: sample :math:`i` is kept iff :math:`low < \mathrm{mean}_{G(i)} v < high`."""
    if not low < high:
        raise AlgoInputError(f"dynamic sampling needs low < high, got low={low}, high={high}")
    size = len(uid_list(uids, len(values)))
    values = check_vector("values", values, size, torch.empty(0, dtype=torch.float64))
    group_mean = GroupIndex.from_uids(uids, size, values.device).mean(values)
    return (group_mean > low) & (group_mean < high)


@dataclass(frozen=True)
class ScoredBatch:
    """One generated batch: per sample its group uid, the filtered reward key and a payload."""

    uids: Sequence[Hashable]
    values: Sequence[float] | torch.Tensor
    items: Sequence[Any]


@dataclass(frozen=True)
class DynamicSamplingResult:
    """Kept samples (batch order, whole groups only) and the bookkeeping for metrics."""

    items: list[Any]
    uids: list[Hashable]
    values: list[float]
    groups_kept: int
    groups_seen: int
    batches_drawn: int


def collect_informative_groups(
    next_batch: Callable[[], ScoredBatch],
    *,
    target_groups: int,
    max_tries: int,
    low: float = 0.0,
    high: float = 1.0,
) -> DynamicSamplingResult:
    """Call ``next_batch()`` until ``target_groups`` informative groups are collected.

    ``max_tries`` counts every call, the first included. Surplus groups of the last batch are
    dropped, so exactly ``target_groups`` groups come back. Every generated batch must use fresh
    uids: a uid seen in an earlier batch is an error (it would merge two groups downstream).
    Raises DynamicSamplingExhaustedError when ``max_tries`` batches were not enough.
    """
    if not (isinstance(target_groups, int) and target_groups >= 1):
        raise AlgoInputError(f"target_groups must be an int >= 1, got {target_groups!r}")
    if not (isinstance(max_tries, int) and max_tries >= 1):
        raise AlgoInputError(f"max_tries must be an int >= 1, got {max_tries!r}")
    items: list[Any] = []
    kept_uids: list[Hashable] = []
    kept_values: list[float] = []
    seen: set[Hashable] = set()
    groups_kept = groups_seen = 0
    for attempt in range(1, max_tries + 1):
        batch = next_batch()
        if not isinstance(batch, ScoredBatch):
            raise AlgoInputError(f"next_batch must return a ScoredBatch, got {type(batch).__name__}")
        uids = uid_list(batch.uids, len(batch.items))
        keep = informative_group_mask(uids, batch.values, low=low, high=high).tolist()
        first_position: dict[Hashable, int] = {}
        for position, uid in enumerate(uids):
            first_position.setdefault(uid, position)
        batch_uids = list(first_position)
        reused = [uid for uid in batch_uids if uid in seen]
        if reused:
            raise AlgoInputError(f"uid(s) {reused[:5]} already appeared in an earlier generated batch")
        seen.update(batch_uids)
        groups_seen += len(batch_uids)
        room = target_groups - groups_kept
        chosen = [uid for uid in batch_uids if keep[first_position[uid]]][:room]
        groups_kept += len(chosen)
        chosen_set = set(chosen)
        values = [float(v) for v in (batch.values.tolist() if hasattr(batch.values, "tolist") else batch.values)]
        for uid, value, item in zip(uids, values, batch.items):
            if uid in chosen_set:
                items.append(item)
                kept_uids.append(uid)
                kept_values.append(value)
        if groups_kept == target_groups:
            return DynamicSamplingResult(items, kept_uids, kept_values, groups_kept, groups_seen, attempt)
    raise DynamicSamplingExhaustedError(
        f"dynamic sampling kept {groups_kept} of {target_groups} required groups after {max_tries} "
        f"generated batch(es) ({groups_seen} groups seen, mean outside ({low}, {high}) for the rest); "
        "raise max_tries, lower the batch size, or filter the dataset by difficulty"
    )


def overlong_penalty(
    response_lengths: Sequence[int] | torch.Tensor,
    *,
    max_length: int,
    buffer_length: int,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    r"""DAPO soft overlong punishment, added to the outcome reward. With :math:`L` the response
    length, :math:`L_{max}` = ``max_length``, :math:`L_{buf}` = ``buffer_length``, :math:`\lambda` =
    ``penalty_factor``:

    .. math:: P(L) = -\lambda\,\min\Big(1, \frac{\max(0,\, L - (L_{max} - L_{buf}))}{L_{buf}}\Big)

    0 up to :math:`L_{max} - L_{buf}`, linear down to :math:`-\lambda` at :math:`L_{max}`, and
    :math:`-\lambda` beyond. Returns (B,) in the default float dtype (or the lengths' float dtype).
    """
    if not (isinstance(max_length, int) and max_length >= 1):
        raise AlgoInputError(f"max_length must be an int >= 1, got {max_length!r}")
    if not (isinstance(buffer_length, int) and 1 <= buffer_length <= max_length):
        raise AlgoInputError(f"buffer_length must be an int in [1, max_length={max_length}], got {buffer_length!r}")
    if not penalty_factor >= 0:
        raise AlgoInputError(f"penalty_factor must be >= 0, got {penalty_factor}")
    lengths = torch.as_tensor(response_lengths)
    if lengths.dim() != 1:
        raise AlgoInputError(f"response_lengths must be 1-D (B,), got shape {tuple(lengths.shape)}")
    dtype = lengths.dtype if lengths.is_floating_point() else torch.get_default_dtype()
    lengths = lengths.to(dtype)
    if bool((lengths < 0).any()):
        raise AlgoInputError("response_lengths must be >= 0")
    excess = (lengths - (max_length - buffer_length)).clamp(min=0) / buffer_length
    return -penalty_factor * excess.clamp(max=1.0)
