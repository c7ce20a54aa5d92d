"""GPU memory a run config needs, per GPU, computed from the model's shape and the config.

``evr1 config check RUN.yaml`` prints it; the recipes in examples/configs/ state it. The parts:

* training state, sharded by FSDP over ``distributed.train_ranks`` (fp32 master weights 4 B,
  gradients 4 B, AdamW's two moments 8 B per parameter: 16 B), none of it on the GPU with
  ``fsdp.cpu_offload`` (FSDP only: without sharding the flag does nothing);
* the bf16 weights the forward computes with: autocast's copy of an unsharded model (2 B per
  parameter), or FSDP's all-gathered units (the root plus two layers, current and prefetched);
* the reference model (fp32, sharded like the policy) when ``algorithm.kl.enable``;
* activations of the largest micro-batch (``micro_batch_token_budget`` filled with sequences of
  ``video_max_frames`` frames at ``video_max_pixels``), from :class:`ActivationCosts` (the costs
  the adaptive keep policy starts from): full checkpointing, the fixed kept shares, or nothing
  recomputed; the adaptive policy keeps more only where memory is free, so its need is that of
  full checkpointing. With the shared-prefix layout (``worker.actor.shared_prefix``) the tokens
  are as laid out: a group's prompt once, then its responses (whole groups where they fit the
  budget, else chunks of responses, each laying the prompt out again); the logits are those of
  every response token; and each layer's attention gathers the prompt's keys and values for
  every response (models/attention.py), counted for the layer being recomputed with its
  gradient, and for each layer that keeps its activations;
* vLLM: its ``gpu_memory_utilization`` share of the GPU, which must hold the bf16 weights (per
  tensor-parallel rank) and the KV cache of one group; colocated it sleeps while the actor trains.

The model's shape comes from ``model_path/config.json`` when that exists, else from
:data:`KNOWN_MODELS` (public configs of the Qwen-VL checkpoints, matched by the path's last part).
It is an estimate: allocator fragmentation and kernels' workspaces are one fixed allowance
(:data:`OVERHEAD_GIB` per process).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from easyvideor1.config.schema import RunConfig
from easyvideor1.errors import ConfigError

GIB = 1 << 30
OVERHEAD_GIB = 2.0  # per GPU process: CUDA context, NCCL buffers, allocator slack
VLLM_ASLEEP_GIB = 1.5  # a colocated vLLM engine asleep at level 2 (measured on an H200, docs/performance.md)
PROMPT_TEXT_TOKENS = 128  # question, options and template around the visual tokens
BYTES_PER_PARAM = {"weights": 4, "grads": 4, "adamw": 8}

_Q2_VISION = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "patch_size": 14,
              "spatial_merge_size": 2, "temporal_patch_size": 2}
_Q25_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "patch_size": 14,
               "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
               "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2}


def _q3_vision(depth: int, hidden: int, inter: int, deepstack: list[int]) -> dict[str, Any]:
    return {"depth": depth, "hidden_size": hidden, "intermediate_size": inter, "num_heads": 16, "patch_size": 16,
            "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 2304,
            "deepstack_visual_indexes": deepstack}


def _text(hidden: int, layers: int, inter: int, heads: int, kv: int, vocab: int, tied: bool,
          head_dim: int | None = None) -> dict[str, Any]:
    out = {"hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": inter,
           "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab, "tie_word_embeddings": tied}
    if head_dim:
        out["head_dim"] = head_dim
    return out


# name -> (model_type, text_config, vision_config, parameters, of them in the vision tower).
# The counts are what transformers builds from these configs (tests/config/test_recipes.py).
KNOWN_MODELS: dict[str, tuple[str, dict[str, Any], dict[str, Any], int, int]] = {
    "Qwen2-VL-2B-Instruct": ("qwen2_vl", _text(1536, 28, 8960, 12, 2, 151936, True), _Q2_VISION,
                             2_208_985_600, 665_271_296),
    "Qwen2-VL-7B-Instruct": ("qwen2_vl", _text(3584, 28, 18944, 28, 4, 152064, False), _Q2_VISION,
                             8_291_375_616, 675_759_104),
    "Qwen2.5-VL-3B-Instruct": ("qwen2_5_vl", _text(2048, 36, 11008, 16, 2, 151936, True), _Q25_VISION,
                               3_754_622_976, 668_684_288),
    "Qwen2.5-VL-7B-Instruct": ("qwen2_5_vl", _text(3584, 28, 18944, 28, 4, 152064, False), _Q25_VISION,
                               8_292_166_656, 676_550_144),
    "Qwen2.5-VL-32B-Instruct": ("qwen2_5_vl", _text(5120, 64, 27648, 40, 8, 152064, False), _Q25_VISION,
                                33_448_292_352, 684_416_000),
    "Qwen2.5-VL-72B-Instruct": ("qwen2_5_vl", _text(8192, 80, 29568, 64, 8, 152064, False), _Q25_VISION,
                                73_406_351_360, 700_147_712),
    "Qwen3-VL-2B-Instruct": ("qwen3_vl", _text(2048, 28, 6144, 16, 8, 151936, True, 128),
                             _q3_vision(24, 1024, 4096, [5, 11, 17]), 2_127_532_032, 406_957_056),
    "Qwen3-VL-4B-Instruct": ("qwen3_vl", _text(2560, 36, 9728, 32, 8, 151936, True, 128),
                             _q3_vision(24, 1024, 4096, [5, 11, 17]), 4_437_815_808, 415_347_712),
    "Qwen3-VL-8B-Instruct": ("qwen3_vl", _text(4096, 36, 12288, 32, 8, 151936, False, 128),
                             _q3_vision(27, 1152, 4304, [8, 16, 24]), 8_767_123_696, 576_388_336),
    "Qwen3-VL-32B-Instruct": ("qwen3_vl", _text(5120, 64, 25600, 64, 8, 151936, False, 128),
                              _q3_vision(27, 1152, 4304, [8, 16, 24]), 33_357_390_064, 595_266_800),
}
_HF_CLASSES = {"qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration"),
               "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
               "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration")}


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a model: sizes, and where they were read."""

    name: str
    source: str  # "config.json at PATH" or "known-shape table"
    model_type: str
    params: int
    vision_params: int
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    vision_hidden: int
    vision_layers: int
    vision_intermediate: int
    patch_size: int
    temporal_patch: int
    merge: int

    @property
    def layer_params(self) -> int:
        """One decoder layer (attention + gated MLP), the largest FSDP unit but the root."""
        h, d = self.hidden, self.head_dim
        return h * self.heads * d * 2 + 2 * h * self.kv_heads * d + 3 * h * self.intermediate

    @property
    def vision_block_params(self) -> int:
        """One vision block: attention and MLP (gated in Qwen2.5-VL), biases left out."""
        mlp = 3 if self.model_type == "qwen2_5_vl" else 2
        return 4 * self.vision_hidden**2 + mlp * self.vision_hidden * self.vision_intermediate

    @property
    def root_params(self) -> int:
        """What FSDP's root unit holds once the layers and blocks are their own units: embeddings,
        the untied head, norms, the vision stem and mergers."""
        return max(0, self.params - self.layers * self.layer_params - self.vision_layers * self.vision_block_params)

    def activation_config(self) -> SimpleNamespace:
        """The attributes :meth:`ActivationCosts.estimate` reads from an HF config."""
        text = SimpleNamespace(hidden_size=self.hidden, intermediate_size=self.intermediate,
                               num_attention_heads=self.heads, head_dim=self.head_dim,
                               num_key_value_heads=self.kv_heads, vocab_size=self.vocab)
        vision = SimpleNamespace(hidden_size=self.vision_hidden, intermediate_size=self.vision_intermediate,
                                 temporal_patch_size=self.temporal_patch, patch_size=self.patch_size)
        return SimpleNamespace(text_config=text, vision_config=vision)


