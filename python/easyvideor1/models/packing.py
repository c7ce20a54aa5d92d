"""Padding-free packing: every prompt + response of a micro-batch in one row, no pad tokens.

Each sequence keeps its own M-RoPE positions (computed by the shared builder); the causal
attention stays inside each sequence through the packed attention's ``evr1_cu_seqlens``
(models/attention.py), so the model must use ``attn_implementation=attention.register()``.
Log-probs come back in the same padded ``(B, R)`` layout as :func:`compute_log_probs`, so the
loss code does not care which path produced them. A multi-turn response keeps its own
positions, token types and loss mask, its tool media after the prompt's (models/response_rows.py).

Shared prefix (:func:`pack_shared_batch`): the rows that share a prompt (a GRPO group: its n
responses, a mix-policy group's offline response, multi-turn trajectories, whose tool turns are
part of their own segment) lay the prompt out once, then each response. Every response keeps the
positions it has in its own sequence (continuing the prompt's), attends to the whole prompt and
causally to itself (models/attention.py ``SharedLayout``), and its first token is predicted by
the prompt's last logit; so log-probs, entropy and every gradient are those of one sequence per
response, while the vision tower and the prompt's tokens run once per group. It needs a model
whose every sequence-mixing layer is attention: a recurrent (linear-attention) layer, as in
Qwen3.5, would carry one response's state into the next (:func:`shared_prefix_unsupported`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from easyvideor1.models.attention import PACKED_KWARG, SHARED_KWARG, SharedLayout
from easyvideor1.models.inputs import PromptInputs, check_visual_tokens
from easyvideor1.models.response_rows import (
    VISUAL_KEYS,
    media_per_row,
    response_row,
    row_trajectories,
    row_visuals,
    tool_media_count,
)
from easyvideor1.models.trajectory import Trajectory


@dataclass
class PackedBatch:
    input_ids: torch.Tensor  # (1, T)
    position_ids: torch.Tensor  # (3, 1, T)
    mm_token_type_ids: torch.Tensor  # (1, T)
    cu_seqlens: torch.Tensor  # (B + 1,) int32, sequence boundaries in the row
    response_starts: list[int]  # offset of each response in the row
    response_lengths: list[int]
    response_length: int  # longest response (the padded width of the outputs)
    sample_ids: list[str]
    images_per_row: list[int]
    videos_per_row: list[int]
    visual: dict[str, Any] = field(default_factory=dict)
    # Per row, 1 on the policy's tokens (None: every response token, a single-turn batch).
    loss_masks: list[list[int]] | None = None
    # Shared prefix: the attention pattern, and per row the row position whose logit predicts
    # its first response token (its prompt's last token; None: the token before the response).
    shared: SharedLayout | None = None
    first_predictors: list[int] | None = None
    # Per placeholder check: (sample id, start, end, images, videos) of each span that holds
    # its own media (a sequence, or a shared group); None: one span per sequence.
    spans: list[tuple[str, int, int, int, int]] | None = None

    @property
    def tokens(self) -> int:
        """Tokens as laid out (what the forward costs)."""
        return int(self.input_ids.shape[1])

    @property
    def response_mask(self) -> torch.Tensor:
        mask = torch.zeros((len(self.response_lengths), self.response_length), dtype=torch.long)
        for row, n in enumerate(self.response_lengths):
            mask[row, :n] = 1
        return mask

    @property
    def loss_mask(self) -> torch.Tensor:
        """``(B, R)``: the response mask without tool turns (what the loss, KL and entropy cover)."""
        if self.loss_masks is None:
            return self.response_mask
        mask = torch.zeros((len(self.response_lengths), self.response_length), dtype=torch.long)
        for row, values in enumerate(self.loss_masks):
            mask[row, :len(values)] = torch.tensor(values, dtype=torch.long)
        return mask

    @property
    def responses(self) -> torch.Tensor:
        out = torch.zeros((len(self.response_lengths), self.response_length), dtype=torch.long)
        ids = self.input_ids[0].cpu()
        for row, (start, n) in enumerate(zip(self.response_starts, self.response_lengths)):
            out[row, :n] = ids[start:start + n]
        return out

    def to(self, device: torch.device) -> PackedBatch:
        self.input_ids = self.input_ids.to(device)
        self.position_ids = self.position_ids.to(device)
        self.mm_token_type_ids = self.mm_token_type_ids.to(device)
        self.cu_seqlens = self.cu_seqlens.to(device)
        self.visual = {k: v.to(device) for k, v in self.visual.items()}
        if self.shared is not None:
            self.shared = self.shared.to(device)
        return self


def pack_forward_batch(prompts: Sequence[PromptInputs], responses: Sequence[Sequence[int]], *,
                       trajectories: Sequence[Trajectory | None] | None = None) -> PackedBatch:
    """``trajectories[row]`` (None for a single-turn row) is that row's multi-turn response."""
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(f"{len(prompts)} prompts for {len(responses)} responses")
    rows = row_trajectories(responses, trajectories)
    ids, types, positions, bounds, starts, lengths, loss_masks = [], [], [], [0], [], [], []
    for prompt, response, trajectory in zip(prompts, responses, rows):
        part = response_row(prompt, response, trajectory)
        offset = bounds[-1]
        ids.extend(prompt.prompt_ids + part.token_ids)
        types.extend(list(prompt.mm_token_type_ids) + part.mm_token_type_ids)
        positions.append(prompt.position_ids)
        if part.token_ids:
            positions.append(part.position_ids)
        starts.append(offset + len(prompt.prompt_ids))
        lengths.append(len(part.token_ids))
        bounds.append(offset + len(prompt.prompt_ids) + len(part.token_ids))
        loss_masks.append(part.loss_mask)
    images_per_row, videos_per_row = media_per_row(prompts, rows)
    visual = row_visuals(prompts, rows, VISUAL_KEYS)
    return PackedBatch(
        input_ids=torch.tensor([ids], dtype=torch.long),
        position_ids=torch.from_numpy(np.concatenate(positions, axis=1)).long().unsqueeze(1),
        mm_token_type_ids=torch.tensor([types], dtype=torch.long),
        cu_seqlens=torch.tensor(bounds, dtype=torch.int32), response_starts=starts, response_lengths=lengths,
        response_length=max(lengths) if lengths else 0, sample_ids=[p.sample_id for p in prompts],
        images_per_row=images_per_row, videos_per_row=videos_per_row, visual=visual,
        loss_masks=loss_masks if any(t is not None for t in rows) else None,
    )


