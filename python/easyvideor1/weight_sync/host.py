"""Moving policy weights into rollout engines: state dicts, safetensors files and bytes.

A state dict goes to vLLM's workers through its RPC, whose msgpack encoder refuses any object
over ``2**32 - 1`` bytes: a 3B bf16 model is 7.5 GB. :func:`weight_payloads` therefore sends it
in parts of at most :data:`RPC_PART_BYTES` (whole decoder layers / vision blocks together, so
that every fused vLLM layer — qkv, gate_up — gets all its pieces in one reload), or as one
file in ``/dev/shm`` whose path travels instead.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easyvideor1.errors import ConfigError

# vLLM's msgpack RPC limit; a part must stay below it.
RPC_MAX_BYTES = 2**32 - 1
# Bytes of tensor data per part: well below the limit (the safetensors header and msgpack framing
# add a little), and small enough that a part's copies (bytes, decoded tensors) stay modest.
# Tests lower it to force several parts.
RPC_PART_BYTES = 2 * 2**30
# "parts": safetensors bytes through the RPC, part by part; "shm": one file in SHM_DIR, its path
# through the RPC (the engine's workers run on this host); "auto": shm where SHM_DIR has room for
# the weights, else parts. On an H200 a 3B bf16 model took 6.1 s through /dev/shm and 32.8 s in
# parts (msgpack + ZMQ copies), so auto prefers shm (a container's default 64 MB /dev/shm: parts).
WEIGHT_TRANSPORT = "auto"
SHM_DIR = "/dev/shm"

_LAYER = re.compile(r"^(.*?\.(?:layers|blocks)\.\d+)\.")
_DTYPES = {"float32": "float32", "float": "float32", "bfloat16": "bfloat16", "float16": "float16",
           "half": "float16"}


def load_weights(weights: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    """A ``{name: tensor}`` dict from a state dict, a .safetensors file or a model directory."""
    if isinstance(weights, Mapping):
        return dict(weights)
    from safetensors.torch import load_file

    path = Path(weights)
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ConfigError(f"{path}: no .safetensors files to load weights from")
        merged: dict[str, Any] = {}
        for file in files:
            merged.update(load_file(str(file)))
        return merged
    if path.is_file():
        return load_file(str(path))
    raise ConfigError(f"weights {weights!r}: not a state dict, a .safetensors file or a directory")


def _local(tensor: Any) -> Any:
    """The rank-local data of a DTensor (FSDP2 shard), else the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _identity(tensor: Any) -> tuple[int, int, tuple[int, ...]]:
    local = _local(tensor).detach()
    return local.untyped_storage().data_ptr(), local.storage_offset(), tuple(tensor.shape)


def tied_duplicates(state_dict: Mapping[str, Any], *, drop_prefixes: tuple[str, ...] = ("lm_head.",)
                    ) -> tuple[set[str], set[str]]:
    """``(drop, clone)``: names sharing storage with a tensor seen before, to be dropped (a tied
    ``lm_head`` is rebuilt from the embedding) or cloned (safetensors refuses shared storage)."""
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    drop: set[str] = set()
    clone: set[str] = set()
    for name in sorted(state_dict, key=lambda n: (n.startswith(drop_prefixes), n)):
        identity = _identity(state_dict[name])
        if identity in seen:
            (drop if name.startswith(drop_prefixes) else clone).add(name)
        else:
            seen.add(identity)
    return drop, clone


def materialize(tensor: Any, dtype: Any = None) -> Any:
    """A contiguous CPU tensor: a DTensor is gathered (every rank must call this in the same order),
    a floating tensor cast to ``dtype`` on its own device first (a GPU tensor crosses at the
    engine's width, e.g. bf16: half the bytes of fp32)."""
    full = getattr(tensor, "full_tensor", None)
    tensor = (full() if callable(full) else tensor).detach()
    if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
        tensor = tensor.to(dtype)
    return tensor.contiguous().cpu()


def unique_tensors(state_dict: Mapping[str, Any], *, drop_prefixes: tuple[str, ...] = ("lm_head.",),
                   dtype: Any = None) -> dict[str, Any]:
    """Contiguous CPU tensors with tied duplicates removed (see :func:`tied_duplicates`)."""
    drop, clone = tied_duplicates(state_dict, drop_prefixes=drop_prefixes)
    out: dict[str, Any] = {}
    for name in sorted(state_dict, key=lambda n: (n.startswith(drop_prefixes), n)):
        if name in drop:
            continue
        tensor = materialize(state_dict[name], dtype)
        out[name] = tensor.clone() if name in clone else tensor
    return out


def weights_to_bytes(state_dict: Mapping[str, Any], *, dtype: Any = None) -> bytes:
    """Safetensors bytes of ``state_dict`` (what ``collective_rpc`` can carry intact)."""
    from safetensors.torch import save

    return save(unique_tensors(state_dict, dtype=dtype))


def weights_from_payload(payload: bytes | str) -> dict[str, Any]:
    """Inverse of :func:`weights_to_bytes`, or load from a file/directory path."""
    if isinstance(payload, bytes | bytearray | memoryview):
        from safetensors.torch import load

        return load(bytes(payload))
    return load_weights(payload)


def torch_dtype(name: Any) -> Any:
    """``torch.dtype`` of an engine dtype name (``"bfloat16"``...); None for ``"auto"``/None."""
    import torch

    if name is None or isinstance(name, torch.dtype):
        return name
    if str(name) == "auto":
        return None
    if str(name) not in _DTYPES:
        raise ConfigError(f"unknown weight dtype {name!r}; expected one of {sorted(_DTYPES)}")
    return getattr(torch, _DTYPES[str(name)])


