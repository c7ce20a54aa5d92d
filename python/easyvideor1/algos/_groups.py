"""Grouping of samples by uid *value* and per-group statistics broadcast back to samples.

Samples of one prompt share a uid; they may sit anywhere in the batch (interleaved positions are
fine). Groups are numbered in order of first appearance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._checks import uid_list


@dataclass(frozen=True)
class GroupIndex:
    """``ids[i]`` is the group number of sample ``i``; ``members[g]`` lists group ``g``'s samples."""

    ids: torch.Tensor  # (B,) int64
    members: tuple[tuple[int, ...], ...]

    @classmethod
    def from_uids(cls, uids: object, batch_size: int, device: torch.device) -> GroupIndex:
        numbering: dict[object, int] = {}
        members: list[list[int]] = []
        ids = []
        for position, uid in enumerate(uid_list(uids, batch_size)):
            group = numbering.setdefault(uid, len(numbering))
            if group == len(members):
                members.append([])
            members[group].append(position)
            ids.append(group)
        return cls(torch.tensor(ids, dtype=torch.long, device=device), tuple(tuple(m) for m in members))

    @property
    def num_groups(self) -> int:
        return len(self.members)

    def sizes(self, like: torch.Tensor) -> torch.Tensor:
        """Group size of every sample, (B,), in ``like``'s dtype."""
        counts = torch.bincount(self.ids, minlength=self.num_groups).to(like.dtype)
        return counts[self.ids]

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """Group mean of ``values`` (B,), broadcast back to every sample."""
        totals = values.new_zeros(self.num_groups).index_add_(0, self.ids, values)
        return (totals / torch.bincount(self.ids, minlength=self.num_groups).to(values.dtype))[self.ids]

    def std(self, values: torch.Tensor) -> torch.Tensor:
        r"""Unbiased group std :math:`\sqrt{\sum (x-\bar x)^2/(n-1)}` (``torch.std``), 0 for n = 1."""
        deviation = values - self.mean(values)
        squares = values.new_zeros(self.num_groups).index_add_(0, self.ids, deviation * deviation)
        sizes = self.sizes(values)
        return torch.sqrt(squares[self.ids] / (sizes - 1).clamp(min=1))

    def degenerate(self, values: torch.Tensor) -> torch.Tensor:
        """True for samples whose group has one member or a constant value: no ranking signal."""
        highest = values.new_full((self.num_groups,), -torch.inf).scatter_reduce(
            0, self.ids, values, reduce="amax", include_self=True
        )
        lowest = values.new_full((self.num_groups,), torch.inf).scatter_reduce(
            0, self.ids, values, reduce="amin", include_self=True
        )
        constant = (highest == lowest)[self.ids]
        return constant | (self.sizes(values) < 2)
