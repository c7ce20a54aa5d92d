"""Weights to a pool of engines on other GPUs/hosts by one broadcast per bucket.

A process group of its own (a ``TCPStore`` and a ``ProcessGroupGloo`` on CPU or
``ProcessGroupNCCL`` on GPUs, built directly: the trainer's default group, its FSDP ranks, and
each vLLM engine's own group are left alone). The trainer's rank 0 serves the store and is rank
0; every engine's worker joins as rank 1..N (one worker per engine).

One sync: the trainer (:class:`BroadcastTransport`, under
:class:`~easyvideor1.weight_sync.sender.BucketSender`) puts the plan (version, and every bucket's
slots: names, dtypes, shapes, offsets) in the store under the sync's sequence number, then
broadcasts each filled bucket. Each engine's worker (the extension's
``evr1_receive_broadcast``, :func:`receive_version`) reads the plan, receives every bucket into
one reusable buffer and loads views of it as a host or IPC bucket is loaded
(``evr1_load_tensors``), then acknowledges in the store; the trainer returns once every engine
has. A sync with nothing changed is a plan with no buckets: the engines bump the version.

The group's size is fixed when it forms, and a broadcast needs every member: an engine that
joins late or recovers loads the newest version from the weights store
(:mod:`~easyvideor1.weight_sync.publish`), which keeps every version either way.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from easyvideor1.weight_sync.buckets import Slot, bucket_bytes, views
from easyvideor1.weight_sync.sender import Transport

BACKENDS = ("gloo", "nccl")
_PLAN = "evr1/plan/{seq}"
_DONE = "evr1/done/{seq}/{rank}"


class BroadcastGroup:
    """One member of the broadcast group. Rank 0 serves the store at ``host:port`` (port 0: a
    free one, then :attr:`port`); :meth:`connect` forms the group, blocking until all
    ``world_size`` members have called it."""

    def __init__(self, host: str, port: int, rank: int, world_size: int, *, backend: str = "gloo",
                 timeout_s: float = 600.0):
        import torch.distributed as dist

        if backend not in BACKENDS:
            raise ValueError(f"broadcast backend must be one of {BACKENDS}, got {backend!r}")
        if not 0 <= rank < world_size or world_size < 2:
            raise ValueError(f"broadcast group: rank {rank} of world size {world_size} (needs 0 <= rank < size, "
                             "size >= 2: the trainer and at least one engine)")
        self.rank, self.world_size, self.backend = int(rank), int(world_size), backend
        self.timeout = timedelta(seconds=timeout_s)
        self.store = dist.TCPStore(host, int(port), self.world_size, is_master=self.rank == 0,
                                   timeout=self.timeout, wait_for_workers=False)
        self.host, self.port = host, int(self.store.port)
        self.pg: Any = None
        self.seq = 0  # syncs seen (the plan's key)

    def connect(self) -> BroadcastGroup:
        import torch.distributed as dist

        prefixed = dist.PrefixStore("evr1/pg", self.store)
        if self.backend == "gloo":
            options = dist.ProcessGroupGloo._Options()
            options._timeout = self.timeout
            # Loopback or the store's host: no guess from the machine's hostname.
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=self.host)]
            self.pg = dist.ProcessGroupGloo(prefixed, self.rank, self.world_size, options)
        else:
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = self.timeout
            self.pg = dist.ProcessGroupNCCL(prefixed, self.rank, self.world_size, options)
        return self

    @property
    def device(self) -> str:
        """Where buckets must lie for this backend."""
        if self.backend == "gloo":
            return "cpu"
        import torch

        return f"cuda:{torch.cuda.current_device()}"

    def broadcast(self, tensor: Any) -> None:
        """``tensor`` from rank 0 into every other member's ``tensor``."""
        self.pg.broadcast(tensor, 0).wait()

    def close(self) -> None:
        if self.pg is not None and hasattr(self.pg, "shutdown"):
            self.pg.shutdown()
        self.pg = None


