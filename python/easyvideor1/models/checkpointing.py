"""Selective activation checkpointing: recompute only part of the layers.

Full checkpointing recomputes every layer's forward in backward (about a third more work).
When the accelerator has memory to spare, keeping the activations of some layers removes
their recompute. ``gradient_checkpointing_enable`` must have been called first; this turns
it off again for the first ``keep`` fraction of the language-model layers and of the vision
blocks (the earliest layers' activations are held longest, so which ones matters little).
"""

from __future__ import annotations

import torch


def _checkpointed_layers(module: torch.nn.Module) -> list[torch.nn.Module]:
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in module.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]


def keep_activations(model: torch.nn.Module, *, lm_fraction: float, vision_fraction: float) -> dict[str, int]:
    """Stop recomputing ``lm_fraction`` of the decoder layers and ``vision_fraction`` of the
    vision blocks; returns how many layers of each now keep their activations."""
    if not (0.0 <= lm_fraction <= 1.0 and 0.0 <= vision_fraction <= 1.0):
        raise ValueError(f"fractions must be in [0, 1], got {lm_fraction}, {vision_fraction}")
    visual = getattr(getattr(model, "model", model), "visual", None)
    vision_layers = _checkpointed_layers(visual) if visual is not None else []
    vision_ids = {id(m) for m in vision_layers}
    lm_layers = [m for m in _checkpointed_layers(model) if id(m) not in vision_ids]
    kept = {"lm": int(len(lm_layers) * lm_fraction), "vision": int(len(vision_layers) * vision_fraction)}
    for layer in lm_layers[: kept["lm"]] + vision_layers[: kept["vision"]]:
        layer.gradient_checkpointing = False
    return kept
