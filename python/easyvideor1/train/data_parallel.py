"""Data-parallel split of a batch over the FSDP ranks.

FSDP shards parameters, gradients and optimizer state; this module makes the *compute* data
parallel too: each rank forwards only its shard of the batch's sequences.

* :func:`shard_batch` deals the sequences out greedily, longest first, to the rank with the
  fewest tokens so far, so the ranks' token counts (and so their step times) stay even.
  Every shard names a ``filler``: a small sequence the rank may run as a zero-weight padding
  micro-batch (the shard's shortest, or the batch's shortest for a rank left without any).
* :func:`update_plan` fixes the PPO schedule (epochs, shuffled mini-batches) from the seed
  alone and splits every mini-batch, so every rank, and a driver that sends each rank only
  what it needs (services/trainer), derive the same optimizer steps; :func:`rank_view` is one
  rank's part of it, re-indexed into the items it receives.
* :class:`DataParallel` holds the few collectives the actor needs (gather small count
  vectors, sum metrics, share per-sequence log-probs); with one rank they make no call.

With ``keys`` (the group ids, under the shared-prefix layout) :func:`shard_batch` and
:func:`update_plan` keep every group whole on one rank and in one mini-batch, so its prompt is
laid out once; a sequence's cost is then its share of its group's tokens as laid out.

The actor (train/actor.py) agrees on the largest micro-batch count of a step and pads the
others with zero-weight micro-batches, so every rank makes the same FSDP collectives.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from easyvideor1.train.batching import group_positions


@dataclass(frozen=True)
class RankShard:
    """One rank's part of a batch (or of one mini-batch): positions in the batch, ascending."""

    indices: list[int]
    filler: int  # a position whose item backs the rank's zero-weight padding micro-batches
    cost: int = 0  # tokens in the shard


