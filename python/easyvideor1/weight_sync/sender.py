"""Trainer side of a bucketed sync: the actor's weights, layer by layer, into a reusable bucket.

:class:`BucketSender` walks the actor's parameters (FSDP2 shards are gathered one tensor at a
time with ``full_tensor``: every rank runs ``send`` in the same order, only the rank holding a
transport sends), casts each into its slot of the bucket (the engine's dtype, on the actor's
device) and hands every full bucket to a :class:`Transport`:

* :class:`IpcTransport`: the bucket on the GPU, opened by the colocated engine through a CUDA
  IPC handle (:mod:`~easyvideor1.weight_sync.ipc`): no host copy, no file;
* :class:`HostTransport`: the bucket in host memory, its bytes through vLLM's RPC (CPU vLLM, an
  engine in another process without a shared GPU);
* :class:`~easyvideor1.weight_sync.broadcast.BroadcastTransport`: one broadcast to every engine of
  a process group (gloo on CPU, nccl on GPUs).

Only what changes travels: frozen parameters (``requires_grad`` False) and tied copies (one
parameter under two names) are never sent, and a parameter whose data has not been written
since it was last sent (its tensor version counter) stays behind, with the rest of its unit
(layer) unless another of the unit's tensors changed. ``everything=True`` sends every
parameter, frozen ones too (an engine that dropped its weights: sleep level 2).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from easyvideor1.weight_sync.buckets import Slot, bucket_bytes, plan_buckets
from easyvideor1.weight_sync.host import weight_unit

DEFAULT_BUCKET_BYTES = 1 << 30
# Wrapper modules' names inside parameter names (activation checkpointing, torch.compile).
_WRAPPERS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def clean_name(name: str) -> str:
    for wrapper in _WRAPPERS:
        name = name.replace(wrapper, "")
    return name


def _local(param: Any) -> Any:
    """The rank-local tensor of a DTensor (its version counter moves when the shard is written)."""
    return getattr(param, "_local_tensor", param)


@dataclass
class SendStats:
    tensors: int = 0
    nbytes: int = 0
    buckets: int = 0
    frozen: int = 0  # parameters never sent (requires_grad False)
    unchanged: int = 0  # trainable parameters not written since the last send
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


class Transport(ABC):
    """Where the bucket lives and how a full one reaches the receiver(s)."""

    def __init__(self, device: Any):
        self.device = device
        self._bucket: Any = None

    def bucket(self, nbytes: int) -> Any:
        """The reusable uint8 bucket, grown to at least ``nbytes``."""
        import torch

        if self._bucket is None or self._bucket.numel() < nbytes:
            self._bucket = None  # free the old one first
            self._bucket = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            self.resized()
        return self._bucket

    def resized(self) -> None:
        """A new bucket was allocated (a transport that shares it by handle makes a new one)."""
        return None

    def begin(self, plan: list[list[Slot]]) -> None:
        """A sync with these buckets starts (an empty plan: nothing changed)."""
        return None

    @abstractmethod
    def send(self, slots: list[Slot], last: bool) -> dict[str, Any]:
        """Deliver the filled bucket's ``slots``; the receiver has loaded them when this returns."""

    def close(self) -> None:
        self._bucket = None


Rpc = Callable[[str, tuple[Any, ...]], list[Any]]


class HostTransport(Transport):
    """The bucket in host memory; its used bytes through ``rpc`` (``collective_rpc``)."""

    def __init__(self, rpc: Rpc):
        super().__init__("cpu")
        self.rpc = rpc

    def send(self, slots: list[Slot], last: bool) -> dict[str, Any]:
        data = self._bucket[: bucket_bytes(slots)].numpy().tobytes()
        return self.rpc("evr1_load_bucket", ("bytes", data, [s.to_wire() for s in slots], last))[0]


