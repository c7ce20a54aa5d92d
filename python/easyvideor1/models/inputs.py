"""The one prompt/input builder used by every rollout engine and by the trainer.

Frames arrive already sampled and resized (from the frame cache or the decoder) together
with their metadata. The processor is called with re-sampling and re-resizing switched off
(``do_sample_frames=False``, ``do_resize=False``) and with the true source fps and frame
indices, so the number of visual tokens and Qwen3-VL's timestamps are the same in rollout,
reference and actor passes. The token counts are checked three ways (placeholders in the
prompt, features the grids describe, arithmetic from the frame shapes) before any model
sees them, so a mismatch is reported here, by sample, instead of deep inside a forward.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.models.families import (
    IMAGE_PAD,
    VIDEO_PAD,
    ModelFamily,
    get_family,
    visual_token_count,
)
from easyvideor1.models.rope import mrope_positions
from easyvideor1.video.metadata import ImageMetadata, VideoMetadata

# Placeholders of the data format (docs/data-format.md), mapped to chat content items.
_PLACEHOLDER = re.compile(r"(<video>|<image>)")
# What the processor must not redo: frames are final when they reach us.
PROCESSOR_KWARGS: dict[str, Any] = {"do_sample_frames": False, "do_resize": False}


class PlaceholderMismatchError(EasyVideoR1Error):
    """Vision placeholder tokens and visual features disagree for one sample."""


class MediaInputError(EasyVideoR1Error):
    """Frames/images or their metadata are not what the model can take."""


@dataclass(frozen=True)
class VideoInput:
    """Sampled, resized frames ``(T, H, W, 3)`` uint8 and the metadata they were made with."""

    frames: np.ndarray
    metadata: VideoMetadata


@dataclass(frozen=True)
class ImageInput:
    """A resized image ``(H, W, 3)`` uint8; metadata (if known) is checked against it."""

    image: np.ndarray
    metadata: ImageMetadata | None = None


@dataclass
class PromptInputs:
    """Everything a model needs for one prompt, identical for every consumer.

    ``prompt_text`` is the chat-templated text with unexpanded placeholders (what vLLM
    takes); ``prompt_ids`` are the expanded token ids; ``position_ids`` (3, L) are M-RoPE
    positions computed the original Qwen way (models/rope.py) and ``next_position`` is
    where generated text continues.
    """

    sample_id: str
    prompt_text: str
    prompt_ids: list[int]
    mm_token_type_ids: list[int]
    position_ids: np.ndarray
    next_position: int
    tensors: dict[str, Any]
    videos: tuple[VideoInput, ...] = ()
    images: tuple[ImageInput, ...] = ()
    num_video_tokens: int = 0
    num_image_tokens: int = 0
    family: ModelFamily | None = field(default=None, repr=False)

    @property
    def num_visual_tokens(self) -> int:
        return self.num_video_tokens + self.num_image_tokens

    def video_metadata_dicts(self) -> list[dict[str, Any]]:
        return [v.metadata.processor_metadata() for v in self.videos]


def messages_from_problem(problem: str, *, system: str | None = None) -> list[dict[str, Any]]:
    """Chat messages for a data-format problem: ``<video>``/``<image>`` become content items."""
    content: list[dict[str, Any]] = []
    for part in _PLACEHOLDER.split(problem):
        if part == "<video>":
            content.append({"type": "video"})
        elif part == "<image>":
            content.append({"type": "image"})
        elif part:
            content.append({"type": "text", "text": part})
    messages: list[dict[str, Any]] = []
    if system is not None:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": content})
    return messages


def _check_video(sample_id: str, index: int, video: VideoInput, family: ModelFamily) -> None:
    frames, meta = video.frames, video.metadata
    where = f"sample {sample_id!r} video {index}"
    if not isinstance(frames, np.ndarray) or frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        shape = getattr(frames, "shape", None)
        raise MediaInputError(f"{where}: frames must be a (T, H, W, 3) uint8 array, got {shape} "
                              f"{getattr(frames, 'dtype', type(frames).__name__)}")
    t, h, w = frames.shape[:3]
    if meta.num_frames != t:
        raise MediaInputError(f"{where}: metadata lists {meta.num_frames} frame indices for {t} frames")
    if (meta.height, meta.width) != (h, w):
        raise MediaInputError(f"{where}: metadata says {meta.height}x{meta.width}, frames are {h}x{w}")
    if h % family.factor or w % family.factor:
        raise MediaInputError(f"{where}: {h}x{w} is not a multiple of the {family.name} factor {family.factor} "
                              f"(cached with factor {meta.factor}; rebuild the cache for this model family)")
    if meta.source_fps <= 0:
        raise MediaInputError(f"{where}: source fps must be > 0, got {meta.source_fps}")


def _check_image(sample_id: str, index: int, image: ImageInput, family: ModelFamily) -> None:
    array, meta = image.image, image.metadata
    where = f"sample {sample_id!r} image {index}"
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] != 3:
        raise MediaInputError(f"{where}: image must be an (H, W, 3) uint8 array, got {getattr(array, 'shape', None)}")
    h, w = array.shape[:2]
    if meta is not None and (meta.height, meta.width) != (h, w):
        raise MediaInputError(f"{where}: metadata says {meta.height}x{meta.width}, image is {h}x{w}")
    if h % family.factor or w % family.factor:
        raise MediaInputError(f"{where}: {h}x{w} is not a multiple of the {family.name} factor {family.factor}")


def hf_video_metadata(metadata: VideoMetadata) -> dict[str, Any]:
    """Metadata for a transformers video processor (no ``do_sample_frames`` key there)."""
    return {k: v for k, v in metadata.processor_metadata().items() if k != "do_sample_frames"}


def check_visual_tokens(sample_id: str, input_ids: Sequence[int], *, image_token_id: int, video_token_id: int,
                        image_grid_thw: Sequence[Sequence[int]] = (), video_grid_thw: Sequence[Sequence[int]] = (),
                        merge_size: int) -> tuple[int, int]:
    """Raise :class:`PlaceholderMismatchError` unless placeholders equal features; returns both counts."""
    ids = np.asarray(list(input_ids))
    counts = {}
    for kind, token_id, grids in (("image", image_token_id, image_grid_thw), ("video", video_token_id, video_grid_thw)):
        n_tokens = int((ids == token_id).sum())
        n_features = sum(int(np.prod(g)) // merge_size**2 for g in grids)
        if n_tokens != n_features:
            raise PlaceholderMismatchError(
                f"sample {sample_id!r}: {kind} features and {kind} tokens do not match: "
                f"{n_tokens} {kind} placeholder tokens in the sequence, {n_features} {kind} features "
                f"from {len(grids)} {kind}(s) with grids {[list(map(int, g)) for g in grids]}"
            )
        counts[kind] = n_tokens
    return counts["image"], counts["video"]


def _grid_list(tensor: Any) -> list[list[int]]:
    return [] if tensor is None else [[int(x) for x in row] for row in tensor.tolist()]


def build_prompt(processor: Any, messages: str | Sequence[Mapping[str, Any]], videos: Sequence[VideoInput] = (),
                 images: Sequence[ImageInput] = (), *, family: str | ModelFamily, sample_id: str = "",
                 add_generation_prompt: bool = True) -> PromptInputs:
    """Template, tokenize and process one prompt with its frames/images.

    ``messages`` is a list of chat messages (content items ``{"type": "video"}``,
    ``{"type": "image"}``, ``{"type": "text", "text": ...}``) or a data-format problem
    string with ``<video>``/``<image>`` placeholders. Videos and images are matched to
    placeholders in order.
    """
    fam = get_family(family)
    videos, images = tuple(videos), tuple(images)
    if isinstance(messages, str):
        messages = messages_from_problem(messages)
    prompt_text = processor.apply_chat_template(list(messages), tokenize=False,
                                                add_generation_prompt=add_generation_prompt)
    n_video_slots, n_image_slots = prompt_text.count(VIDEO_PAD), prompt_text.count(IMAGE_PAD)
    if n_video_slots != len(videos) or n_image_slots != len(images):
        raise PlaceholderMismatchError(
            f"sample {sample_id!r}: the prompt has {n_video_slots} video and {n_image_slots} image placeholder(s) "
            f"but {len(videos)} video(s) and {len(images)} image(s) were given"
        )
    for i, video in enumerate(videos):
        _check_video(sample_id, i, video, fam)
    for i, image in enumerate(images):
        _check_image(sample_id, i, image, fam)

    call: dict[str, Any] = {"text": [prompt_text], "return_tensors": "pt", **PROCESSOR_KWARGS}
    if videos:
        call["videos"] = [v.frames for v in videos]
        call["video_metadata"] = [hf_video_metadata(v.metadata) for v in videos]
    if images:
        call["images"] = [im.image for im in images]
    out = processor(**call)
    prompt_ids = [int(x) for x in out["input_ids"][0].tolist()]
    image_grid = _grid_list(out.get("image_grid_thw"))
    video_grid = _grid_list(out.get("video_grid_thw"))

    expected_video = [visual_token_count(fam, v.frames.shape, kind="video") for v in videos]
    expected_image = [visual_token_count(fam, im.image.shape, kind="image") for im in images]
    from_grid_video = [int(np.prod(g)) // fam.merge_size**2 for g in video_grid]
    from_grid_image = [int(np.prod(g)) // fam.merge_size**2 for g in image_grid]
    if expected_video != from_grid_video or expected_image != from_grid_image:
        raise PlaceholderMismatchError(
            f"sample {sample_id!r}: the processor produced {from_grid_video} video / {from_grid_image} image "
            f"features but the frame shapes give {expected_video} / {expected_image}: frames were re-sampled "
            "or resized (pass do_sample_frames=False, do_resize=False)"
        )
    n_image, n_video = check_visual_tokens(
        sample_id, prompt_ids, image_token_id=processor.image_token_id, video_token_id=processor.video_token_id,
        image_grid_thw=image_grid, video_grid_thw=video_grid, merge_size=fam.merge_size,
    )
    second_per_grid = out.get("second_per_grid_ts")
    seconds = None if second_per_grid is None else [float(s) for s in second_per_grid.tolist()]
    positions, next_position = mrope_positions(
        fam, prompt_ids, image_token_id=processor.image_token_id, video_token_id=processor.video_token_id,
        image_grid_thw=image_grid, video_grid_thw=video_grid, second_per_grid_ts=seconds,
        sample_id=sample_id,
    )
    tensors = {k: out[k] for k in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw",
                                   "second_per_grid_ts") if out.get(k) is not None}
    type_ids = mm_token_type_ids(prompt_ids, image_token_id=processor.image_token_id,
                                 video_token_id=processor.video_token_id)
    return PromptInputs(
        sample_id=sample_id, prompt_text=prompt_text, prompt_ids=prompt_ids, mm_token_type_ids=type_ids,
        position_ids=positions, next_position=next_position, tensors=tensors, videos=videos, images=images,
        num_video_tokens=n_video, num_image_tokens=n_image, family=fam,
    )


def mm_token_type_ids(input_ids: Sequence[int], *, image_token_id: int, video_token_id: int) -> list[int]:
    """0 for text, 1 for image placeholders, 2 for video placeholders (transformers' convention)."""
    return [1 if t == image_token_id else 2 if t == video_token_id else 0 for t in input_ids]


class PromptBuilder:
    """``build_prompt`` bound to one model directory's processor and family."""

    def __init__(self, processor: Any, family: str | ModelFamily):
        self.processor = processor
        self.family = get_family(family)
        # Callers build prompts from worker threads (the eval I/O stage, an engine's event
        # loop offloading); a fast tokenizer used by two threads at once can fail with
        # "Already borrowed", so builds take turns.
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, model_dir: str) -> PromptBuilder:
        from transformers import AutoProcessor

        from easyvideor1.models.families import detect_family

        return cls(AutoProcessor.from_pretrained(model_dir), detect_family(model_dir))

    @property
    def tokenizer(self) -> Any:
        return self.processor.tokenizer

    def build(self, messages: str | Sequence[Mapping[str, Any]], videos: Sequence[VideoInput] = (),
              images: Sequence[ImageInput] = (), *, sample_id: str = "") -> PromptInputs:
        with self._lock:
            return build_prompt(self.processor, messages, videos, images, family=self.family, sample_id=sample_id)
