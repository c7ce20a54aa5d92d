"""Prompt token ids from the chat-templated text and the media metadata only.

The HF processors of every supported family expand each ``<|image_pad|>``/``<|video_pad|>``
of the text into a string that depends only on the patch grid (and, for Qwen3-VL/Qwen3.5,
the frame indices and source fps), then tokenize the expanded text. Nothing of that needs
pixels: the grid follows from the frame count and the (already resized) height/width. So
the trainer and the rollout worker can agree on a prompt's ids, M-RoPE positions and token
types from :class:`VideoMetadata`/:class:`ImageMetadata` alone, and pixels are processed
only where a model forward needs them (``PromptBuilder.pixel_tensors``).

Expansion per family (transformers 5.19 ``processing_qwen*.py``):

- every family, images: one pad becomes ``h * w / merge**2`` pads;
- Qwen2-VL/Qwen2.5-VL, videos: one pad becomes ``t * h * w / merge**2`` pads (Qwen2.5-VL
  also reports ``second_per_grid_ts``);
- Qwen3-VL/Qwen3.5, videos: per temporal patch ``<{t:.1f} seconds>``, ``<|vision_start|>``,
  ``h * w / merge**2`` pads, ``<|vision_end|>``.

Token ids are spliced: the short unexpanded text is tokenized once and each placeholder id
is replaced by its expansion, with the timestamp texts tokenized on their own. That equals
tokenizing the expanded text whenever every inserted text is bounded by special tokens that
split the text before BPE (Qwen's templates always put ``<|vision_start|>`` before the pad).
Where that cannot be shown (another tokenizer, a hand-written prompt with text right before
a video pad) the expanded text itself is tokenized, exactly as the processor does.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.models.families import (
    IMAGE_PAD,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    ModelFamily,
    get_family,
    image_grid_thw,
    qwen3_frame_timestamps,
    timestamp_text,
    video_grid_thw,
)
from easyvideor1.models.rope import mrope_positions
from easyvideor1.video.metadata import ImageMetadata, VideoMetadata


class PlaceholderMismatchError(EasyVideoR1Error):
    """Vision placeholder tokens and visual features disagree for one sample."""


class MediaInputError(EasyVideoR1Error):
    """Frames/images or their metadata are not what the model can take."""


Grid = tuple[int, int, int]


@dataclass(frozen=True)
class ExpandedPrompt:
    """What the processor's text side gives for one prompt, computed without pixels.

    ``position_ids`` (3, L) are M-RoPE positions the original Qwen way (models/rope.py);
    ``second_per_grid_ts`` is set for Qwen2.5-VL prompts with videos (as the processor's).
    """

    prompt_ids: list[int]
    mm_token_type_ids: list[int]
    position_ids: np.ndarray
    next_position: int
    video_grid_thw: tuple[Grid, ...] = ()
    image_grid_thw: tuple[Grid, ...] = ()
    second_per_grid_ts: tuple[float, ...] | None = None
    num_video_tokens: int = 0
    num_image_tokens: int = 0


@dataclass(frozen=True)
class _Tokens:
    """The placeholder/marker strings and ids, resolved as the processor's ``__init__`` does."""

    tokenizer: Any
    image_token: str
    video_token: str
    vision_start: str
    vision_end: str
    image_id: int
    video_id: int
    start_id: int
    end_id: int


def _resolve_tokens(processor_or_tokenizer: Any) -> _Tokens:
    source = processor_or_tokenizer
    is_processor = hasattr(source, "video_processor") or hasattr(source, "image_processor")
    tok = source.tokenizer if is_processor else source

    def token(name: str, default: str) -> tuple[str, int]:
        text = getattr(source, f"{name}_token", None) or getattr(tok, f"{name}_token", None) or default
        token_id = getattr(source, f"{name}_token_id", None) or getattr(tok, f"{name}_token_id", None)
        return text, int(token_id if token_id is not None else tok.convert_tokens_to_ids(text))

    (image, image_id), (video, video_id) = token("image", IMAGE_PAD), token("video", VIDEO_PAD)
    (start, start_id), (end, end_id) = token("vision_start", VISION_START), token("vision_end", VISION_END)
    return _Tokens(tok, image, video, start, end, image_id, video_id, start_id, end_id)


def check_media_slots(sample_id: str, prompt_text: str, num_videos: int, num_images: int, *,
                      video_token: str = VIDEO_PAD, image_token: str = IMAGE_PAD) -> None:
    """Raise :class:`PlaceholderMismatchError` unless the text has one placeholder per item."""
    n_video_slots, n_image_slots = prompt_text.count(video_token), prompt_text.count(image_token)
    if n_video_slots != num_videos or n_image_slots != num_images:
        raise PlaceholderMismatchError(
            f"sample {sample_id!r}: the prompt has {n_video_slots} video and {n_image_slots} image placeholder(s) "
            f"but {num_videos} video(s) and {num_images} image(s) were given"
        )


def check_video_metadata(sample_id: str, index: int, meta: Any, family: ModelFamily) -> None:
    where = f"sample {sample_id!r} video {index}"
    if not isinstance(meta, VideoMetadata):
        raise MediaInputError(f"{where}: expected VideoMetadata, got {type(meta).__name__}")
    if meta.num_frames < 1:
        raise MediaInputError(f"{where}: metadata lists no frame indices")
    h, w = meta.height, meta.width
    if h <= 0 or w <= 0 or h % family.factor or w % family.factor:
        raise MediaInputError(f"{where}: {h}x{w} is not a multiple of the {family.name} factor {family.factor} "
                              f"(cached with factor {meta.factor}; rebuild the cache for this model family)")
    if meta.source_fps <= 0:
        raise MediaInputError(f"{where}: source fps must be > 0, got {meta.source_fps}")
    if family.time_axis == "seconds" and meta.total_frames <= 0:
        # Qwen2.5-VL's processor divides by it (sampled fps = frames / total frames * fps).
        raise MediaInputError(f"{where}: total_frames must be > 0, got {meta.total_frames}")


def check_image_metadata(sample_id: str, index: int, meta: Any, family: ModelFamily) -> None:
    where = f"sample {sample_id!r} image {index}"
    if not isinstance(meta, ImageMetadata):
        raise MediaInputError(f"{where}: expected ImageMetadata, got {type(meta).__name__}")
    h, w = meta.height, meta.width
    if h <= 0 or w <= 0 or h % family.factor or w % family.factor:
        raise MediaInputError(f"{where}: {h}x{w} is not a multiple of the {family.name} factor {family.factor}")


def seconds_per_grid(family: ModelFamily, meta: VideoMetadata) -> float:
    """Qwen2.5-VL's ``second_per_grid_ts`` entry for one video, bit for bit.

    transformers: ``temporal_patch_size / sampled_fps`` with ``sampled_fps = len(indices) /
    total_num_frames * fps`` (in that order), returned in a float32 tensor; positions were
    always computed from that float32 value, so it is rounded the same way here.
    """
    sampled_fps = len(meta.frame_indices) / meta.total_frames * meta.source_fps
    return float(np.float32(family.temporal_patch_size / sampled_fps))


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


def mm_token_type_ids(input_ids: Sequence[int], *, image_token_id: int, video_token_id: int) -> list[int]:
    """0 for text, 1 for image placeholders, 2 for video placeholders (transformers' convention)."""
    ids = np.asarray(input_ids, dtype=np.int64)
    types = np.where(ids == image_token_id, 1, np.where(ids == video_token_id, 2, 0))
    return types.tolist()


def expand_prompt(processor_or_tokenizer: Any, family: str | ModelFamily, prompt_text: str,
                  videos: Sequence[VideoMetadata] = (), images: Sequence[ImageMetadata] = (), *,
                  sample_id: str = "") -> ExpandedPrompt:
    """The processor's ``input_ids``/``mm_token_type_ids`` (and our positions) for one prompt.

    ``prompt_text`` is the chat-templated text with one placeholder per item; ``videos`` and
    ``images`` are the metadata of the (already sampled and resized) media, in placeholder
    order. Raises :class:`PlaceholderMismatchError`/:class:`MediaInputError` naming the sample.
    """
    fam = get_family(family)
    tokens = _resolve_tokens(processor_or_tokenizer)
    videos, images = tuple(videos), tuple(images)
    check_media_slots(sample_id, prompt_text, len(videos), len(images), video_token=tokens.video_token,
                      image_token=tokens.image_token)
    for i, meta in enumerate(videos):
        check_video_metadata(sample_id, i, meta, fam)
    for i, meta in enumerate(images):
        check_image_metadata(sample_id, i, meta, fam)
    video_grids = tuple(video_grid_thw(fam, m.num_frames, m.height, m.width) for m in videos)
    image_grids = tuple(image_grid_thw(fam, m.height, m.width) for m in images)
    stamps = ([qwen3_frame_timestamps(m.frame_indices, m.source_fps, fam.temporal_patch_size) for m in videos]
              if fam.per_frame_timestamps else None)
    ids = _expanded_ids(tokens, fam, prompt_text, video_grids, image_grids, stamps)

    n_image, n_video = check_visual_tokens(sample_id, ids, image_token_id=tokens.image_id,
                                           video_token_id=tokens.video_id, image_grid_thw=image_grids,
                                           video_grid_thw=video_grids, merge_size=fam.merge_size)
    seconds = tuple(seconds_per_grid(fam, m) for m in videos) if videos and fam.time_axis == "seconds" else None
    positions, next_position = mrope_positions(
        fam, ids, image_token_id=tokens.image_id, video_token_id=tokens.video_id, image_grid_thw=image_grids,
        video_grid_thw=video_grids, second_per_grid_ts=seconds, sample_id=sample_id,
    )
    return ExpandedPrompt(
        prompt_ids=ids, position_ids=positions, next_position=next_position,
        mm_token_type_ids=mm_token_type_ids(ids, image_token_id=tokens.image_id, video_token_id=tokens.video_id),
        video_grid_thw=video_grids, image_grid_thw=image_grids, second_per_grid_ts=seconds,
        num_video_tokens=n_video, num_image_tokens=n_image,
    )


def _expanded_ids(tokens: _Tokens, fam: ModelFamily, prompt_text: str, video_grids: Sequence[Grid],
                  image_grids: Sequence[Grid], stamps: list[list[float]] | None) -> list[int]:
    tok = tokens.tokenizer
    merge2 = fam.merge_size**2
    base = [int(t) for t in tok(prompt_text)["input_ids"]]
    stamp_ids: dict[str, list[int]] = {}
    if stamps:
        # One batched tokenizer call for the distinct stamps instead of one call per patch.
        texts = sorted({timestamp_text(s) for video in stamps for s in video})
        stamp_ids = dict(zip(texts, tok(texts, add_special_tokens=False)["input_ids"], strict=True))
    image_pieces = [[tokens.image_id] * (t * h * w // merge2) for t, h, w in image_grids]
    if stamps is None:
        video_pieces = [[tokens.video_id] * (t * h * w // merge2) for t, h, w in video_grids]
    else:
        video_pieces = []
        for (t, h, w), video_stamps in zip(video_grids, stamps, strict=True):
            block = [tokens.start_id] + [tokens.video_id] * (h * w // merge2) + [tokens.end_id]
            piece: list[int] = []
            for s in video_stamps[:t]:
                piece += stamp_ids[timestamp_text(s)]
                piece += block
            video_pieces.append(piece)
    spliced = _splice(tokens, base, video_pieces, image_pieces, timestamps=stamps is not None)
    if spliced is not None:
        return spliced
    return [int(t) for t in tok(_expanded_text(tokens, fam, prompt_text, video_grids, image_grids, stamps))["input_ids"]]


def _splice(tokens: _Tokens, base: list[int], video_pieces: list[list[int]], image_pieces: list[list[int]], *,
            timestamps: bool) -> list[int] | None:
    """``base`` with every placeholder id replaced by its piece, or None where that may not be exact."""
    slots = [i for i, t in enumerate(base) if t == tokens.video_id or t == tokens.image_id]
    kinds = [base[i] for i in slots]
    if kinds.count(tokens.video_id) != len(video_pieces) or kinds.count(tokens.image_id) != len(image_pieces):
        return None  # the text's placeholders did not tokenize one to one: let the processor's way decide
    if timestamps and video_pieces:
        if not _splice_safe(tokens):
            return None
        # A timestamp is inserted right after whatever precedes the video pad: exact only when
        # that is a special token (or nothing), else BPE could merge across the boundary.
        added = _added_token_ids(tokens.tokenizer)
        if any(base[i] == tokens.video_id and i > 0 and base[i - 1] not in added for i in slots):
            return None
    out: list[int] = []
    videos, images = iter(video_pieces), iter(image_pieces)
    last = 0
    for i in slots:
        out += base[last:i]
        out += next(videos) if base[i] == tokens.video_id else next(images)
        last = i + 1
    out += base[last:]
    return out


def _expanded_text(tokens: _Tokens, fam: ModelFamily, prompt_text: str, video_grids: Sequence[Grid],
                   image_grids: Sequence[Grid], stamps: list[list[float]] | None) -> str:
    """The text the processor tokenizes (``ProcessorMixin.get_text_with_replacements``)."""
    merge2 = fam.merge_size**2
    images = [tokens.image_token * (t * h * w // merge2) for t, h, w in image_grids]
    if stamps is None:
        videos = [tokens.video_token * (t * h * w // merge2) for t, h, w in video_grids]
    else:
        videos = ["".join(f"{timestamp_text(s)}{tokens.vision_start}{tokens.video_token * (h * w // merge2)}"
                          f"{tokens.vision_end}" for s in video_stamps[:t])
                  for (t, h, w), video_stamps in zip(video_grids, stamps, strict=True)]
    groups = []
    # As transformers: only modalities that have items are replaced.
    if images:
        groups.append(f"(?P<image>{re.escape(tokens.image_token)})")
    if videos:
        groups.append(f"(?P<video>{re.escape(tokens.video_token)})")
    if not groups:
        return prompt_text
    pending = {"image": iter(images), "video": iter(videos)}
    return re.sub("|".join(groups), lambda m: next(pending[m.lastgroup or ""]), prompt_text)


# Per tokenizer: may timestamp texts be spliced? Decided once (flags + a probe), then reused.
_SPLICE_SAFE: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
_ADDED_IDS: weakref.WeakKeyDictionary[Any, frozenset[int]] = weakref.WeakKeyDictionary()


def _added_token_ids(tok: Any) -> frozenset[int]:
    try:
        return _ADDED_IDS[tok]
    except (KeyError, TypeError):
        pass
    ids = frozenset(int(i) for i in getattr(tok, "added_tokens_decoder", {}))
    try:
        _ADDED_IDS[tok] = ids
    except TypeError:  # not weak-referenceable: recompute next time
        pass
    return ids


def _splice_safe(tokens: _Tokens) -> bool:
    tok = tokens.tokenizer
    try:
        return _SPLICE_SAFE[tok]
    except (KeyError, TypeError):
        pass
    safe = _probe_splice(tokens)
    try:
        _SPLICE_SAFE[tok] = safe
    except TypeError:
        pass
    return safe


def _probe_splice(tokens: _Tokens) -> bool:
    tok = tokens.tokenizer
    decoder = getattr(tok, "added_tokens_decoder", {})
    for token_id in (tokens.start_id, tokens.end_id, tokens.video_id):
        added = decoder.get(token_id)
        # A marker that strips neighbouring spaces or is matched after normalization could
        # treat the text next to it differently once a timestamp sits there.
        if added is None or getattr(added, "lstrip", False) or getattr(added, "rstrip", False) \
                or getattr(added, "normalized", False):
            return False
    # The pre-tokenizer could still treat a text differently by its place in the string
    # (e.g. a prefix space on the first piece only): compare both ways on a probe.
    stamps = ["<0.5 seconds>", "<12.3 seconds>"]
    prompt = f"Hi{tokens.vision_start}{tokens.video_token}{tokens.vision_end} there"
    full = prompt.replace(tokens.video_token, "".join(
        f"{s}{tokens.vision_start}{tokens.video_token}{tokens.vision_end}" for s in stamps))
    base = [int(t) for t in tok(prompt)["input_ids"]]
    if base.count(tokens.video_id) != 1:
        return False
    i = base.index(tokens.video_id)
    piece: list[int] = []
    for s in stamps:
        piece += [int(t) for t in tok(s, add_special_tokens=False)["input_ids"]]
        piece += [tokens.start_id, tokens.video_id, tokens.end_id]
    return base[:i] + piece + base[i + 1:] == [int(t) for t in tok(full)["input_ids"]]
