"""Loading the policy/reference VLM and configuring it per the actor config: the attention
implementation (packed where the config, the device or the shared-prefix layout asks for it),
(selective) activation checkpointing, compilation, frozen vision tower."""

from __future__ import annotations

from typing import Any

import torch

from easyvideor1.config.schema import ActorConfig
from easyvideor1.errors import ConfigError
from easyvideor1.models.checkpointing import keep_activations
from easyvideor1.models.packing import shared_prefix_unsupported
from easyvideor1.train.distributed import vision_tower


def load_vlm(model_path: str, device: torch.device, *, trainable: bool, gradient_checkpointing: bool,
             cfg: ActorConfig | None = None) -> Any:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32)
    return configure_vlm(model, cfg or ActorConfig(), device, trainable=trainable,
                         gradient_checkpointing=gradient_checkpointing)


def configure_vlm(model: Any, cfg: ActorConfig, device: torch.device, *, trainable: bool,
                  gradient_checkpointing: bool) -> Any:
    """Attention implementation, (selective) checkpointing and compilation per the actor config."""
    from easyvideor1.models import attention

    if cfg.padding_free and cfg.attention == "sdpa":
        raise ConfigError("worker.actor.padding_free needs the packed attention (attention: auto or packed)")
    if (cfg.attention == "packed" or cfg.padding_free or (cfg.attention == "auto" and device.type == "cuda")
            or uses_shared_prefix(cfg, model.config)):
        model.config._attn_implementation = attention.register()
        attention.use_packed_attention(model)
    model.config.use_cache = False
    if trainable and gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        keep_activations(model, lm_fraction=cfg.keep_activations_lm, vision_fraction=cfg.keep_activations_vision)
    if cfg.compile:
        from transformers.modeling_layers import GradientCheckpointingLayer

        for layer in model.modules():
            if isinstance(layer, GradientCheckpointingLayer):
                layer.compile()  # layers of one kind share their compiled graph
    if not trainable:
        model.requires_grad_(False)
        model.eval()
    else:
        if cfg.freeze_vision_tower:
            vision_tower(model).requires_grad_(False)
        model.train()
    return model.to(device)


def uses_shared_prefix(cfg: ActorConfig, model_config: Any) -> bool:
    """The shared-prefix layout is on, and exact for this model: it needs the packed attention
    (not ``attention: sdpa``) and attention in every sequence-mixing layer (not Qwen3.5's)."""
    return cfg.shared_prefix and cfg.attention != "sdpa" and shared_prefix_unsupported(model_config) is None
