"""How a new policy reaches the engines that roll out with it.

:class:`PolicySync` is the interface the trainer pushes each version through:
:class:`EnginePolicySync` updates the in-process engine in place; the distributed mode's
:class:`~easyvideor1.weight_sync.remote.RemotePolicySync` publishes the version to the weights
store and the version board that the rollout pool follows.

The trainer calls :meth:`PolicySync.before_update` once a step's rollouts are done (before the
old log-probs and the update) and :meth:`PolicySync.sync` with the actor after the update:
:class:`EnginePolicySync` reads the actor's parameters and sends the changed trainable ones in
buckets (weight_sync/sender.py: by CUDA IPC when actor and engine share the GPU, as host bytes
otherwise); :meth:`PolicySync.push` takes a whole state dict (a checkpoint, a path). A colocated engine
(``worker.rollout.colocate``: engine and actor on one GPU) sleeps in between, so the actor has
the GPU to itself; ``push`` frees what the actor left cached, wakes the engine and loads the
weights in place.
"""

from __future__ import annotations

import gc
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from easyvideor1.logging import event, get_logger
from easyvideor1.weight_sync.sender import (
    DEFAULT_BUCKET_BYTES,
    BucketSender,
    HostTransport,
    IpcTransport,
    Transport,
)

if TYPE_CHECKING:  # rollout/ imports weight_sync at run time, never the reverse
    from easyvideor1.rollout.base import RolloutEngine

log = get_logger(__name__)


class PolicySync(ABC):
    @property
    def weight_dtype(self) -> Any:
        """The torch dtype the receiver keeps the weights in, or None (as the actor has them):
        the trainer casts on its device before the host copy."""
        return None

    def before_update(self) -> None:
        """The step's rollouts are done; the actor computes next (no-op unless colocated)."""
        return None

    @abstractmethod
    def push(self, state_dict: dict[str, Any], version: int) -> None:
        """Make ``version`` (full, unsharded state dict) the policy of the next rollouts."""

    def sync(self, actor: Any, version: int) -> None:
        """Make the ``actor``'s current weights ``version`` (the trainer's call after an update).
        By default through its full state dict; a sync that can read the actor's parameters
        sends them in buckets instead (:class:`EnginePolicySync`)."""
        self.push(actor.full_state_dict(self.weight_dtype), version)

    def close(self) -> None:
        """Release what the sync holds."""
        return None


