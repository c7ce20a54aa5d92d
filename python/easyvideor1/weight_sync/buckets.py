"""Buckets: many tensors packed into one reusable byte buffer, and read back as views.

The sender casts each tensor into its slot of the bucket; the receiver takes a view per slot
(``bucket[offset:offset+nbytes].view(dtype).view(shape)``) and hands those views to the
model's loader, so nothing is copied on the way but the bucket itself. Tensors travel grouped
by unit (a decoder layer, a vision block: :func:`~easyvideor1.weight_sync.host.weight_unit`),
a unit never split between buckets: vLLM's layerwise reload (the CPU receiver) needs all of a
fused layer's pieces (q/k/v, gate/up) in one call. A unit larger than the bucket goes alone in
a bucket of its own size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from easyvideor1.weight_sync.host import weight_unit

ALIGN = 256  # slot offsets: any dtype's view of the bucket stays aligned


@dataclass(frozen=True)
class Slot:
    """Where one tensor lies in a bucket; plain fields, so it travels through any RPC."""

    name: str
    dtype: str  # torch dtype name without "torch."
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def to_wire(self) -> list[Any]:
        return [self.name, self.dtype, list(self.shape), self.offset, self.nbytes]

    @classmethod
    def from_wire(cls, item: Sequence[Any]) -> Slot:
        name, dtype, shape, offset, nbytes = item
        return cls(str(name), str(dtype), tuple(int(d) for d in shape), int(offset), int(nbytes))


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_buckets(entries: Sequence[tuple[str, tuple[int, ...], Any]], capacity: int) -> list[list[Slot]]:
    """Slots per bucket for ``(name, shape, dtype)`` entries (the dtype they travel in), units kept
    together and in the order given; every bucket's slots end at or below ``capacity`` unless one
    unit alone is larger."""
    units: dict[str, list[tuple[str, tuple[int, ...], Any]]] = {}
    for entry in entries:
        units.setdefault(weight_unit(entry[0]), []).append(entry)
    buckets: list[list[Slot]] = []
    used = 0
    for members in units.values():
        sizes = [_numel(shape) * dtype.itemsize for _, shape, dtype in members]
        unit_bytes = sum(_aligned(s) for s in sizes)
        if not buckets or (used + unit_bytes > capacity and used > 0):
            buckets.append([])
            used = 0
        for (name, shape, dtype), size in zip(members, sizes):
            buckets[-1].append(Slot(name, str(dtype).removeprefix("torch."), tuple(shape), used, size))
            used += _aligned(size)
    return buckets


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def bucket_bytes(slots: Sequence[Slot]) -> int:
    """Bytes of the bucket that ``slots`` use."""
    return max((s.offset + s.nbytes for s in slots), default=0)


def views(bucket: Any, slots: Sequence[Slot]) -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` views of a uint8 ``bucket`` (no copy)."""
    import torch

    for slot in slots:
        raw = bucket[slot.offset: slot.offset + slot.nbytes]
        yield slot.name, raw.view(getattr(torch, slot.dtype)).view(slot.shape)