def _group_rows(prompts: Sequence[PromptInputs]) -> list[list[int]]:
    """Rows with the same prompt (sample id and ids), in order of first appearance."""
    groups: dict[tuple[str, tuple[int, ...]], list[int]] = {}
    for row, prompt in enumerate(prompts):
        groups.setdefault((prompt.sample_id, tuple(prompt.prompt_ids)), []).append(row)
    return list(groups.values())


def pack_shared_batch(prompts: Sequence[PromptInputs], responses: Sequence[Sequence[int]], *,
                      trajectories: Sequence[Trajectory | None] | None = None) -> PackedBatch:
    """One packed row where the rows that share a prompt lay it out once (module docstring).
    Outputs come back per row, in the order given, as :func:`pack_forward_batch`'s."""
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(f"{len(prompts)} prompts for {len(responses)} responses")
    rows = row_trajectories(responses, trajectories)
    ids: list[int] = []
    types: list[int] = []
    positions: list[np.ndarray] = []
    seg_q, seg_keys, kinds, spans = [0], [], [], []
    starts, firsts = [0] * len(prompts), [0] * len(prompts)
    parts = [response_row(p, r, t) for p, r, t in zip(prompts, responses, rows)]
    visual_prompts, visual_rows = [], []
    for members in _group_rows(prompts):
        prompt = prompts[members[0]]
        p_start, p_len = len(ids), len(prompt.prompt_ids)
        ids.extend(prompt.prompt_ids)
        types.extend(prompt.mm_token_type_ids)
        positions.append(prompt.position_ids)
        seg_q.append(len(ids))
        seg_keys.append(np.arange(p_start, p_start + p_len))
        kinds.append(0)
        (images,), (videos,) = media_per_row([prompt], [None])
        for row in members:
            part = parts[row]
            starts[row], firsts[row] = len(ids), p_start + p_len - 1
            if not part.token_ids:
                continue
            r_start = len(ids)
            ids.extend(part.token_ids)
            types.extend(part.mm_token_type_ids)
            positions.append(part.position_ids)
            seg_q.append(len(ids))
            seg_keys.append(np.concatenate([np.arange(p_start, p_start + p_len), np.arange(r_start, len(ids))]))
            kinds.append(1)
            if rows[row] is not None:
                extra_images, extra_videos = tool_media_count(rows[row])
                images, videos = images + extra_images, videos + extra_videos
        spans.append((prompt.sample_id, p_start, len(ids), images, videos))
        # Pixels in row order: the group's prompt once, then each member's tool media.
        visual_prompts += [prompt] + [prompts[r] for r in members if rows[r] is not None]
        visual_rows += [None] + [rows[r] for r in members if rows[r] is not None]
    visual = _shared_visuals(visual_prompts, visual_rows)
    lengths = [len(p.token_ids) for p in parts]
    cu_k = np.cumsum([0] + [len(k) for k in seg_keys])
    kind = torch.tensor(kinds)
    layout = SharedLayout(
        cu_q=torch.tensor(seg_q, dtype=torch.int32), cu_k=torch.tensor(cu_k, dtype=torch.int32),
        key_index=torch.from_numpy(np.concatenate(seg_keys)).long(),
        max_q=int(np.diff(seg_q).max()), max_k=int(max(len(k) for k in seg_keys)),
        buckets=tuple(torch.nonzero(kind == k).flatten() for k in (0, 1)))
    images_per_row, videos_per_row = media_per_row(prompts, rows)
    return PackedBatch(
        input_ids=torch.tensor([ids], dtype=torch.long),
        position_ids=torch.from_numpy(np.concatenate(positions, axis=1)).long().unsqueeze(1),
        mm_token_type_ids=torch.tensor([types], dtype=torch.long),
        cu_seqlens=layout.cu_q, response_starts=starts, response_lengths=lengths,
        response_length=max(lengths), sample_ids=[p.sample_id for p in prompts],
        images_per_row=images_per_row, videos_per_row=videos_per_row, visual=visual,
        loss_masks=[p.loss_mask for p in parts] if any(t is not None for t in rows) else None,
        shared=layout, first_predictors=firsts, spans=spans,
    )


