"""Tiny random-weight models of the real Qwen-VL architectures, built offline.

Nothing can be downloaded here, so tests, the demo and benchmarks use these: the real
model classes (transformers and vLLM load them as they would a released checkpoint) with
~1 M random parameters, a locally trained tokenizer and processors with small size limits.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from easyvideor1.errors import ConfigError
from easyvideor1.files import share
from easyvideor1.logging import event, get_logger
from easyvideor1.models.families import (
    IMAGE_PAD,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    ModelFamily,
    get_family,
)
from easyvideor1.models.tiny_tokenizer import ENDOFTEXT, IM_END, build_tiny_tokenizer

log = get_logger(__name__)

TEXT_HIDDEN = 128
TEXT_LAYERS = 2
HEAD_DIM = 64  # vLLM's CPU attention accepts head sizes {32, 64, 80, ...} only
VISION_HIDDEN = 64
VISION_DEPTH = 2
# Processor size limits, in units of factor**2 pixels: keeps vLLM's start-up profiling
# small and leaves 64x64 frames (4 x 32**2) at their size when resizing is on.
MIN_PIXELS_FACTORS = 4
MAX_PIXELS_FACTORS = 16
MAX_VIDEO_FRAMES = 16


def _text_config(family: ModelFamily, vocab_size: int, token_ids: dict[str, int]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": TEXT_HIDDEN,
        "intermediate_size": 2 * TEXT_HIDDEN,
        "num_hidden_layers": TEXT_LAYERS,
        "num_attention_heads": TEXT_HIDDEN // HEAD_DIM,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "eos_token_id": token_ids[IM_END],
        "pad_token_id": token_ids[ENDOFTEXT],
        "bos_token_id": None,
    }
    if family.name in ("qwen2_vl", "qwen2_5_vl"):
        # Real models: [16, 24, 24] for head_dim 128; scaled to sum to HEAD_DIM / 2.
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [8, 12, 12]}
        config["layer_types"] = ["full_attention"] * TEXT_LAYERS
    elif family.name == "qwen3_vl":
        config["rope_parameters"] = {
            "rope_type": "default", "rope_theta": 5e6, "mrope_section": [12, 10, 10], "mrope_interleaved": True,
        }
    elif family.name == "qwen3_5":
        # Hybrid stack as in the release (linear attention, then full attention), partial
        # rotary (a quarter of head_dim) with interleaved M-RoPE sections summing to 8.
        config.update({
            "layer_types": ["linear_attention", "full_attention"],
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_num_key_heads": 1,
            "linear_num_value_heads": 2,
            "rope_parameters": {
                "rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                "mrope_section": [3, 3, 2], "mrope_interleaved": True,
            },
        })
    return config


def _vision_config(family: ModelFamily) -> dict[str, Any]:
    common = {
        "depth": VISION_DEPTH,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": family.patch_size,
        "spatial_merge_size": family.merge_size,
        "temporal_patch_size": family.temporal_patch_size,
    }
    if family.name == "qwen2_vl":
        return {**common, "embed_dim": VISION_HIDDEN, "hidden_size": TEXT_HIDDEN, "mlp_ratio": 2}
    if family.name == "qwen2_5_vl":
        return {
            **common, "hidden_size": VISION_HIDDEN, "intermediate_size": 2 * VISION_HIDDEN,
            "out_hidden_size": TEXT_HIDDEN, "window_size": 56, "fullatt_block_indexes": [1],
            "tokens_per_second": int(family.tokens_per_second),
        }
    vision = {
        **common, "hidden_size": VISION_HIDDEN, "intermediate_size": 2 * VISION_HIDDEN,
        "out_hidden_size": TEXT_HIDDEN, "num_position_embeddings": 256,
    }
    if family.name == "qwen3_vl":
        vision["deepstack_visual_indexes"] = [0]
    return vision


def tiny_config(family: str | ModelFamily, tokenizer: Any):
    """The transformers config of a tiny model of ``family`` sized to ``tokenizer``."""
    import transformers

    fam = get_family(family)
    token_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD,
                                                                  IM_END, ENDOFTEXT)}
    config_class = {
        "qwen2_vl": transformers.Qwen2VLConfig,
        "qwen2_5_vl": transformers.Qwen2_5_VLConfig,
        "qwen3_vl": transformers.Qwen3VLConfig,
        "qwen3_5": transformers.Qwen3_5Config,
    }[fam.name]
    return config_class(
        text_config=_text_config(fam, len(tokenizer), token_ids),
        vision_config=_vision_config(fam),
        image_token_id=token_ids[IMAGE_PAD],
        video_token_id=token_ids[VIDEO_PAD],
        vision_start_token_id=token_ids[VISION_START],
        vision_end_token_id=token_ids[VISION_END],
        tie_word_embeddings=True,
    )


def tiny_processor(family: str | ModelFamily, tokenizer: Any):
    """Image/video processors with small size limits, wrapped in the family's processor."""
    import transformers
    from transformers.image_utils import IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD

    fam = get_family(family)
    f = fam.factor
    size = {"shortest_edge": MIN_PIXELS_FACTORS * f * f, "longest_edge": MAX_PIXELS_FACTORS * f * f}
    geometry = {"patch_size": fam.patch_size, "temporal_patch_size": fam.temporal_patch_size,
                "merge_size": fam.merge_size}
    if fam.per_frame_timestamps:
        norm = {"image_mean": IMAGENET_STANDARD_MEAN, "image_std": IMAGENET_STANDARD_STD}
        image_processor = transformers.Qwen2VLImageProcessor(size=size, **geometry, **norm)
        # Qwen3-VL's video limits apply to the whole clip, hence x MAX_VIDEO_FRAMES.
        clip_size = {"shortest_edge": size["shortest_edge"], "longest_edge": size["longest_edge"] * MAX_VIDEO_FRAMES}
        video_processor = transformers.Qwen3VLVideoProcessor(
            size=clip_size, **geometry, **norm, min_frames=2, max_frames=MAX_VIDEO_FRAMES,
            cap_pixels_per_frame=True, max_video_tokens=MAX_PIXELS_FACTORS,
        )
        processor_class = transformers.Qwen3VLProcessor
    else:
        image_processor = transformers.Qwen2VLImageProcessor(size=size, **geometry)
        video_processor = transformers.Qwen2VLVideoProcessor(
            size=size, **geometry, min_frames=2, max_frames=MAX_VIDEO_FRAMES, cap_pixels_per_frame=True,
        )
        processor_class = (transformers.Qwen2_5_VLProcessor if fam.name == "qwen2_5_vl"
                           else transformers.Qwen2VLProcessor)
    return processor_class(image_processor=image_processor, tokenizer=tokenizer,
                           video_processor=video_processor, chat_template=tokenizer.chat_template)


