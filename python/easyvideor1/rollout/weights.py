"""Moving policy weights into rollout engines: state dicts, safetensors files and bytes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from easyvideor1.errors import ConfigError


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


def unique_tensors(state_dict: Mapping[str, Any], *, drop_prefixes: tuple[str, ...] = ("lm_head.",)) -> dict[str, Any]:
    """Contiguous tensors with tied duplicates removed (safetensors refuses shared storage).

    A tensor sharing storage with one seen before is dropped when its name starts with one
    of ``drop_prefixes`` (a tied ``lm_head`` is rebuilt from the embedding), else cloned.
    """
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    out: dict[str, Any] = {}
    for name in sorted(state_dict, key=lambda n: (n.startswith(drop_prefixes), n)):
        tensor = state_dict[name].detach()
        identity = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if identity in seen:
            if name.startswith(drop_prefixes):
                continue
            tensor = tensor.clone()
        else:
            seen.add(identity)
        out[name] = tensor.contiguous().cpu()
    return out


def weights_to_bytes(state_dict: Mapping[str, Any]) -> bytes:
    """Safetensors bytes of ``state_dict`` (what ``collective_rpc`` can carry intact)."""
    from safetensors.torch import save

    return save(unique_tensors(state_dict))


def weights_from_payload(payload: bytes | str) -> dict[str, Any]:
    """Inverse of :func:`weights_to_bytes`, or load from a file/directory path."""
    if isinstance(payload, bytes | bytearray | memoryview):
        from safetensors.torch import load

        return load(bytes(payload))
    return load_weights(payload)