def device_memory() -> dict[str, float]:
    """GiB in use on the current CUDA device (all processes) and held by this process's allocator."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return {}
    if not torch.cuda.is_available():
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"gpu_used_gib": round((total - free) / 2**30, 2),
            "gpu_reserved_here_gib": round(torch.cuda.memory_reserved() / 2**30, 2)}


_long_lived_frozen = False


def release_cached_memory() -> dict[str, float]:
    """Give the memory this process's allocator keeps cached (the actor's activations, freed
    tensors) back to the device, so that a waking engine in another process can take it.
    Returns the seconds of its two parts (``gc_s``, ``empty_cache_s``).

    A full garbage collection walks every Python object (half a million after importing torch,
    transformers and vLLM: 0.1-0.3 s). On a GPU, what survives the first one (model, engine,
    data: the process's long-lived state) is frozen out of later collections, which then walk
    only what each step made; a cycle among the frozen objects is never collected."""
    global _long_lived_frozen
    started = time.perf_counter()
    gc.collect()
    collected = time.perf_counter()
    try:
        import torch
    except ImportError:  # pragma: no cover
        return {"gc_s": round(collected - started, 3)}
    if torch.cuda.is_available():
        if not _long_lived_frozen:
            gc.freeze()
            _long_lived_frozen = True
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return {"gc_s": round(collected - started, 3), "empty_cache_s": round(time.perf_counter() - collected, 3)}


class EnginePolicySync(PolicySync):
    """Embedded mode: push each new policy straight into the in-process rollout engine.

    ``owns_engine``: close the engine with the sync (an engine handed in by a caller stays theirs).
    ``colocate``: the engine sleeps at ``sleep_level`` between :meth:`before_update` and
    :meth:`push` (level 2: its weights are woken first, loaded, then its KV cache).
    ``last_sync`` holds the timings and memory of the latest push (for benchmarks and logs)."""

    def __init__(self, engine: RolloutEngine, *, owns_engine: bool = True, colocate: bool = False,
                 sleep_level: int = 1, bucket_bytes: int = DEFAULT_BUCKET_BYTES):
        if sleep_level not in (1, 2):
            raise ValueError(f"sleep_level must be 1 or 2, got {sleep_level!r}")
        self.engine, self.owns_engine = engine, owns_engine
        self.colocate, self.sleep_level = colocate, sleep_level
        self.bucket_bytes = int(bucket_bytes)
        self.asleep = False
        self.last_sync: dict[str, Any] = {}
        self._sleep_info: dict[str, Any] = {}
        self._sender: BucketSender | None = None

    @property
    def weight_dtype(self) -> Any:
        return self.engine.weight_dtype

    def before_update(self) -> None:
        if not self.colocate or self.asleep:
            return
        before = device_memory()
        started = time.perf_counter()
        released = self.engine.sleep(level=self.sleep_level)
        self.asleep = True
        self._sleep_info = {"sleep_s": round(time.perf_counter() - started, 3), "released": bool(released),
                            **{f"{k}_awake": v for k, v in before.items()},
                            **{f"{k}_asleep": v for k, v in device_memory().items()}}

    def push(self, state_dict: dict[str, Any], version: int) -> None:
        if self._sender is not None:
            self._sender.forget()  # the engine now holds these weights, whatever the sender sent before
        self._in_place(lambda: self.engine.update_weights(state_dict, version=version), version)

    def sync(self, actor: Any, version: int) -> None:
        model = getattr(actor, "model", None)
        if model is None or not hasattr(self.engine, "collective_rpc"):
            super().sync(actor, version)  # an actor group elsewhere, or an engine without buckets
            return
        self._in_place(lambda: self._send_buckets(model, version), version)

    def _transport(self, model: Any) -> Transport:
        device = next(model.parameters()).device
        if device.type == "cuda" and self.engine.device_type == "cuda":
            return IpcTransport(self.engine.collective_rpc, device)  # colocated: one GPU
        return HostTransport(self.engine.collective_rpc)

    def _send_buckets(self, model: Any, version: int) -> None:
        if self._sender is None:
            self._sender = BucketSender(self._transport(model), dtype=self.engine.weight_dtype,
                                        bucket_bytes=self.bucket_bytes)
        # Sleep level 2 dropped the engine's weights: all of them go, frozen ones too.
        stats = self._sender.send(model, everything=self.asleep and self.sleep_level == 2)
        summary = {"transport": type(self._sender.transport).__name__, **stats.summary()}
        self.engine.finish_weights(version, summary, changed=stats.tensors > 0)

    def _in_place(self, load: Any, version: int) -> None:
        if not self.asleep:
            started = time.perf_counter()
            load()
            self.last_sync = {"version": version, "update_s": round(time.perf_counter() - started, 3),
                              **self._sent()}
            return
        info = dict(self._sleep_info)
        started = time.perf_counter()
        released = release_cached_memory()  # before the engine takes its memory back
        info.update({f"release_{k}": v for k, v in released.items()})
        info["release_s"] = round(time.perf_counter() - started, 3)
        info.update({f"{k}_actor_released": v for k, v in device_memory().items()})
        tagged = self.sleep_level == 2
        woke = time.perf_counter()
        # Level 2 dropped the weights: wake them alone, fill them, then the KV cache; the KV
        # cache is allocated only once the new weights are in.
        self.engine.wake_up(tags=["weights"] if tagged else None)
        wake_s = time.perf_counter() - woke
        loaded = time.perf_counter()
        load()
        update_s = time.perf_counter() - loaded
        if tagged:
            woke = time.perf_counter()
            self.engine.wake_up(tags=["kv_cache"])
            wake_s += time.perf_counter() - woke
        self.asleep = False
        info.update({"version": version, "wake_s": round(wake_s, 3), "update_s": round(update_s, 3),
                     "sync_s": round(time.perf_counter() - started, 3), "sleep_level": self.sleep_level,
                     **{f"{k}_awake_again": v for k, v in device_memory().items()}, **self._sent()})
        self.last_sync = info
        event(log, "colocated_policy_sync", **info)

    def _sent(self) -> dict[str, Any]:
        update = getattr(self.engine, "last_update", None) or {}
        return {k: update[k] for k in ("transport", "tensors", "nbytes", "buckets", "frozen", "unchanged")
                if k in update}

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None
        if self.owns_engine:
            self.engine.close()