def build_tiny_model(family: str | ModelFamily, out_dir: str | Path, seed: int = 0,
                     extra_tokens: tuple[str, ...] = ()) -> Path:
    """Write a tiny random model of ``family`` (weights, config, tokenizer, processors).

    The same ``seed`` gives bit-identical weights. ``extra_tokens`` go to the tokenizer
    (:func:`build_tiny_tokenizer`) and widen the vocabulary; without them the model is
    byte-identical to what it always was. Returns ``out_dir``.
    """
    import torch
    import transformers

    fam = get_family(family)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(extra_tokens=tuple(extra_tokens))
    config = tiny_config(fam, tokenizer)
    model_class = getattr(transformers, fam.hf_architecture)
    # Seed a private generator-free state: torch's CPU init is deterministic under a seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config).to(torch.float32)
    model.generation_config = transformers.GenerationConfig(
        eos_token_id=[config.text_config.eos_token_id, tokenizer.convert_tokens_to_ids(ENDOFTEXT)],
        pad_token_id=config.text_config.pad_token_id,
    )
    model.save_pretrained(out, safe_serialization=True)
    processor = tiny_processor(fam, tokenizer)
    processor.save_pretrained(out)
    share(out)  # safetensors writes the weights 0600 whatever the umask
    n_params = sum(p.numel() for p in model.parameters())
    event(log, "tiny_model_built", family=fam.name, out=str(out), seed=seed, params=n_params,
          vocab=len(tokenizer))
    return out


def safetensors_digest(model_dir: str | Path) -> str:
    """SHA-256 over every tensor (name, dtype, shape, bytes) of the model's safetensors files."""
    from safetensors.numpy import load_file

    digest = hashlib.sha256()
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise ConfigError(f"{model_dir}: no .safetensors files")
    for path in files:
        tensors = load_file(str(path))
        for name in sorted(tensors):
            array = tensors[name]
            digest.update(f"{name}|{array.dtype}|{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def perturb_weights(model: Any, scale: float = 1.5, seed: int = 0) -> None:
    """Add Gaussian noise to every floating parameter, in place, deterministically by seed.

    The default init (std 0.02) gives near-flat logits and near-uniform attention, which
    hide numerical mismatches between engines. Matrices get noise of std
    ``scale / sqrt(fan_in)`` (a Kaiming-like scale, so activations and logits are O(1)),
    vectors (norm weights, biases) ``0.1 * scale``.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if not param.is_floating_point():
                continue
            if param.dim() >= 2:
                fan_in = param[0].numel()
                std = scale / fan_in**0.5
            else:
                std = 0.1 * scale
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            param.add_((noise * std).to(param.dtype))


def random_video_input(family: str | ModelFamily, num_frames: int, rows: int, cols: int, *,
                       source_fps: float = 3.0, stride: int = 2, seed: int = 0, first_index: int = 0):
    """Random frames of ``rows x cols`` factor units with the exact metadata of a sampled video.

    Frame ``i`` is source frame ``first_index + stride * i`` of a ``source_fps`` video, as the
    frame cache would hand them over (sampled and resized already).
    """
    import numpy as np

    from easyvideor1.models.inputs import VideoInput
    from easyvideor1.video.metadata import VideoMetadata

    factor = get_family(family).factor
    height, width = rows * factor, cols * factor
    frames = np.random.default_rng(seed).integers(0, 256, (num_frames, height, width, 3), dtype=np.uint8)
    indices = tuple(first_index + stride * i for i in range(num_frames))
    total = indices[-1] + stride
    metadata = VideoMetadata(
        source_fps=source_fps, total_frames=total, duration=total / source_fps, frame_indices=indices,
        timestamps=tuple(i / source_fps for i in indices), height=height, width=width, source_height=height,
        source_width=width, factor=factor, decoder="synthetic",
    )
    return VideoInput(frames, metadata)


def random_image_input(family: str | ModelFamily, rows: int, cols: int, *, seed: int = 0):
    """A random ``rows x cols`` factor-unit image with its metadata."""
    import numpy as np

    from easyvideor1.models.inputs import ImageInput
    from easyvideor1.video.metadata import ImageMetadata

    factor = get_family(family).factor
    height, width = rows * factor, cols * factor
    image = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return ImageInput(image, ImageMetadata(height=height, width=width, source_height=height, source_width=width,
                                           factor=factor))