def _shape(name: str, source: str, model_type: str, text: dict[str, Any], vision: dict[str, Any], params: int,
           vision_params: int) -> ModelShape:
    try:
        hidden, heads = int(text["hidden_size"]), int(text["num_attention_heads"])
        v_hidden = int(vision.get("hidden_size") if model_type != "qwen2_vl" else vision.get("embed_dim", 0))
        v_inter = vision.get("intermediate_size") or int(v_hidden * float(vision.get("mlp_ratio", 4)))
        return ModelShape(
            name=name, source=source, model_type=model_type, params=params, vision_params=vision_params,
            hidden=hidden, layers=int(text["num_hidden_layers"]), intermediate=int(text["intermediate_size"]),
            heads=heads, kv_heads=int(text.get("num_key_value_heads", heads)),
            head_dim=int(text.get("head_dim") or hidden // heads), vocab=int(text["vocab_size"]),
            tied=bool(text.get("tie_word_embeddings", False)), vision_hidden=v_hidden,
            vision_layers=int(vision["depth"]), vision_intermediate=int(v_inter),
            patch_size=int(vision["patch_size"]), temporal_patch=int(vision.get("temporal_patch_size", 2)),
            merge=int(vision.get("spatial_merge_size", 2)))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: cannot read the model's shape ({type(exc).__name__}: {exc})") from None


def count_parameters(model_type: str, text: dict[str, Any], vision: dict[str, Any],
                     tied: bool | None = None) -> tuple[int, int]:
    """``(all, vision tower)`` parameters of the model transformers builds from these configs, on the
    meta device (no memory, no weights)."""
    import torch
    import transformers

    if model_type not in _HF_CLASSES:
        raise ConfigError(f"no parameter count for model_type {model_type!r} (known: {sorted(_HF_CLASSES)})")
    config_cls, model_cls = (getattr(transformers, n) for n in _HF_CLASSES[model_type])
    vision = dict(vision)
    vision["hidden_size" if model_type == "qwen2_vl" else "out_hidden_size"] = text["hidden_size"]
    tied = text.get("tie_word_embeddings", False) if tied is None else tied
    config = config_cls(text_config=dict(text), vision_config=vision, tie_word_embeddings=tied)
    with torch.device("meta"):
        model = model_cls(config)
    visual = model.model.visual
    return sum(p.numel() for p in model.parameters()), sum(p.numel() for p in visual.parameters())


def known_model(model_path: str) -> str | None:
    """The :data:`KNOWN_MODELS` name for a path or hub id (its last part; -Instruct optional)."""
    tail = Path(model_path.rstrip("/")).name.lower()
    for name in KNOWN_MODELS:
        if tail in (name.lower(), name.lower().removesuffix("-instruct")):
            return name
    return None


def model_shape(model_path: str) -> ModelShape:
    """The shape of ``model_path``: its config.json when that file exists, else the known-shape table."""
    config_file = Path(model_path) / "config.json"
    if config_file.is_file():
        source = f"config.json at {config_file}"
        try:
            config = json.loads(config_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{config_file}: {exc}") from None
        model_type = str(config.get("model_type", ""))
        text, vision = config.get("text_config") or config, config.get("vision_config") or {}
        text = {**text, "tie_word_embeddings": config.get("tie_word_embeddings", text.get("tie_word_embeddings"))}
        vision = {k: v for k, v in vision.items() if k not in ("out_hidden_size", "model_type")}
        if model_type == "qwen2_vl":
            vision.pop("hidden_size", None)  # Qwen2-VL's vision hidden_size is the LM's width
        params, vision_params = count_parameters(model_type, text, vision)
        return _shape(Path(model_path).name, source, model_type, text, vision, params, vision_params)
    name = known_model(model_path)
    if name is None:
        raise ConfigError(f"worker.actor.model_path {model_path!r}: no config.json there and not a known model "
                          f"(known: {', '.join(KNOWN_MODELS)})")
    model_type, text, vision, params, vision_params = KNOWN_MODELS[name]
    return _shape(name, "known-shape table", model_type, text, vision, params, vision_params)


@dataclass(frozen=True)
class SequenceSize:
    frames: int
    visual_tokens: int
    patches: int
    prompt_tokens: int
    response_tokens: int
    filtered: bool  # the prompt is longer than data.max_prompt_length: such samples are filtered

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.response_tokens


def sequence_size(cfg: RunConfig, shape: ModelShape, frames: int | None = None) -> SequenceSize:
    """The longest training sequence: one video of ``frames`` (default ``video_max_frames``) frames at
    ``video_max_pixels`` each, the question's text and a full-length response. With ``frames`` given
    (what the config would need at another frame count) the prompt is not cut at max_prompt_length."""
    data = cfg.data
    what_if = frames is not None
    frames = data.video_max_frames if frames is None else frames
    frames = max(shape.temporal_patch, frames // shape.temporal_patch * shape.temporal_patch)
    factor = shape.patch_size * shape.merge
    tokens_per_group = max(1, data.video_max_pixels // (factor * factor))
    groups = frames // shape.temporal_patch
    visual = groups * tokens_per_group
    prompt = visual + PROMPT_TEXT_TOKENS
    return SequenceSize(frames=frames, visual_tokens=visual, patches=visual * shape.merge**2,
                        prompt_tokens=prompt if what_if else min(prompt, data.max_prompt_length),
                        response_tokens=data.max_response_length, filtered=prompt > data.max_prompt_length)


@dataclass
class MemoryEstimate:
    """Per-GPU bytes by part for the trainer's GPU, and what a rollout GPU needs."""

    shape: ModelShape
    role: str  # "colocated", "shared GPU", "trainer rank"
    shard: int
    sequence: SequenceSize
    sequences_per_micro_batch: int
    parts: dict[str, float]  # trainer GPU while it trains, bytes
    persistent: float  # trainer bytes that stay while vLLM is awake (colocated)
    vllm_share: float  # the engine's gpu_memory_utilization (of the trainer's GPU unless distributed)
    rollout_need: float  # bytes the engine needs inside its share: bf16 weights per TP rank + one group's KV
    notes: list[str] = field(default_factory=list)

    @property
    def trainer_bytes(self) -> float:
        return sum(self.parts.values())

    @property
    def gpu_bytes(self) -> float:
        """The smallest GPU this config fits: every phase within the GPU, vLLM's share large enough."""
        need = self.rollout_need / self.vllm_share
        if self.role == "colocated":  # vLLM asleep while the actor trains, awake beside its state
            return max(self.trainer_bytes + VLLM_ASLEEP_GIB * GIB, self.persistent / (1 - self.vllm_share), need)
        if self.role == "shared GPU":  # both resident at once
            return max(self.trainer_bytes / (1 - self.vllm_share), need)
        return max(self.trainer_bytes, need)  # rollout replicas on GPUs of their own, of the same kind

    @property
    def gpu_gib(self) -> int:
        """:attr:`gpu_bytes` in GiB, rounded up: the figure a recipe's ``# gpu-memory-gib:`` line states."""
        return math.ceil(self.gpu_bytes / GIB)

    def summary_lines(self) -> list[str]:
        s, seq = self.shape, self.sequence
        lines = [f"model {s.name} ({s.source}): {s.params / 1e9:.2f} B parameters "
                 f"({s.vision_params / 1e9:.2f} B vision), {s.layers} layers x {s.hidden}, "
                 f"vision {s.vision_layers} x {s.vision_hidden}, patch {s.patch_size}",
                 f"sequence: {seq.frames} frames -> {seq.visual_tokens} visual tokens ({seq.patches} patches), "
                 f"{seq.tokens} tokens with the response; {self.sequences_per_micro_batch} per micro-batch"
                 + (" (longer than data.max_prompt_length: filtered)" if seq.filtered else ""),
                 f"trainer GPU ({self.role}, state sharded over {self.shard}):"]
        lines += [f"  {name:<34}{value / GIB:8.1f} GiB" for name, value in self.parts.items()]
        lines.append(f"  {'total while training':<34}{self.trainer_bytes / GIB:8.1f} GiB")
        lines.append(f"rollout engine: {self.rollout_need / GIB:.1f} GiB (bf16 weights per TP rank + one group's KV "
                     f"cache) within gpu_memory_utilization {self.vllm_share:g} of its GPU")
        lines += [f"note: {note}" for note in self.notes]
        return lines


def _world(cfg: RunConfig) -> tuple[int, bool]:
    """(FSDP ranks the state is sharded over, whether FSDP wraps the model at all)."""
    embedded = cfg.distributed.mode == "embedded"
    ranks = 1 if embedded else cfg.distributed.train_ranks
    fsdp = cfg.worker.actor.fsdp.enable
    wrapped = fsdp == "on" or (fsdp == "auto" and ranks > 1)
    return (ranks if wrapped else 1), wrapped


def shared_prefix_applies(cfg: RunConfig, shape: ModelShape) -> bool:
    """As train/vlm.py ``uses_shared_prefix`` decides from the model (models/packing.py): on, with the
    packed attention, for a model without recurrent layers (Qwen3.5 has them)."""
    actor = cfg.worker.actor
    return actor.shared_prefix and actor.attention != "sdpa" and not shape.model_type.startswith("qwen3_5")


@dataclass(frozen=True)
class MicroBatch:
    """The largest micro-batch dynamic batching fills (train/batching.py)."""

    sequences: int  # responses
    prompts: int  # prompts laid out (one per sequence without a shared prefix)
    size: Any  # :class:`~easyvideor1.models.checkpointing.MicroBatchSize`
    gathered_keys: int  # keys each layer's shared-prefix attention gathers (0: not shared)


def largest_micro_batch(cfg: RunConfig, shape: ModelShape, seq: SequenceSize, shard: int) -> MicroBatch:
    """Within ``micro_batch_token_budget`` and the rank's share of a mini-batch. With a shared prefix
    a group costs its prompt once: whole groups where they fit, else chunks of responses each laying
    the prompt out again; every response's keys are its prompt's and its own."""
    from easyvideor1.models.checkpointing import MicroBatchSize

    actor, n, budget = cfg.worker.actor, cfg.worker.rollout.n, cfg.worker.actor.micro_batch_token_budget
    if not shared_prefix_applies(cfg, shape):
        per_mb = max(1, min(max(1, actor.mini_batch_size * n // shard), budget // max(1, seq.tokens)))
        return MicroBatch(per_mb, per_mb, MicroBatchSize(tokens=per_mb * seq.tokens, patches=per_mb * seq.patches,
                                                          response_tokens=per_mb * seq.response_tokens), 0)
    group = seq.prompt_tokens + n * seq.response_tokens
    if group <= budget:
        prompts = max(1, min(max(1, actor.mini_batch_size // shard), budget // group))
        per_mb = prompts * n
    else:
        prompts, per_mb = 1, max(1, min(n, (budget - seq.prompt_tokens) // max(1, seq.response_tokens)))
    # Logits are computed only where they predict a response token (models/packing.py), so the
    # vocabulary-wide term counts the responses' tokens, the prompt's none.
    size = MicroBatchSize(tokens=prompts * seq.prompt_tokens + per_mb * seq.response_tokens,
                          patches=prompts * seq.patches, response_tokens=per_mb * seq.response_tokens)
    keys = prompts * seq.prompt_tokens + per_mb * (seq.prompt_tokens + seq.response_tokens)
    return MicroBatch(per_mb, prompts, size, keys)


def _gathered_kv_bytes(shape: ModelShape, keys: int, kept_layers: int, element: int) -> float:
    """The shared-prefix attention's gathered keys and values (all query heads): one layer's while it is
    (re)computed and their gradient in its backward, plus those each layer keeping its activations holds."""
    per_layer = 2.0 * element * keys * shape.heads * shape.head_dim
    live = 2 if kept_layers < shape.layers else 1  # the last layer's backward follows its forward directly
    return per_layer * (kept_layers + live)


def estimate_memory(cfg: RunConfig, *, frames: int | None = None, shape: ModelShape | None = None) -> MemoryEstimate:
    """The per-GPU memory of ``cfg`` (``frames``: instead of ``data.video_max_frames``)."""
    from easyvideor1.models.checkpointing import ActivationCosts

    actor, rollout = cfg.worker.actor, cfg.worker.rollout
    shape = shape or model_shape(actor.model_path)
    shard, wrapped = _world(cfg)
    offload = actor.fsdp.cpu_offload and wrapped
    bf16 = actor.fsdp.mixed_precision == "bf16"
    notes: list[str] = []
    if actor.fsdp.cpu_offload and not wrapped:
        notes.append("fsdp.cpu_offload has no effect without FSDP (fsdp.enable=on, or train_ranks > 1)")
    p = shape.params
    parts: dict[str, float] = {}
    for name, label in (("weights", "fp32 master weights"), ("grads", "fp32 gradients"),
                        ("adamw", "AdamW moments (fp32 m, v)")):
        parts[label] = 0.0 if offload else BYTES_PER_PARAM[name] * p / shard
    if bf16:
        gathered = p if not wrapped else min(p, shape.root_params + 2 * shape.layer_params)
        parts["bf16 compute weights" if not wrapped else "bf16 gathered FSDP units"] = 2.0 * gathered
    if cfg.algorithm.kl.enable:
        parts["reference model (fp32)"] = 0.0 if offload else 4.0 * p / shard

    seq = sequence_size(cfg, shape, frames)
    batch = largest_micro_batch(cfg, shape, seq, shard)
    size = batch.size
    costs = ActivationCosts.estimate(shape.activation_config(), lm_layers=shape.layers,
                                     vision_layers=shape.vision_layers)
    if not actor.gradient_checkpointing:
        kept, how = (shape.layers, shape.vision_layers), "no gradient checkpointing"
    elif actor.keep_policy == "fixed" or (actor.keep_policy == "auto" and cfg.trainer.device == "cpu"):
        kept = (int(shape.layers * actor.keep_activations_lm), int(shape.vision_layers * actor.keep_activations_vision))
        how = (f"checkpointing with {kept[0]}/{shape.layers} decoder layers and {kept[1]}/{shape.vision_layers} "
               "vision blocks keeping theirs")
    else:
        kept, how = (0, 0), "full checkpointing (the adaptive keep policy keeps more only where memory is free)"
    activations = costs.predict(size, lm=kept[0], vision=kept[1])
    if not bf16:
        activations *= 2  # the costs are for bf16 compute; fp32 doubles the tensors that are bf16
    parts["activations, largest micro-batch"] = activations
    if batch.gathered_keys:
        parts["shared-prefix gathered K/V"] = _gathered_kv_bytes(shape, batch.gathered_keys, kept[0], 2 if bf16 else 4)
        prompts = f"{batch.prompts} prompt" + "s" * (batch.prompts > 1)
        notes.append(f"shared prefix (worker.actor.shared_prefix): {prompts} and {batch.sequences} responses per "
                     f"micro-batch, {size.tokens} tokens as laid out")
    notes.insert(0, f"activations: {how}")
    parts["CUDA context, allocator slack"] = OVERHEAD_GIB * GIB

    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * 2 * (seq.prompt_tokens + rollout.n * seq.response_tokens)
    rollout_need = 2.0 * p / rollout.tensor_parallel_size + kv + OVERHEAD_GIB * GIB
    if cfg.distributed.mode == "distributed":
        role = "trainer rank"
    elif rollout.colocate:
        role = "colocated"
    else:
        role = "shared GPU"
    state = sum(v for k, v in parts.items() if k.startswith(("fp32", "AdamW", "reference")))
    persistent = state + OVERHEAD_GIB * GIB
    return MemoryEstimate(shape=shape, role=role, shard=shard, sequence=seq, sequences_per_micro_batch=batch.sequences,
                          parts=parts, persistent=persistent, vllm_share=rollout.gpu_memory_utilization,
                          rollout_need=rollout_need, notes=notes)


def frames_table(cfg: RunConfig, frame_counts: list[int] | None = None) -> list[str]:
    """Trainer-GPU activations and the GPU needed at other frame counts (pixels, batch as configured)."""
    shape = model_shape(cfg.worker.actor.model_path)
    counts = frame_counts or sorted({16, 32, 64, 128, 256, cfg.data.video_max_frames})
    lines = [f"{'frames':>7}{'tokens':>9}{'activations GiB':>17}{'GPU GiB':>9}"]
    for count in counts:
        est = estimate_memory(cfg, frames=count, shape=shape)
        act = next(v for k, v in est.parts.items() if k.startswith("activations"))
        flag = f"  (needs data.max_prompt_length >= {est.sequence.prompt_tokens})" if est.sequence.filtered else ""
        lines.append(f"{est.sequence.frames:>7}{est.sequence.tokens:>9}{act / GIB:>17.1f}{est.gpu_gib:>9}{flag}")
    return lines


RECIPE_MARKER = "# --- GPU memory, computed by `evr1 config check` (config/memory.py) ---"


def report_lines(cfg: RunConfig, frame_counts: list[int] | None = None) -> list[str]:
    """What ``evr1 config check`` prints and a recipe carries under :data:`RECIPE_MARKER` (each line
    commented): the estimate's parts, the per-frame-count table, and ``gpu-memory-gib: N`` last."""
    estimate = estimate_memory(cfg)
    return [*estimate.summary_lines(), "by frame count (pixels, batch and checkpointing as configured):",
            *frames_table(cfg, frame_counts), f"gpu-memory-gib: {estimate.gpu_gib}"]
