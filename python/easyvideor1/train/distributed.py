"""Process-group set-up and FSDP2 wrapping.

One code path: a single CPU/GPU process when the world size is 1, FSDP2
(``torch.distributed.fsdp.fully_shard``) over every decoder layer and vision block plus the
root when it is larger. Mixed image/video/text micro-batches would make ranks call the vision
tower a different number of times and hang the all-gathers: :func:`balanced_vision_calls` runs
zero-valued dummy inputs so every rank makes the same calls (their output enters the loss with
weight 0, so no gradient is spurious).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from easyvideor1.config.schema import FSDPConfig


@dataclass(frozen=True)
class World:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def init_world(device: str = "auto") -> World:
    """Join the process group described by torchrun-style env vars (or run alone)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if use_cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", rank=rank, world_size=world_size)
    return World(rank, world_size, local_rank, dev)


def _shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Decoder layers and vision blocks: the classes the model declares as not-to-split."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"{type(model).__name__} declares no _no_split_modules: cannot pick FSDP units")
    return [m for m in model.modules() if type(m).__name__ in names]


def wrap_fsdp(model: torch.nn.Module, cfg: FSDPConfig, world: World) -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    if not dist.is_initialized() and world.world_size == 1:
        # fsdp.enable=on in a single process (e.g. for fsdp.cpu_offload on one GPU): the device
        # mesh needs a process group, and no torchrun env vars are there to rendezvous with. Gloo
        # for CPU tensors too: offloaded gradients are CPU DTensors (the grad-norm reduction).
        dist.init_process_group("cuda:nccl,cpu:gloo" if world.device.type == "cuda" else "gloo",
                                store=dist.HashStore(), rank=0, world_size=1)
    mesh = init_device_mesh(world.device.type, (world.world_size,))
    kwargs: dict[str, Any] = {"mesh": mesh}
    if world.device.type == "cuda" and cfg.mixed_precision == "bf16":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if cfg.cpu_offload:
        # Pinned host memory needs an accelerator (on a CPU device offloading moves nothing).
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=world.device.type == "cuda")
    for unit in _shard_units(model):
        fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)
    return model


def should_shard(cfg: FSDPConfig, world: World) -> bool:
    return cfg.enable == "on" or (cfg.enable == "auto" and world.distributed)


@contextmanager
def balanced_vision_calls(model: torch.nn.Module, has_images: bool, has_videos: bool, *,
                          enabled: bool = True) -> Iterator[list[torch.Tensor]]:
    """Around one forward of ``model``: :func:`vision_call_balance`'s dummy calls at the start of
    it; the list yielded then holds their zero term (add it to the loss).

    They run from a forward pre-hook of the root, after FSDP's own: inside the root's forward its
    own parameters (patch embedding, merger) are gathered, which a call from outside the forward
    would find sharded once a backward has resharded them.
    """
    terms: list[torch.Tensor] = []
    if not enabled or (has_images and has_videos):
        yield terms
        return

    def hook(_module: torch.nn.Module, _args: Any) -> None:
        term = vision_call_balance(model, has_images, has_videos)
        if term is not None:
            terms.append(term)

    handle = model.register_forward_pre_hook(hook)
    try:
        yield terms
    finally:
        handle.remove()


def vision_call_balance(model: torch.nn.Module, has_images: bool, has_videos: bool) -> torch.Tensor | None:
    """Run the vision tower on a zero dummy for each absent modality; returns 0 * their sum.
    Under FSDP call it inside the model's forward (:func:`balanced_vision_calls`).

    transformers' Qwen-VL forward calls the vision tower once for images and once for videos
    when present. With FSDP every rank must make the same sequence of calls, so each micro-batch
    makes exactly two: real ones for the modalities it has, dummies for the rest.
    """
    missing = int(not has_images) + int(not has_videos)
    if missing == 0:
        return None
    visual = vision_tower(model)
    cfg = model.config.vision_config
    merge = int(getattr(cfg, "spatial_merge_size", 2))
    temporal = int(getattr(cfg, "temporal_patch_size", 2))
    patch = int(getattr(cfg, "patch_size", 14))
    channels = int(getattr(cfg, "in_channels", getattr(cfg, "in_chans", 3)))
    grid = torch.tensor([[1, merge, merge]], dtype=torch.long, device=_device_of(visual))
    dtype = next(visual.parameters()).dtype
    pixels = torch.zeros((merge * merge, channels * temporal * patch * patch), dtype=dtype,
                         device=_device_of(visual))
    total = None
    for _ in range(missing):
        out = visual(pixels, grid_thw=grid)
        tensor = out if isinstance(out, torch.Tensor) else _first_tensor(out)
        term = tensor.float().sum() * 0.0
        total = term if total is None else total + term
    return total


def vision_tower(model: torch.nn.Module) -> torch.nn.Module:
    for path in ("model.visual", "visual"):
        node: Any = model
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                break
        if isinstance(node, torch.nn.Module):
            return node
    raise ValueError(f"{type(model).__name__} has no vision tower at model.visual")


def _first_tensor(output: Any) -> torch.Tensor:
    for name in ("pooler_output", "last_hidden_state"):
        value = getattr(output, name, None)
        if isinstance(value, torch.Tensor):
            return value
    if isinstance(output, (tuple, list)):
        for value in output:
            if isinstance(value, torch.Tensor):
                return value
    raise TypeError(f"vision tower returned {type(output).__name__} without a tensor")


def _device_of(module: torch.nn.Module) -> torch.device:
    for param in module.parameters():
        return param.device if param.device.type != "meta" else torch.device("cpu")
    return torch.device("cpu")