def tied_head_names(model_dir: str | Path) -> frozenset[str]:
    """``{"lm_head.weight"}`` when the model ties its head to the embedding: a state dict copied to
    the host tensor by tensor (the trainer's ``full_state_dict``) no longer shares their storage,
    and the head would travel for nothing (0.6 GB for a 3B model; vLLM ignores it)."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return frozenset()
    text = config.get("text_config") or {}
    tied = config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    return frozenset({"lm_head.weight"}) if tied else frozenset()


def weight_unit(name: str) -> str:
    """The part a tensor must travel with: its decoder layer or vision block (``...layers.3``),
    else its own module (embeddings, norms, patch embedding, merger)."""
    match = _LAYER.match(name)
    return match.group(1) if match else name.rsplit(".", 1)[0]


def _nbytes(tensor: Any, dtype: Any) -> int:
    size = dtype.itemsize if dtype is not None and tensor.is_floating_point() else tensor.element_size()
    return int(tensor.numel()) * int(size)


def plan_parts(state_dict: Mapping[str, Any], *, limit: int | None = None, dtype: Any = None,
               skip: set[str] = frozenset()) -> list[list[str]]:
    """Names per part: units (:func:`weight_unit`) in name order, packed greedily up to ``limit``
    bytes (at the width they will travel). A unit larger than the limit goes alone; a single
    tensor over the RPC's own limit cannot travel as bytes at all."""
    limit = RPC_PART_BYTES if limit is None else int(limit)
    units: dict[str, list[str]] = {}
    for name in sorted(n for n in state_dict if n not in skip):
        units.setdefault(weight_unit(name), []).append(name)
    parts: list[list[str]] = []
    size = 0
    for names in units.values():
        unit_bytes = sum(_nbytes(state_dict[n], dtype) for n in names)
        big = [n for n in names if _nbytes(state_dict[n], dtype) >= RPC_MAX_BYTES]
        if big:
            raise ConfigError(f"tensor {big[0]!r} is over vLLM's RPC limit of {RPC_MAX_BYTES} bytes: send the "
                              "weights as a file (transport='shm' or a path)")
        if not parts or (size + unit_bytes > limit and size > 0):
            parts.append([])
            size = 0
        parts[-1].extend(names)
        size += unit_bytes
    return parts


@dataclass
class WeightPayload:
    """One RPC's worth of weights: safetensors bytes or a path, and what it holds."""

    payload: bytes | str
    index: int
    count: int
    tensors: int
    nbytes: int
    prepare_s: float  # gathering, casting and serialising this part

    @property
    def last(self) -> bool:
        return self.index == self.count - 1


def weight_payloads(weights: Mapping[str, Any] | str | Path, *, dtype: Any = None, limit: int | None = None,
                    transport: str | None = None, skip: frozenset[str] = frozenset()) -> Iterator[WeightPayload]:
    """The payloads that carry ``weights`` to vLLM's workers, made one at a time (a part's bytes
    exist only while it travels). A path travels as text; a state dict in parts of at most
    ``limit`` bytes (``transport="parts"``), or as one temporary file in :data:`SHM_DIR`
    (``"shm"``, removed when the iteration ends; parts when it has no room); ``"auto"`` (None:
    :data:`WEIGHT_TRANSPORT`) is shm with parts as the fallback. Floating tensors are cast to ``dtype``;
    names in ``skip`` stay behind (see :func:`tied_head_names`)."""
    import time

    if isinstance(weights, str | Path):
        yield WeightPayload(str(weights), 0, 1, 0, 0, 0.0)
        return
    transport = transport or WEIGHT_TRANSPORT
    if transport not in ("auto", "parts", "shm"):
        raise ConfigError(f"weight transport must be 'auto', 'parts' or 'shm', got {transport!r}")
    dtype = torch_dtype(dtype)
    drop, clone = tied_duplicates(weights)
    drop |= {n for n in skip if n in weights}
    if transport in ("auto", "shm"):
        total = sum(_nbytes(weights[n], dtype) for n in weights if n not in drop)
        path = _shm_file(total)
        if path is not None:
            try:
                started = time.perf_counter()
                from safetensors.torch import save_file

                tensors = unique_tensors({k: v for k, v in weights.items() if k not in drop}, dtype=dtype)
                save_file(tensors, path)
                yield WeightPayload(path, 0, 1, len(tensors), total, time.perf_counter() - started)
            finally:
                Path(path).unlink(missing_ok=True)
            return
    from safetensors.torch import save

    parts = plan_parts(weights, limit=limit, dtype=dtype, skip=drop)
    for index, names in enumerate(parts):
        started = time.perf_counter()
        tensors = {}
        for name in names:
            tensor = materialize(weights[name], dtype)
            tensors[name] = tensor.clone() if name in clone else tensor
        data = save(tensors)
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        del tensors
        yield WeightPayload(data, index, len(parts), len(names), nbytes, time.perf_counter() - started)


def _shm_file(nbytes: int) -> str | None:
    """A fresh file name in :data:`SHM_DIR` when it has room for ``nbytes`` (with 10% spare)."""
    try:
        stats = os.statvfs(SHM_DIR)
    except OSError:
        return None
    if stats.f_bavail * stats.f_frsize < nbytes * 1.1 + (64 << 20):
        return None
    fd, path = tempfile.mkstemp(prefix="evr1-weights-", suffix=".safetensors", dir=SHM_DIR)
    os.close(fd)
    return path