class BroadcastTransport(Transport):
    """Trainer side (rank 0): each full bucket broadcast to every engine of ``group``. Set
    :attr:`version` before each ``BucketSender.send``: the engines record it."""

    def __init__(self, group: BroadcastGroup):
        if group.rank != 0:
            raise ValueError(f"the trainer sends as rank 0 of the broadcast group, not rank {group.rank}")
        super().__init__(group.device)
        self.group = group
        self.version = 0

    def begin(self, plan: list[list[Slot]]) -> None:
        group = self.group
        group.seq += 1
        group.store.set(_PLAN.format(seq=group.seq), json.dumps(
            {"version": int(self.version), "buckets": [[s.to_wire() for s in slots] for slots in plan]}))
        if not plan:  # nothing changed: the engines bump the version, no bucket follows
            self._wait_loaded()

    def send(self, slots: list[Slot], last: bool) -> dict[str, Any]:
        if self.group.backend == "nccl":
            import torch

            torch.cuda.synchronize(self.device)  # the casts into the bucket are done
        self.group.broadcast(self._bucket[: bucket_bytes(slots)])
        if last:
            self._wait_loaded()
        return {}

    def _wait_loaded(self) -> None:
        """Every engine loaded the sync (a collective with an engine gone fails after the timeout)."""
        group = self.group
        group.store.wait([_DONE.format(seq=group.seq, rank=r) for r in range(1, group.world_size)], group.timeout)
        if group.seq > 1:  # the previous sync's keys: every engine is past them
            group.store.delete_key(_PLAN.format(seq=group.seq - 1))
            for r in range(1, group.world_size):
                group.store.delete_key(_DONE.format(seq=group.seq - 1, rank=r))

    def close(self) -> None:
        super().close()
        self.group.close()


class BroadcastReceiver:
    """Engine side (a worker, rank >= 1): the group and one reusable buffer."""

    def __init__(self, group: BroadcastGroup):
        self.group = group
        self._buffer: Any = None

    def buffer(self, nbytes: int) -> Any:
        import torch

        if self._buffer is None or self._buffer.numel() < nbytes:
            self._buffer = None
            self._buffer = torch.empty(nbytes, dtype=torch.uint8, device=self.group.device)
        return self._buffer

    def receive(self, load: Any) -> dict[str, Any]:
        """The next sync: its plan from the store, its buckets by broadcast, each loaded by
        ``load(tensors, last)``; returns the version and what was loaded."""
        group = self.group
        group.seq += 1
        plan = json.loads(group.store.get(_PLAN.format(seq=group.seq)))
        buckets = [[Slot.from_wire(s) for s in slots] for slots in plan["buckets"]]
        refreshed: list[str] = []
        for index, slots in enumerate(buckets):
            used = bucket_bytes(slots)
            bucket = self.buffer(used)[:used]
            group.broadcast(bucket)
            refreshed = load(list(views(bucket, slots)), index == len(buckets) - 1).get("refreshed", refreshed)
        if group.backend == "nccl":
            import torch

            torch.cuda.synchronize()
        group.store.set(_DONE.format(seq=group.seq, rank=group.rank), "1")
        return {"transport": "BroadcastTransport", "version": int(plan["version"]), "buckets": len(buckets),
                "tensors": sum(len(s) for s in buckets), "nbytes": sum(x.nbytes for s in buckets for x in s),
                "refreshed": refreshed}

    def close(self) -> None:
        self._buffer = None
        self.group.close()


def join_engine(engine: Any, host: str, port: int, rank: int, world_size: int, *, backend: str = "gloo",
                timeout_s: float = 600.0) -> None:
    """The engine's worker joins the trainer's broadcast group as ``rank`` (blocks until it forms)."""
    replies = engine.collective_rpc("evr1_join_broadcast", (host, int(port), int(rank), int(world_size), backend,
                                                            float(timeout_s)))
    if len(replies) != 1:
        raise ValueError(f"a broadcast member is one worker; this engine has {len(replies)} (tensor parallel)")


def receive_version(engine: Any) -> int:
    """The engine takes the trainer's next sync from the group; returns the version it now holds."""
    reply = dict(engine.collective_rpc("evr1_receive_broadcast", ())[0])
    version = int(reply.pop("version"))
    engine.finish_weights(version, reply, changed=reply["tensors"] > 0)
    return version