def balanced_shards(costs: Sequence[int], world_size: int) -> list[list[int]]:
    """Positions of ``costs`` dealt to ``world_size`` ranks, longest first to the least loaded rank
    (ties: fewer sequences, then the lower rank); each list ascending. With at least as many
    sequences as ranks, no rank is left empty."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    loads = [(0, 0, rank) for rank in range(world_size)]  # (tokens, sequences, rank)
    shards: list[list[int]] = [[] for _ in range(world_size)]
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        slot = min(range(world_size), key=lambda r: loads[r])
        tokens, count, rank = loads[slot]
        loads[slot] = (tokens + int(costs[index]), count + 1, rank)
        shards[rank].append(index)
    return [sorted(s) for s in shards]


def shard_batch(costs: Sequence[int], world_size: int, positions: Sequence[int] | None = None,
                keys: Sequence[Hashable] | None = None) -> list[RankShard]:
    """:func:`balanced_shards` with fillers. ``positions`` maps entry k of ``costs`` to its
    position in the batch (default: k); with ``keys``, entries of one key go to one rank."""
    if not costs:
        raise ValueError("cannot shard an empty batch")
    where = list(range(len(costs))) if positions is None else list(positions)
    shortest = min(range(len(costs)), key=lambda i: (costs[i], i))
    out = []
    for members in _balanced(costs, world_size, keys):
        filler = min(members, key=lambda i: (costs[i], i)) if members else shortest
        out.append(RankShard(sorted(where[i] for i in members), where[filler], sum(int(costs[i]) for i in members)))
    return out


def _balanced(costs: Sequence[int], world_size: int, keys: Sequence[Hashable] | None) -> list[list[int]]:
    if keys is None:
        return balanced_shards(costs, world_size)
    groups = group_positions(keys)
    shards = balanced_shards([sum(int(costs[i]) for i in g) for g in groups], world_size)
    return [sorted(i for g in shard for i in groups[g]) for shard in shards]


def update_plan(costs: Sequence[int], uids: Sequence[str], *, seed: int, ppo_epochs: int, mini_batch_size: int,
                world_size: int, whole_groups: bool = False) -> list[list[RankShard]]:
    """The optimizer steps of one update: per step, one :class:`RankShard` per rank.

    Each epoch shuffles the batch (``random.Random(seed)``) and cuts mini-batches of
    ``mini_batch_size`` questions (x the group size); each mini-batch is split by tokens.
    ``whole_groups`` (the shared-prefix layout): the groups (by uid) are shuffled instead of
    the sequences, each mini-batch holds ``mini_batch_size`` whole groups, each on one rank.
    """
    if len(costs) != len(uids):
        raise ValueError(f"{len(costs)} costs but {len(uids)} uids")
    rng = random.Random(seed)
    steps = []
    if whole_groups:
        groups = group_positions(uids)
        for _epoch in range(ppo_epochs):
            order = list(range(len(groups)))
            rng.shuffle(order)
            for start in range(0, len(order), mini_batch_size):
                mini = [i for g in order[start:start + mini_batch_size] for i in groups[g]]
                steps.append(shard_batch([costs[i] for i in mini], world_size, positions=mini,
                                         keys=[uids[i] for i in mini]))
        return steps
    group_size = max(1, len(costs) // max(1, len(set(uids))))
    per_minibatch = mini_batch_size * group_size
    for _epoch in range(ppo_epochs):
        order = list(range(len(costs)))
        rng.shuffle(order)
        for start in range(0, len(order), per_minibatch):
            mini = order[start:start + per_minibatch]
            steps.append(shard_batch([costs[i] for i in mini], world_size, positions=mini))
    return steps


def rank_view(steps: Sequence[RankShard]) -> tuple[list[int], list[RankShard]]:
    """The batch positions one rank needs (its sequences and fillers, ascending) and its steps
    re-indexed into that list."""
    needed = sorted({i for step in steps for i in (*step.indices, step.filler)})
    local = {index: k for k, index in enumerate(needed)}
    return needed, [RankShard([local[i] for i in s.indices], local[s.filler], s.cost) for s in steps]


@dataclass(frozen=True)
class DataParallel:
    """The data-parallel group of the actor: the FSDP ranks, or one rank (no collectives)."""

    rank: int = 0
    size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    def gather(self, values: Sequence[float]) -> torch.Tensor:
        """Every rank's ``values``: a float64 CPU tensor ``(size, len(values))``."""
        local = torch.tensor([list(values)], dtype=torch.float64, device=self.device)
        if self.size == 1:
            return local.cpu()
        rows = [torch.empty_like(local) for _ in range(self.size)]
        dist.all_gather(rows, local)
        return torch.cat(rows).cpu()

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Sums over the ranks (every rank must pass the same keys)."""
        if self.size == 1 or not values:
            return dict(values)
        keys = sorted(values)
        tensor = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return dict(zip(keys, tensor.tolist()))

    def share_rows(self, lengths: Sequence[int], mine: dict[int, torch.Tensor]) -> list[torch.Tensor]:
        """Rows of the whole batch (row i has ``lengths[i]`` values) from each rank's own rows
        ``mine`` (batch position -> row): summed into one buffer where the other ranks hold
        zeros, so every value arrives exactly."""
        offsets = [0]
        for n in lengths:
            offsets.append(offsets[-1] + int(n))
        flat = torch.zeros(offsets[-1], dtype=torch.float32, device=self.device)
        for index, row in mine.items():
            flat[offsets[index]:offsets[index + 1]] = row.to(device=self.device, dtype=torch.float32)
        if self.size > 1:
            dist.all_reduce(flat)
        flat = flat.cpu()
        return [flat[offsets[i]:offsets[i + 1]].clone() for i in range(len(lengths))]

    def check_same_batch(self, costs: Sequence[int], uids: Sequence[str]) -> None:
        """Every rank was handed the same batch (the split assumes it); a clear error if not."""
        if self.size == 1:
            return
        import zlib

        fingerprint = [len(costs), sum(int(c) for c in costs), zlib.crc32("\x1f".join(map(str, uids)).encode())]
        rows = self.gather(fingerprint)
        if not bool((rows == rows[0]).all()):
            raise ValueError("the ranks were handed different batches (count, tokens, uid checksum per rank: "
                             f"{rows.long().tolist()}): the data-parallel split needs the same batch on every rank")
