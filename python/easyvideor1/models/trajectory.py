"""A multi-turn response: the policy's turns interleaved with tool turns that carry media.

Rollout (rollout/multi_turn.py) builds it; the trainer's forward (models/forward.py,
models/packing.py) consumes it. Everything after the prompt is one token stream,
``token_ids``; ``loss_mask`` is 1 on the tokens the policy sampled and 0 on the tool turns
(their text and vision placeholders), so the loss, the KL and the entropy cover only the
policy's own tokens while the log-probs are computed on the whole sequence. Positions are
explicit because a tool turn's vision block moves the M-RoPE position on by its extent,
not by its token count (models/rope.py). The tool media's pixel tensors follow the prompt's
in sequence order, so a row's grids match its placeholder blocks in order.

:class:`TrajectoryBuilder` grows one during a rollout and gives the full-sequence
:class:`PromptInputs` (prompt + trajectory so far) an engine continues from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.models.expansion import mm_token_type_ids
from easyvideor1.models.families import get_family
from easyvideor1.models.inputs import (
    PIXEL_KEYS,
    Grid,
    ImageInput,
    PromptBuilder,
    PromptInputs,
    VideoInput,
    build_segment,
)
from easyvideor1.models.rope import PositionError, mrope_positions
from easyvideor1.video.metadata import ImageMetadata, VideoMetadata


@dataclass
class Trajectory:
    token_ids: list[int]  # every id after the prompt: policy turns and tool turns
    loss_mask: list[int]  # 1 where the policy sampled the token, 0 on tool turns
    position_ids: np.ndarray  # (3, len(token_ids)) M-RoPE positions continuing the prompt's
    mm_token_type_ids: list[int]  # per token: 0 text, 1 image, 2 video (as the prompt's)
    next_position: int  # where text would continue after the last token
    tensors: dict[str, Any] = field(default_factory=dict)  # the tool media's pixel tensors and grids
    videos: tuple[VideoInput, ...] = ()
    images: tuple[ImageInput, ...] = ()
    video_grid_thw: tuple[Grid, ...] = ()
    image_grid_thw: tuple[Grid, ...] = ()
    second_per_grid_ts: tuple[float, ...] | None = None
    media_refs: tuple[dict[str, Any], ...] = ()  # ToolOutcome.refs of every tool medium, in order
    # What the rollout did, for metrics.
    turns: int = 1  # policy turns
    tool_calls: int = 0  # calls the policy made (valid or not)
    tool_errors: int = 0  # calls answered with an error message
    frames_fetched: int = 0  # frames (and crops) the tool returned
    final_text: str = ""  # the last policy turn's text: what the answer scorers see

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.mm_token_type_ids) != n or self.position_ids.shape != (3, n):
            raise ValueError(f"trajectory of {n} tokens has a loss mask of {len(self.loss_mask)}, token types of "
                             f"{len(self.mm_token_type_ids)} and positions of shape {self.position_ids.shape}")

    @property
    def policy_tokens(self) -> int:
        return int(sum(self.loss_mask))


class TrajectoryError(EasyVideoR1Error):
    """A segment cannot be appended to a trajectory (vision tokens in sampled ids, bad media)."""


@dataclass
class _Media:
    """The media of the tool turns so far, in sequence order per kind."""

    videos: list[VideoInput] = field(default_factory=list)
    images: list[ImageInput] = field(default_factory=list)
    video_metas: list[VideoMetadata] = field(default_factory=list)
    image_metas: list[ImageMetadata] = field(default_factory=list)
    video_grids: list[Grid] = field(default_factory=list)
    image_grids: list[Grid] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # Qwen2.5-VL's second_per_grid_ts of tool videos
    tensors: list[dict[str, Any]] = field(default_factory=list)  # one dict per tool turn
    refs: list[dict[str, Any]] = field(default_factory=list)
    video_tokens: int = 0
    image_tokens: int = 0


class TrajectoryBuilder:
    """Grows one trajectory after a prompt: policy segments (loss 1) and tool segments (loss 0).

    Token ids are never re-derived from text: a policy segment is the sampled ids as they are,
    a tool segment is its text expanded for its media by the prompt builder's own code
    (models/expansion.py: Qwen3-VL's per-frame timestamps included). Positions are computed
    over prompt + trajectory with models/rope.py and the prompt's part is checked against the
    prompt's own, so every vision block, the prompt's and the tools', sits where the processor
    of the whole conversation would put it. ``placeholder_ids`` keep one unexpanded
    placeholder per medium: what vLLM takes to continue (it expands them itself).
    """

    def __init__(self, builder: PromptBuilder, prompt: PromptInputs):
        if prompt.family is None:
            raise TrajectoryError(f"sample {prompt.sample_id!r}: prompt inputs without a family cannot start a "
                                  "trajectory")
        self.builder = builder
        self.prompt = prompt
        self.family = get_family(prompt.family)
        processor = builder.processor
        self._image_id, self._video_id = int(processor.image_token_id), int(processor.video_token_id)
        if prompt.placeholder_ids is not None:
            prompt_placeholders = list(prompt.placeholder_ids)
        elif prompt.num_videos + prompt.num_images == 0:
            prompt_placeholders = list(prompt.prompt_ids)
        else:
            # What the expansion started from (models/expansion.py tokenizes the templated text).
            with builder.lock:
                prompt_placeholders = [int(t) for t in builder.tokenizer(prompt.prompt_text)["input_ids"]]
        self._prompt_placeholders = prompt_placeholders
        self.token_ids: list[int] = []
        self.placeholder_ids: list[int] = []  # after the prompt, unexpanded
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []  # aligned to token_ids; 0.0 on tool tokens
        self.texts: list[str] = []  # each segment's text (policy ones decoded with their special tokens)
        self.media = _Media()
        self.turns = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.frames_fetched = 0
        self.final_text = ""

    def __len__(self) -> int:
        return len(self.token_ids)

    def add_policy(self, token_ids: Sequence[int], logprobs: Sequence[float] | None = None, *, text: str) -> None:
        """A policy turn: the sampled ids (loss 1) and their log-probs; ``text`` is what the
        answer scorers see if this turn is the last."""
        ids = [int(t) for t in token_ids]
        if logprobs is not None and len(logprobs) != len(ids):
            raise TrajectoryError(f"sample {self.prompt.sample_id!r}: {len(logprobs)} log-probs for {len(ids)} "
                                  "sampled tokens")
        if self._image_id in ids or self._video_id in ids:
            raise TrajectoryError(f"sample {self.prompt.sample_id!r}: a policy turn holds a vision placeholder "
                                  "token (sampling must forbid them)")
        with self.builder.lock:
            decoded = self.builder.tokenizer.decode(ids, skip_special_tokens=False)
        self.token_ids += ids
        self.placeholder_ids += ids
        self.loss_mask += [1] * len(ids)
        self.logprobs += [float(x) for x in logprobs] if logprobs is not None else [0.0] * len(ids)
        self.texts.append(decoded)
        self.turns += 1
        self.final_text = text

    def tool_segment(self, text: str, videos: Sequence[VideoInput] = (),
                     images: Sequence[ImageInput] = ()) -> PromptInputs:
        """``text`` (one placeholder per medium) expanded, with its pixels: what :meth:`add_tool`
        appends. Separate so a caller can check its length against a budget first."""
        with self.builder.lock:
            return build_segment(self.builder.processor, text, videos, images, family=self.family,
                                 sample_id=self.prompt.sample_id)

    def add_tool(self, segment: PromptInputs, *, refs: Sequence[dict[str, Any]] = (), error: bool = False) -> None:
        """A tool turn (loss 0) from :meth:`tool_segment`; counts one call (and an error if refused)."""
        with self.builder.lock:
            placeholders = [int(t) for t in self.builder.tokenizer(segment.prompt_text)["input_ids"]]
        self.token_ids += segment.prompt_ids
        self.placeholder_ids += placeholders
        self.loss_mask += [0] * len(segment.prompt_ids)
        self.logprobs += [0.0] * len(segment.prompt_ids)
        self.texts.append(segment.prompt_text)
        m = self.media
        m.videos += segment.videos
        m.images += segment.images
        m.video_metas += segment.video_metadata
        m.image_metas += segment.image_metadata
        m.video_grids += segment.video_grid_thw
        m.image_grids += segment.image_grid_thw
        m.seconds += segment.second_per_grid_ts or ()
        m.tensors.append(segment.tensors)
        m.refs += [dict(r) for r in refs]
        m.video_tokens += segment.num_video_tokens
        m.image_tokens += segment.num_image_tokens
        self.tool_calls += 1
        self.tool_errors += int(error)
        self.frames_fetched += sum(int(v.frames.shape[0]) for v in segment.videos) + len(segment.images)

    def _seconds(self) -> tuple[float, ...] | None:
        if self.family.time_axis != "seconds" or self.prompt.num_videos + len(self.media.videos) == 0:
            return None
        return tuple(self.prompt.second_per_grid_ts or ()) + tuple(self.media.seconds)

    def _positions(self) -> tuple[np.ndarray, int]:
        p, m = self.prompt, self.media
        positions, next_position = mrope_positions(
            self.family, list(p.prompt_ids) + self.token_ids, image_token_id=self._image_id,
            video_token_id=self._video_id, image_grid_thw=list(p.image_grid_thw) + m.image_grids,
            video_grid_thw=list(p.video_grid_thw) + m.video_grids, second_per_grid_ts=self._seconds(),
            sample_id=p.sample_id,
        )
        length = len(p.prompt_ids)
        if not np.array_equal(positions[:, :length], p.position_ids):
            raise PositionError(f"sample {p.sample_id!r}: the positions of prompt + trajectory differ from the "
                                "prompt's own on the prompt")
        return positions, next_position

    def trajectory(self) -> Trajectory:
        positions, next_position = self._positions()
        m = self.media
        tool_seconds = tuple(m.seconds) if self.family.time_axis == "seconds" and m.videos else None
        return Trajectory(
            token_ids=list(self.token_ids), loss_mask=list(self.loss_mask),
            position_ids=positions[:, len(self.prompt.prompt_ids):].copy(),
            mm_token_type_ids=mm_token_type_ids(self.token_ids, image_token_id=self._image_id,
                                                video_token_id=self._video_id),
            next_position=next_position, tensors=merge_tensors(m.tensors), videos=tuple(m.videos),
            images=tuple(m.images), video_grid_thw=tuple(m.video_grids), image_grid_thw=tuple(m.image_grids),
            second_per_grid_ts=tool_seconds, media_refs=tuple(m.refs), turns=self.turns, tool_calls=self.tool_calls,
            tool_errors=self.tool_errors, frames_fetched=self.frames_fetched, final_text=self.final_text,
        )

    def full_inputs(self) -> PromptInputs:
        """Prompt + trajectory so far as one prompt an engine continues from (exactly these ids).

        Pixel tensors are the prompt's followed by the tool turns', per key, in sequence order;
        a prompt whose pixels are pending (text-only) gives a text-only result too.
        """
        p, m = self.prompt, self.media
        positions, next_position = self._positions()
        ids = list(p.prompt_ids) + self.token_ids
        tensors = {} if p.pixels_pending else merge_tensors([p.tensors, *m.tensors])
        return PromptInputs(
            sample_id=p.sample_id, prompt_text=p.prompt_text + "".join(self.texts), prompt_ids=ids,
            mm_token_type_ids=mm_token_type_ids(ids, image_token_id=self._image_id, video_token_id=self._video_id),
            position_ids=positions, next_position=next_position, tensors=tensors,
            videos=tuple(p.videos) + tuple(m.videos), images=tuple(p.images) + tuple(m.images),
            num_video_tokens=p.num_video_tokens + m.video_tokens, num_image_tokens=p.num_image_tokens + m.image_tokens,
            family=self.family, video_metadata=tuple(p.video_metadata) + tuple(m.video_metas),
            image_metadata=tuple(p.image_metadata) + tuple(m.image_metas),
            video_grid_thw=tuple(p.video_grid_thw) + tuple(m.video_grids),
            image_grid_thw=tuple(p.image_grid_thw) + tuple(m.image_grids), second_per_grid_ts=self._seconds(),
            placeholder_ids=self._prompt_placeholders + self.placeholder_ids,
        )


def merge_tensors(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pixel tensors of several inputs as one sequence's: each key's rows concatenated in order."""
    import torch

    merged: dict[str, Any] = {}
    for key in PIXEL_KEYS:
        pieces = [part[key] for part in parts if part.get(key) is not None]
        if pieces:
            merged[key] = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)
    return merged