class IpcTransport(Transport):
    """The bucket on the GPU, opened by the colocated engine's worker through a CUDA IPC handle."""

    def __init__(self, rpc: Rpc, device: Any):
        super().__init__(device)
        self.rpc = rpc
        self._handle: bytes | None = None

    def resized(self) -> None:
        from easyvideor1.weight_sync.ipc import share

        self._handle = share(self._bucket)

    def send(self, slots: list[Slot], last: bool) -> dict[str, Any]:
        import torch

        torch.cuda.synchronize(self.device)  # the casts into the bucket are done before the engine reads
        return self.rpc("evr1_load_bucket", ("ipc", self._handle, [s.to_wire() for s in slots], last))[0]

    def close(self) -> None:
        self._handle = None
        super().close()


class BucketSender:
    """``send(model)``: the model's changed trainable weights through ``transport`` in buckets of
    ``bucket_bytes``, cast to ``dtype`` (None: as trained). ``transport`` None: this rank only
    takes part in the gathers (FSDP2 ranks other than the sending one)."""

    def __init__(self, transport: Transport | None, *, dtype: Any = None, bucket_bytes: int = DEFAULT_BUCKET_BYTES):
        if bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes!r}")
        self.transport, self.dtype, self.bucket_bytes = transport, dtype, int(bucket_bytes)
        self._sent: dict[str, int] = {}  # name -> version counter of its data when last sent

    def forget(self) -> None:
        """The receiver lost what it had (a new or reset engine): the next send is complete."""
        self._sent.clear()

    def _params(self, model: Any, everything: bool) -> tuple[list[tuple[str, Any]], int]:
        # named_parameters lists a tied parameter once (under its first name: the embedding).
        params, frozen = [], 0
        for name, param in model.named_parameters():
            if param.requires_grad or everything:
                params.append((clean_name(name), param))
            else:
                frozen += 1
        return params, frozen

    def _changed(self, params: Sequence[tuple[str, Any]], everything: bool) -> list[bool]:
        import torch

        changed = [everything or self._sent.get(n) != _local(p)._version for n, p in params]
        sharded = [p for _, p in params if hasattr(p, "device_mesh")]
        if sharded:  # every rank must gather the same tensors: agree on what changed
            import torch.distributed as dist

            mask = torch.tensor(changed, dtype=torch.int32, device=_local(sharded[0]).device)
            dist.all_reduce(mask, op=dist.ReduceOp.MAX, group=sharded[0].device_mesh.get_group())
            changed = [bool(v) for v in mask.tolist()]
        units = {weight_unit(n) for (n, _), c in zip(params, changed) if c}
        return [weight_unit(n) in units for n, _ in params]

    def send(self, model: Any, *, everything: bool = False) -> SendStats:
        import torch

        started = time.perf_counter()
        params, frozen = self._params(model, everything)
        changed = self._changed(params, everything)
        todo = [(n, p) for (n, p), c in zip(params, changed) if c]
        stats = SendStats(frozen=frozen, unchanged=len(params) - len(todo))
        wire = {n: (self.dtype if self.dtype is not None and p.is_floating_point() else p.dtype) for n, p in todo}
        plan = plan_buckets([(n, tuple(p.shape), wire[n]) for n, p in todo], self.bucket_bytes)
        by_name = dict(todo)
        if self.transport is not None:
            self.transport.begin(plan)
        with torch.no_grad():
            for index, slots in enumerate(plan):
                bucket = None if self.transport is None else self.transport.bucket(
                    max(self.bucket_bytes, bucket_bytes(slots)))
                for slot in slots:
                    param = by_name[slot.name]
                    full = param.full_tensor() if hasattr(param, "full_tensor") else param.detach()
                    if bucket is not None:
                        target = bucket[slot.offset: slot.offset + slot.nbytes]
                        target.view(wire[slot.name]).view(slot.shape).copy_(full)
                    del full
                if self.transport is not None:
                    self.transport.send(slots, index == len(plan) - 1)
                stats.buckets += 1
                stats.tensors += len(slots)
                stats.nbytes += sum(s.nbytes for s in slots)
        for name, param in todo:
            self._sent[name] = _local(param)._version
        stats.seconds = time.perf_counter() - started
        return stats

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