def _shared_visuals(prompts: Sequence[PromptInputs], rows: Sequence[Trajectory | None]) -> dict[str, Any]:
    """Pixels of a shared row: each entry is a prompt's (trajectory None) or a trajectory's tool media."""
    visual: dict[str, Any] = {}
    for key in VISUAL_KEYS:
        pieces = []
        for prompt, trajectory in zip(prompts, rows):
            source = prompt.tensors if trajectory is None else trajectory.tensors
            if key in source:
                value = source[key]
                pieces.append(value if isinstance(value, torch.Tensor) else torch.as_tensor(value))
        if pieces:
            visual[key] = torch.cat(pieces, dim=0)
    return visual


def shared_prefix_unsupported(config: Any) -> str | None:
    """Why a model cannot take the shared-prefix layout exactly (None: it can)."""
    text = getattr(config, "text_config", config)
    if "linear_attention" in (getattr(text, "layer_types", None) or ()):
        return (f"{getattr(config, 'model_type', 'this model')} has linear-attention (recurrent) layers: a shared "
                "row would carry one response's state into the next")
    return None


def _response_logits(model: Any, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 logits ``(N, V)`` that predict every response token, rows in order, and the targets."""
    _check_placeholders(model.config, batch)
    device = batch.input_ids.device
    firsts = batch.first_predictors or [s - 1 for s in batch.response_starts]
    # Logits at position p predict token p + 1: the row's first token is predicted at ``first``.
    predict_at = torch.tensor([first if j == 0 else s + j - 1
                               for first, s, n in zip(firsts, batch.response_starts, batch.response_lengths)
                               for j in range(n)], dtype=torch.long, device=device)
    targets = torch.tensor([t for s, n in zip(batch.response_starts, batch.response_lengths)
                            for t in range(s, s + n)], dtype=torch.long, device=device)
    layout = {SHARED_KWARG: batch.shared} if batch.shared is not None else {PACKED_KWARG: batch.cu_seqlens}
    out = model(input_ids=batch.input_ids, position_ids=batch.position_ids,
                mm_token_type_ids=batch.mm_token_type_ids, use_cache=False, logits_to_keep=predict_at,
                **batch.visual, **layout)
    return out.logits[0].float(), batch.input_ids[0, targets]


def _padded_rows(values: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """``(N, ...)`` per-token values to ``(B, R, ...)``, zeros on padding."""
    out = values.new_zeros((len(batch.response_lengths), batch.response_length, *values.shape[1:]))
    at = 0
    for row, n in enumerate(batch.response_lengths):
        out[row, :n] = values[at:at + n]
        at += n
    return out


def packed_log_probs(model: Any, batch: PackedBatch, *, with_entropy: bool = True) -> tuple[Any, Any]:
    """Per-token log-probs (and entropy) of the responses, padded to ``(B, R)`` float32."""
    logits, targets = _response_logits(model, batch)
    log_softmax = torch.log_softmax(logits, dim=-1)  # (N, V)
    token_lp = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    token_ent = -(log_softmax.exp() * log_softmax).sum(-1) if with_entropy else None
    return _padded_rows(token_lp, batch), (_padded_rows(token_ent, batch) if with_entropy else None)


def packed_response_logits(model: Any, batch: PackedBatch) -> torch.Tensor:
    """Float32 logits that predict each response position, ``(B, R, V)`` (for full-vocabulary KL)."""
    logits, _ = _response_logits(model, batch)
    return _padded_rows(logits, batch)


def _check_placeholders(config: Any, batch: PackedBatch) -> None:
    """Per span (a sequence, or a shared group): placeholder tokens equal its visual features."""
    grids = {kind: ([] if batch.visual.get(f"{kind}_grid_thw") is None
                    else batch.visual[f"{kind}_grid_thw"].tolist()) for kind in ("image", "video")}
    ids = batch.input_ids[0].tolist()
    spans = batch.spans
    if spans is None:
        bounds = batch.cu_seqlens.tolist()
        spans = [(sid, bounds[row], bounds[row + 1], batch.images_per_row[row], batch.videos_per_row[row])
                 for row, sid in enumerate(batch.sample_ids)]
    at = {"image": 0, "video": 0}
    for sample_id, start, end, ni, nv in spans:
        check_visual_tokens(sample_id, ids[start:end], image_token_id=config.image_token_id,
                            video_token_id=config.video_token_id,
                            image_grid_thw=grids["image"][at["image"]:at["image"] + ni],
                            video_grid_thw=grids["video"][at["video"]:at["video"] + nv],
                            merge_size=config.vision_config.spatial_merge_size)
        at["image"] += ni
        at["video"] += nv
