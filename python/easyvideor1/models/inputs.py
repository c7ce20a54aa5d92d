"""The one prompt/input builder used by every rollout engine and by the trainer.

Frames arrive already sampled and resized (from the frame cache or the decoder) together
with their metadata. The prompt's token ids, M-RoPE positions and token types come from the
chat-templated text and that metadata alone (models/expansion.py, equal to what the
processor gives); pixels go through the image/video processors only, with re-sampling and
re-resizing switched off (``do_sample_frames=False``, ``do_resize=False``) and the true
source fps and frame indices, so the number of visual tokens and Qwen3-VL's timestamps are
the same in rollout, reference and actor passes. The token counts are checked three ways
(placeholders in the prompt, features the grids describe, arithmetic from the frame shapes)
before any model sees them, so a mismatch is reported here, by sample, instead of deep
inside a forward.

``build_prompt`` = ``expand`` (text only) + ``attach_pixels`` (``pixel_tensors`` + checks);
a stage that only needs ids (a trainer shipping prompts to rollout workers) calls ``expand``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from easyvideor1.models.expansion import (
    ExpandedPrompt,
    MediaInputError,
    PlaceholderMismatchError,
    check_image_metadata,
    check_media_slots,
    check_video_metadata,
    check_visual_tokens,
    expand_prompt,
    mm_token_type_ids,
)
from easyvideor1.models.families import ModelFamily, get_family, visual_token_count
from easyvideor1.video.metadata import ImageMetadata, VideoMetadata

__all__ = [
    "PROCESSOR_KWARGS", "ImageInput", "MediaInputError", "PlaceholderMismatchError", "PromptBuilder", "PromptInputs",
    "VideoInput", "attach_pixels", "build_prompt", "build_segment", "check_media", "check_visual_tokens", "expand",
    "hf_video_metadata",
    "messages_from_problem", "mm_token_type_ids", "pixel_tensors", "render_prompt",
]

# Placeholders of the data format (docs/data-format.md), mapped to chat content items.
_PLACEHOLDER = re.compile(r"(<video>|<image>)")
# What the processor must not redo: frames are final when they reach us.
PROCESSOR_KWARGS: dict[str, Any] = {"do_sample_frames": False, "do_resize": False}
# The processor outputs a forward needs besides the ids (in this order).
PIXEL_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")

Grid = tuple[int, int, int]


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

    A text-only prompt (:meth:`PromptBuilder.expand`) has the media *metadata* and grids but
    no frames and ``tensors == {}`` (``pixels_pending``); ``attach_pixels`` adds them.
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
    video_metadata: tuple[VideoMetadata, ...] = ()
    image_metadata: tuple[ImageMetadata, ...] = ()
    video_grid_thw: tuple[Grid, ...] = ()
    image_grid_thw: tuple[Grid, ...] = ()
    second_per_grid_ts: tuple[float, ...] | None = None
    # The ids with one unexpanded placeholder per medium, where the text cannot be re-tokenized
    # exactly: a multi-turn continuation (models/trajectory.py), whose sampled ids vLLM must
    # continue from as they are. None: ``prompt_text`` is the source.
    placeholder_ids: list[int] | None = None

    @property
    def num_visual_tokens(self) -> int:
        return self.num_video_tokens + self.num_image_tokens

    @property
    def num_videos(self) -> int:
        return max(len(self.videos), len(self.video_metadata))

    @property
    def num_images(self) -> int:
        return max(len(self.images), len(self.image_metadata))

    @property
    def pixels_pending(self) -> bool:
        """True for a text-only prompt with media: a forward needs ``attach_pixels`` first."""
        return (self.num_videos + self.num_images) > 0 and not self.tensors

    def video_metadata_dicts(self) -> list[dict[str, Any]]:
        metas = self.video_metadata or tuple(v.metadata for v in self.videos)
        return [m.processor_metadata() for m in metas]


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
    check_video_metadata(sample_id, index, meta, family)


def _check_image(sample_id: str, index: int, image: ImageInput, family: ModelFamily) -> ImageMetadata:
    """Checks one image and returns its metadata (made from the array when none was given)."""
    array, meta = image.image, image.metadata
    where = f"sample {sample_id!r} image {index}"
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] != 3:
        raise MediaInputError(f"{where}: image must be an (H, W, 3) uint8 array, got {getattr(array, 'shape', None)}")
    h, w = array.shape[:2]
    if meta is not None and (meta.height, meta.width) != (h, w):
        raise MediaInputError(f"{where}: metadata says {meta.height}x{meta.width}, image is {h}x{w}")
    if meta is None:
        meta = ImageMetadata(height=h, width=w, source_height=h, source_width=w, factor=family.factor)
    check_image_metadata(sample_id, index, meta, family)
    return meta


def check_media(sample_id: str, videos: Sequence[VideoInput], images: Sequence[ImageInput],
                family: str | ModelFamily) -> tuple[tuple[VideoMetadata, ...], tuple[ImageMetadata, ...]]:
    """Check every frame tensor/image; their metadata (an image's made from its array if none)."""
    fam = get_family(family)
    for i, video in enumerate(videos):
        _check_video(sample_id, i, video, fam)
    image_metas = tuple(_check_image(sample_id, i, image, fam) for i, image in enumerate(images))
    return tuple(v.metadata for v in videos), image_metas


def hf_video_metadata(metadata: VideoMetadata) -> dict[str, Any]:
    """Metadata for a transformers video processor (no ``do_sample_frames`` key there)."""
    return {k: v for k, v in metadata.processor_metadata().items() if k != "do_sample_frames"}


def _grid_list(tensor: Any) -> list[list[int]]:
    return [] if tensor is None else [[int(x) for x in row] for row in tensor.tolist()]


Tools = Sequence[Mapping[str, Any]] | None


def render_prompt(processor: Any, messages: str | Sequence[Mapping[str, Any]], *,
                  add_generation_prompt: bool = True, tools: Tools = None,
                  template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The chat-templated text with one unexpanded placeholder per video/image.

    ``tools`` (JSON-schema function declarations) go to the template's ``tools=``, where the
    family's template declares them in its own tool format; ``template_kwargs`` are further
    template variables (e.g. the tiny models' ``tool_call_format``). None renders as before.
    """
    if isinstance(messages, str):
        messages = messages_from_problem(messages)
    extra: dict[str, Any] = _used_by_template(processor, template_kwargs or {})
    if tools is not None:
        extra["tools"] = [dict(t) for t in tools]
    return processor.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt,
                                         **extra)


def _used_by_template(processor: Any, template_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``template_kwargs`` the processor's chat template reads. transformers hands any other
    keyword to the processor itself with a warning on every prompt (a real Qwen template has no
    ``tool_call_format``, which only the tiny models' template reads)."""
    if not template_kwargs:
        return {}
    template = getattr(processor, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    names = template_variables(template) if isinstance(template, str) else None
    if names is None:  # a template jinja2 cannot parse here: pass everything, as before
        return dict(template_kwargs)
    return {k: v for k, v in template_kwargs.items() if k in names}


@functools.lru_cache(maxsize=32)
def template_variables(template: str) -> frozenset[str] | None:
    """The variables a chat template reads (None when it does not parse, e.g. a tag of an extension
    transformers adds)."""
    import jinja2
    from jinja2 import meta

    try:
        parsed = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(template)
    except jinja2.TemplateSyntaxError:
        return None
    return frozenset(meta.find_undeclared_variables(parsed))


def _from_expansion(sample_id: str, prompt_text: str, exp: ExpandedPrompt, fam: ModelFamily,
                    video_metas: tuple[VideoMetadata, ...], image_metas: tuple[ImageMetadata, ...]) -> PromptInputs:
    return PromptInputs(
        sample_id=sample_id, prompt_text=prompt_text, prompt_ids=exp.prompt_ids,
        mm_token_type_ids=exp.mm_token_type_ids, position_ids=exp.position_ids, next_position=exp.next_position,
        tensors={}, num_video_tokens=exp.num_video_tokens, num_image_tokens=exp.num_image_tokens, family=fam,
        video_metadata=video_metas, image_metadata=image_metas, video_grid_thw=exp.video_grid_thw,
        image_grid_thw=exp.image_grid_thw, second_per_grid_ts=exp.second_per_grid_ts,
    )


def expand(processor: Any, messages: str | Sequence[Mapping[str, Any]], video_metas: Sequence[VideoMetadata] = (),
           image_metas: Sequence[ImageMetadata] = (), *, family: str | ModelFamily, sample_id: str = "",
           add_generation_prompt: bool = True, tools: Tools = None,
           template_kwargs: Mapping[str, Any] | None = None) -> PromptInputs:
    """A text-only :class:`PromptInputs` (no pixels, ``tensors == {}``) from media metadata.

    Ids, positions, token types and counts equal :func:`build_prompt`'s for the same media.
    """
    fam = get_family(family)
    video_metas, image_metas = tuple(video_metas), tuple(image_metas)
    prompt_text = render_prompt(processor, messages, add_generation_prompt=add_generation_prompt, tools=tools,
                                template_kwargs=template_kwargs)
    exp = expand_prompt(processor, fam, prompt_text, video_metas, image_metas, sample_id=sample_id)
    return _from_expansion(sample_id, prompt_text, exp, fam, video_metas, image_metas)


def pixel_tensors(processor: Any, videos: Sequence[VideoInput] = (), images: Sequence[ImageInput] = (), *,
                  family: str | ModelFamily, sample_id: str = "") -> dict[str, Any]:
    """``pixel_values``/``image_grid_thw``/``pixel_values_videos``/``video_grid_thw``/``second_per_grid_ts``.

    The processor runs without text, so only its image/video processors work (plus
    Qwen2.5-VL's ``second_per_grid_ts``): the tensors are exactly those of a full call.
    """
    fam = get_family(family)
    videos, images = tuple(videos), tuple(images)
    for i, video in enumerate(videos):
        _check_video(sample_id, i, video, fam)
    for i, image in enumerate(images):
        _check_image(sample_id, i, image, fam)
    if not videos and not images:
        return {}
    call: dict[str, Any] = {"return_tensors": "pt", **PROCESSOR_KWARGS}
    if videos:
        call["videos"] = [v.frames for v in videos]
        call["video_metadata"] = [hf_video_metadata(v.metadata) for v in videos]
    if images:
        call["images"] = [im.image for im in images]
    out = processor(**call)
    return {k: out[k] for k in PIXEL_KEYS if out.get(k) is not None}


def attach_pixels(processor: Any, inputs: PromptInputs, videos: Sequence[VideoInput] = (),
                  images: Sequence[ImageInput] = ()) -> PromptInputs:
    """``inputs`` (from :func:`expand`) with the frames' pixel tensors, checked three ways."""
    fam = get_family(inputs.family) if inputs.family is not None else None
    if fam is None:
        raise MediaInputError(f"sample {inputs.sample_id!r}: prompt inputs without a family cannot take pixels")
    sample_id = inputs.sample_id
    videos, images = tuple(videos), tuple(images)
    if len(videos) != len(inputs.video_metadata) or len(images) != len(inputs.image_metadata):
        raise PlaceholderMismatchError(
            f"sample {sample_id!r}: the prompt was expanded for {len(inputs.video_metadata)} video(s) and "
            f"{len(inputs.image_metadata)} image(s) but {len(videos)} video(s) and {len(images)} image(s) were given"
        )
    tensors = pixel_tensors(processor, videos, images, family=fam, sample_id=sample_id)
    # The frames must be the ones the ids were made for.
    for i, (video, meta) in enumerate(zip(videos, inputs.video_metadata, strict=True)):
        if video.metadata != meta:
            raise MediaInputError(f"sample {sample_id!r} video {i}: its metadata differs from the metadata the "
                                  "prompt was expanded with")
    for i, (image, meta) in enumerate(zip(images, inputs.image_metadata, strict=True)):
        if image.image.shape[:2] != (meta.height, meta.width):
            raise MediaInputError(f"sample {sample_id!r} image {i}: image is {image.image.shape[0]}x"
                                  f"{image.image.shape[1]}, the prompt was expanded for {meta.height}x{meta.width}")

    image_grid = _grid_list(tensors.get("image_grid_thw"))
    video_grid = _grid_list(tensors.get("video_grid_thw"))
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
        sample_id, inputs.prompt_ids, image_token_id=processor.image_token_id,
        video_token_id=processor.video_token_id, image_grid_thw=image_grid, video_grid_thw=video_grid,
        merge_size=fam.merge_size,
    )
    # Positions were computed from the metadata's grids and seconds: they must be the processor's.
    if [list(g) for g in inputs.video_grid_thw] != video_grid or [list(g) for g in inputs.image_grid_thw] != image_grid:
        raise PlaceholderMismatchError(
            f"sample {sample_id!r}: the processor's grids (video {video_grid}, image {image_grid}) differ from the "
            f"metadata's (video {[list(g) for g in inputs.video_grid_thw]}, "
            f"image {[list(g) for g in inputs.image_grid_thw]})"
        )
    seconds = tensors.get("second_per_grid_ts")
    seconds = None if seconds is None else tuple(float(s) for s in seconds.tolist())
    if seconds != inputs.second_per_grid_ts:
        raise PlaceholderMismatchError(f"sample {sample_id!r}: the processor's second_per_grid_ts {seconds} differ "
                                       f"from the metadata's {inputs.second_per_grid_ts}")
    return dataclasses.replace(inputs, tensors=tensors, videos=videos, images=images, num_video_tokens=n_video,
                               num_image_tokens=n_image)


def build_prompt(processor: Any, messages: str | Sequence[Mapping[str, Any]], videos: Sequence[VideoInput] = (),
                 images: Sequence[ImageInput] = (), *, family: str | ModelFamily, sample_id: str = "",
                 add_generation_prompt: bool = True, tools: Tools = None,
                 template_kwargs: Mapping[str, Any] | None = None) -> PromptInputs:
    """Template, tokenize and process one prompt with its frames/images.

    ``messages`` is a list of chat messages (content items ``{"type": "video"}``,
    ``{"type": "image"}``, ``{"type": "text", "text": ...}``) or a data-format problem
    string with ``<video>``/``<image>`` placeholders. Videos and images are matched to
    placeholders in order. ``tools``, ``template_kwargs``: see :func:`render_prompt`.
    """
    fam = get_family(family)
    videos, images = tuple(videos), tuple(images)
    prompt_text = render_prompt(processor, messages, add_generation_prompt=add_generation_prompt, tools=tools,
                                template_kwargs=template_kwargs)
    # Same order of checks as always: placeholders first, then each frame tensor.
    check_media_slots(sample_id, prompt_text, len(videos), len(images), video_token=processor.video_token,
                      image_token=processor.image_token)
    video_metas, image_metas = check_media(sample_id, videos, images, fam)
    exp = expand_prompt(processor, fam, prompt_text, video_metas, image_metas, sample_id=sample_id)
    text_only = _from_expansion(sample_id, prompt_text, exp, fam, video_metas, image_metas)
    return attach_pixels(processor, text_only, videos, images)


def build_segment(processor: Any, text: str, videos: Sequence[VideoInput] = (), images: Sequence[ImageInput] = (),
                  *, family: str | ModelFamily, sample_id: str = "") -> PromptInputs:
    """A piece of already-templated text with one placeholder per medium (a multi-turn tool turn),
    expanded and with its pixels, checked like a prompt. Its positions start at 0: a sequence's
    positions are computed over the whole sequence (models/trajectory.py)."""
    fam = get_family(family)
    videos, images = tuple(videos), tuple(images)
    check_media_slots(sample_id, text, len(videos), len(images), video_token=processor.video_token,
                      image_token=processor.image_token)
    video_metas, image_metas = check_media(sample_id, videos, images, fam)
    exp = expand_prompt(processor, fam, text, video_metas, image_metas, sample_id=sample_id)
    return attach_pixels(processor, _from_expansion(sample_id, text, exp, fam, video_metas, image_metas), videos, images)


class PromptBuilder:
    """``build_prompt`` (and its two halves) bound to one model directory's processor and family."""

    def __init__(self, processor: Any, family: str | ModelFamily):
        self.processor = processor
        self.family = get_family(family)
        # Callers build prompts from worker threads (the eval I/O stage, an engine's event
        # loop offloading); a fast tokenizer used by two threads at once can fail with
        # "Already borrowed", so anything that tokenizes takes turns.
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
              images: Sequence[ImageInput] = (), *, sample_id: str = "", tools: Tools = None,
              template_kwargs: Mapping[str, Any] | None = None) -> PromptInputs:
        with self._lock:
            return build_prompt(self.processor, messages, videos, images, family=self.family, sample_id=sample_id,
                                tools=tools, template_kwargs=template_kwargs)

    def expand(self, messages: str | Sequence[Mapping[str, Any]], video_metas: Sequence[VideoMetadata] = (),
               image_metas: Sequence[ImageMetadata] = (), *, sample_id: str = "", tools: Tools = None,
               template_kwargs: Mapping[str, Any] | None = None) -> PromptInputs:
        """Text-only prompt inputs from media metadata (no pixels processed)."""
        with self._lock:
            return expand(self.processor, messages, video_metas, image_metas, family=self.family,
                          sample_id=sample_id, tools=tools, template_kwargs=template_kwargs)

    @property
    def lock(self) -> threading.Lock:
        """Held by whatever tokenizes with this builder's processor (a multi-turn tool turn too)."""
        return self._lock

    # No lock below: without text the processor never touches the tokenizer.
    def pixel_tensors(self, videos: Sequence[VideoInput] = (), images: Sequence[ImageInput] = (), *,
                      sample_id: str = "") -> dict[str, Any]:
        """The pixel tensors ``build`` would give for these frames, without any text work."""
        return pixel_tensors(self.processor, videos, images, family=self.family, sample_id=sample_id)

    def attach_pixels(self, inputs: PromptInputs, videos: Sequence[VideoInput] = (),
                      images: Sequence[ImageInput] = ()) -> PromptInputs:
        """A text-only prompt from :meth:`expand` with its pixels, checked against its ids."""
        return attach_pixels(self.processor, inputs, videos, images)
