"""Selective activation checkpointing: recompute only part of the layers.

Full checkpointing recomputes every layer's forward in backward (about a third more work).
When the accelerator has memory to spare, keeping the activations of some layers removes
their recompute. ``gradient_checkpointing_enable`` must have been called first.

Two ways to choose how many layers keep theirs:

* fixed fractions (:func:`keep_activations`), the same for every micro-batch;
* per micro-batch (:class:`AdaptiveKeep`): what a micro-batch's activations take grows with its
  tokens and vision patches, so a share that fits a 64-frame video runs out of memory at 256
  frames (measured on an H200: fixed 0.5/0.25 OOMed at 256 frames where full checkpointing fit
  1024). The policy predicts the bytes of a micro-batch from per-token / per-patch costs
  (:class:`ActivationCosts`: an estimate from the model's config, scaled by what the device
  then reports) and keeps as many layers as the budget allows — decoder layers first: they
  save more recompute per byte kept than vision blocks (3B shape: ~1.1k vs ~0.7k FLOP per
  byte before attention, whose cost grows with the sequence in the decoder).

The earliest layers are the ones kept (their activations are held longest, so which ones
matters little). Toggling a layer's ``gradient_checkpointing`` flag is outside any compiled
graph (transformers' ``GradientCheckpointingLayer.__call__``), so it costs no recompilation.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

GIB = 1 << 30


def _checkpoint_layers(model: torch.nn.Module) -> tuple[list[torch.nn.Module], list[torch.nn.Module]]:
    """``(decoder layers, vision blocks)`` that checkpointing was enabled on, recorded on first use
    (later calls find the same lists whichever flags are set by then)."""
    cached = getattr(model, "_evr1_checkpoint_layers", None)
    if cached is not None:
        return cached
    from transformers.modeling_layers import GradientCheckpointingLayer

    def enabled(module: torch.nn.Module) -> list[torch.nn.Module]:
        return [m for m in module.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]

    visual = getattr(getattr(model, "model", model), "visual", None)
    vision = enabled(visual) if visual is not None else []
    vision_ids = {id(m) for m in vision}
    layers = ([m for m in enabled(model) if id(m) not in vision_ids], vision)
    model.__dict__["_evr1_checkpoint_layers"] = layers  # not a submodule: plain attribute
    return layers


def checkpoint_layer_counts(model: torch.nn.Module) -> tuple[int, int]:
    lm, vision = _checkpoint_layers(model)
    return len(lm), len(vision)


def set_kept_layers(model: torch.nn.Module, *, lm: int, vision: int) -> dict[str, int]:
    """The first ``lm`` decoder layers and ``vision`` vision blocks keep their activations, every
    other checkpointed layer recomputes."""
    lm_layers, vision_layers = _checkpoint_layers(model)
    lm, vision = max(0, min(lm, len(lm_layers))), max(0, min(vision, len(vision_layers)))
    for layers, kept in ((lm_layers, lm), (vision_layers, vision)):
        for index, layer in enumerate(layers):
            layer.gradient_checkpointing = index >= kept
    return {"lm": lm, "vision": vision}


def keep_activations(model: torch.nn.Module, *, lm_fraction: float, vision_fraction: float) -> dict[str, int]:
    """Stop recomputing ``lm_fraction`` of the decoder layers and ``vision_fraction`` of the
    vision blocks; returns how many layers of each now keep their activations."""
    if not (0.0 <= lm_fraction <= 1.0 and 0.0 <= vision_fraction <= 1.0):
        raise ValueError(f"fractions must be in [0, 1], got {lm_fraction}, {vision_fraction}")
    n_lm, n_vision = checkpoint_layer_counts(model)
    return set_kept_layers(model, lm=int(n_lm * lm_fraction), vision=int(n_vision * vision_fraction))


@dataclass(frozen=True)
class MicroBatchSize:
    tokens: int  # language-model positions (padding included: it is computed)
    patches: int  # vision-tower input patches
    response_tokens: int  # positions whose vocabulary-wide logits are computed


def micro_batch_size(batch: Any) -> MicroBatchSize:
    """What drives a forward batch's activation memory (ForwardBatch or PackedBatch)."""
    ids = batch.input_ids
    patches = sum(int(v.shape[0]) for k, v in batch.visual.items() if k.startswith("pixel_values"))
    lengths = getattr(batch, "response_lengths", None)
    responses = sum(lengths) if lengths is not None else int(ids.shape[0]) * (int(batch.response_length) + 1)
    return MicroBatchSize(int(ids.numel()), patches, int(responses))


@dataclass(frozen=True)
class ActivationCosts:
    """Bytes of a micro-batch's activations: per token and per patch, with every layer
    recomputed (the ``base_*`` terms: checkpoint inputs plus the one layer being recomputed),
    and extra per kept decoder layer / vision block."""

    lm_layer_per_token: float
    vision_block_per_patch: float
    base_per_token: float
    base_per_patch: float
    per_response_token: float
    fixed: float = 0.0  # per micro-batch whatever its size (bf16 copies of the weights under autocast)

    @classmethod
    def estimate(cls, config: Any, *, lm_layers: int, vision_layers: int, fixed: float = 0.0) -> ActivationCosts:
        """From the model config, for bf16 compute with an fp32 residual stream (autocast or FSDP
        mixed precision): a layer keeps its norm inputs and residual (fp32), its projections'
        inputs and outputs and the MLP's four intermediate-width tensors (bf16)."""
        text = getattr(config, "text_config", config)
        vision = getattr(config, "vision_config", None)
        h = int(text.hidden_size)
        inter = int(getattr(text, "intermediate_size", 4 * h))
        heads = int(getattr(text, "num_attention_heads", 1))
        head_dim = int(getattr(text, "head_dim", None) or h // max(heads, 1))
        kv = int(getattr(text, "num_key_value_heads", heads)) * head_dim
        lm = 24 * h + 8 * kv + 8 * inter
        if vision is not None:
            hv = int(getattr(vision, "hidden_size", None) or getattr(vision, "embed_dim", 0))
            iv = int(getattr(vision, "intermediate_size", None) or hv * float(getattr(vision, "mlp_ratio", 4)))
            patch_values = 3 * int(getattr(vision, "temporal_patch_size", 2)) * int(vision.patch_size) ** 2
        else:
            hv, iv, patch_values = 0, 0, 0
        vis = 30 * hv + 8 * iv
        vocab = int(getattr(text, "vocab_size", 0) or getattr(config, "vocab_size", 0))
        return cls(lm_layer_per_token=lm, vision_block_per_patch=vis,
                   base_per_token=lm_layers * 4 * h + lm + 16 * h,
                   base_per_patch=vision_layers * 4 * hv + vis + 8 * patch_values,
                   per_response_token=18 * vocab, fixed=fixed)

    def full_checkpointing(self, size: MicroBatchSize) -> float:
        return (self.fixed + self.base_per_token * size.tokens + self.base_per_patch * size.patches
                + self.per_response_token * size.response_tokens)

    def predict(self, size: MicroBatchSize, *, lm: int, vision: int) -> float:
        return (self.full_checkpointing(size) + lm * self.lm_layer_per_token * size.tokens
                + vision * self.vision_block_per_patch * size.patches)


def choose_kept(budget_bytes: float, size: MicroBatchSize, costs: ActivationCosts, *, lm_layers: int,
                vision_layers: int, scale: float = 1.0, base_scale: float | None = None) -> tuple[int, int]:
    """The most layers that keep their activations with the predicted bytes (kept layers x
    ``scale``, the full-checkpointing base x ``base_scale``, default ``scale``) within
    ``budget_bytes``: decoder layers first, then vision blocks. ``(0, 0)`` when even full
    checkpointing is predicted not to fit (recomputing everything is then the best chance)."""
    base_scale = scale if base_scale is None else base_scale
    free = budget_bytes - base_scale * costs.full_checkpointing(size)
    if free <= 0:
        return 0, 0
    kept = []
    for layers, per_layer in ((lm_layers, costs.lm_layer_per_token * size.tokens),
                              (vision_layers, costs.vision_block_per_patch * size.patches)):
        per_layer *= scale
        count = layers if per_layer <= 0 else min(layers, math.floor(free / per_layer))
        free -= count * per_layer
        kept.append(count)
    return kept[0], kept[1]


def pending_grad_bytes(model: torch.nn.Module) -> int:
    """Gradient bytes the next backward will allocate (parameters without a gradient yet: the
    first micro-batch of an optimizer step); a sharded parameter counts its local shard."""
    total = 0
    for param in model.parameters():
        if param.requires_grad and param.grad is None:
            local = param.to_local() if hasattr(param, "to_local") else param
            total += local.numel() * local.element_size()
    return total


def autocast_weight_bytes(model: torch.nn.Module) -> int:
    """bf16 copies of an unsharded fp32 model's weights that autocast keeps during a forward."""
    return sum(p.numel() * 2 for p in model.parameters() if p.dtype == torch.float32 and not hasattr(p, "to_local"))


def available_device_bytes(device: torch.device) -> int:
    """Bytes this process can still allocate on ``device``: free on the device plus what its
    allocator holds cached (another process — a vLLM engine — owns the rest)."""
    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


class AdaptiveKeep:
    """Per micro-batch: :meth:`before` chooses and applies the kept layers for a batch about to
    run forward + backward; :meth:`after` (once its backward is done) compares the peak the
    device saw with the prediction and rescales the costs: the largest ratio of the last
    ``window`` micro-batches (at least ``floor``), so one that took more than predicted makes the
    next ones careful.

    ``budget_bytes``: bytes the activations may take; None: what the device has available at
    the micro-batch's start less ``margin`` of it.

    The full-checkpointing base has its own measured ratio (``base_scale``: the measured peak
    less the kept layers' estimate, over the base's estimate), used down to ``base_floor``. On
    the H200 the kept-layer estimate matched the device (126.6 vs 136 KB per token) while the base
    was 2-3x too high (ratio 0.32-0.42 on the 3B shape), yet fitting it (``base_floor=0.25``) ran
    out of memory at 256 frames: the prediction (69 GiB) was right and within the budget, but at
    a 127.7 GiB peak of 139.8 the allocator's fragmentation took more than the 10% margin, for a
    gain of 2.7% at 128 frames (docs/performance.md). Hence ``base_floor=1.0`` by default."""

    def __init__(self, model: torch.nn.Module, device: torch.device, *, budget_bytes: float | None = None,
                 margin: float = 0.1, costs: ActivationCosts | None = None, initial_scale: float = 1.25,
                 window: int = 8, floor: float = 1.0, base_floor: float = 1.0):
        self.model, self.device = model, device
        self.budget_bytes, self.margin, self.floor, self.base_floor = budget_bytes, margin, floor, base_floor
        self.initial_scale = initial_scale
        self.base_ratios: deque[float] = deque(maxlen=window)
        self.lm_layers, self.vision_layers = checkpoint_layer_counts(model)
        fixed = autocast_weight_bytes(model) if device.type == "cuda" else 0
        self.costs = costs or ActivationCosts.estimate(model.config, lm_layers=self.lm_layers,
                                                       vision_layers=self.vision_layers, fixed=fixed)
        self.ratios: deque[float] = deque(maxlen=window)
        self.last: dict[str, Any] = {}
        self._start = self._grads = 0
        self.peak_bytes = 0  # the largest allocation peak seen (absolute), across micro-batch resets

    @property
    def scale(self) -> float:
        # Measurements only make the policy more careful: a ratio below 1 may come from an
        # overestimated term (the vision tower, the logits) while a kept decoder layer costs
        # what was estimated, and keeping more layers on that ground could run out of memory.
        if not self.ratios:
            return max(self.floor, self.initial_scale)  # the guess, until a micro-batch is measured
        return max(self.floor, *self.ratios)

    @property
    def base_scale(self) -> float:
        # The largest recent measurement (a micro-batch that needed more makes the next careful);
        # the initial guess only until the first one.
        if not self.base_ratios:
            return max(self.floor, self.initial_scale)
        return max(self.base_floor, *self.base_ratios)

    def budget(self) -> float:
        if self.budget_bytes is not None:
            return float(self.budget_bytes)
        if self.device.type != "cuda":
            return 0.0  # nothing measurable: recompute everything
        return available_device_bytes(self.device) * (1.0 - self.margin)

    def before(self, batch: Any) -> dict[str, int]:
        size = micro_batch_size(batch)
        self._grads = pending_grad_bytes(self.model) if self.device.type == "cuda" else 0
        budget = self.budget() - self._grads
        lm, vision = choose_kept(budget, size, self.costs, lm_layers=self.lm_layers,
                                 vision_layers=self.vision_layers, scale=self.scale, base_scale=self.base_scale)
        kept = set_kept_layers(self.model, lm=lm, vision=vision)
        if self.device.type == "cuda":
            # The device's peak is reset per micro-batch; what it was so far is kept here.
            self.peak_bytes = max(self.peak_bytes, torch.cuda.max_memory_allocated(self.device))
            self._start = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        base = self.costs.full_checkpointing(size)
        self.last = {**kept, "tokens": size.tokens, "patches": size.patches, "budget_gib": budget / GIB,
                     "predicted_gib": self.costs.predict(size, lm=lm, vision=vision) / GIB, "size": size,
                     "base_gib": base / GIB, "kept_gib": (self.costs.predict(size, lm=lm, vision=vision) - base) / GIB}
        return kept

    def after(self) -> None:
        if self.device.type == "cuda" and self.last:
            self.observe(torch.cuda.max_memory_allocated(self.device) - self._start - self._grads)

    def observe(self, used_bytes: float) -> None:
        """The bytes the last micro-batch's activations really took (its peak over its start)."""
        predicted = self.last["predicted_gib"] * GIB
        self.last["peak_gib"] = used_bytes / GIB
        if predicted > 0 and used_bytes > 0:
            self.ratios.append(used_bytes / predicted)
            base = self.last["base_gib"] * GIB
            if base > 0:
                self.base_ratios.append(max(used_bytes - self.last["kept_gib"] * GIB, 0.0) / base)


def make_keep_policy(model: torch.nn.Module, cfg: Any, device: torch.device) -> AdaptiveKeep | None:
    """The actor's per-micro-batch policy per ``worker.actor.keep_policy`` (None: fixed fractions).
    auto: adaptive on CUDA with checkpointing on."""
    policy = getattr(cfg, "keep_policy", "fixed")
    if not cfg.gradient_checkpointing or policy == "fixed" or (policy == "auto" and device.type != "cuda"):
        return None
    if checkpoint_layer_counts(model) == (0, 0):
        return None
    budget = cfg.activation_budget_gib * GIB if cfg.activation_budget_gib else None
    return AdaptiveKeep(model, device, budget_bytes=budget)
