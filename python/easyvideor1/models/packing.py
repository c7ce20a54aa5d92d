"""Padding-free packing: every prompt + response of a micro-batch in one row, no pad tokens.

Each sequence keeps its own M-RoPE positions (computed by the shared builder); the causal
attention stays inside each sequence through the packed attention's ``evr1_cu_seqlens``
(models/attention.py), so the model must use ``attn_implementation=attention.register()``.
Log-probs come back in the same padded ``(B, R)`` layout as :func:`compute_log_probs`, so the
loss code does not care which path produced them. A multi-turn response keeps its own
positions, token types and loss mask, its tool media after the prompt's (models/response_rows.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from easyvideor1.models.attention import PACKED_KWARG
from easyvideor1.models.inputs import PromptInputs, check_visual_tokens
from easyvideor1.models.response_rows import (
    VISUAL_KEYS,
    media_per_row,
    response_row,
    row_trajectories,
    row_visuals,
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


def packed_log_probs(model: Any, batch: PackedBatch, *, with_entropy: bool = True) -> tuple[Any, Any]:
    """Per-token log-probs (and entropy) of the responses, padded to ``(B, R)`` float32."""
    _check_placeholders(model.config, batch)
    device = batch.input_ids.device
    # Logits at position p predict token p + 1: keep the ones before every response token.
    predict_at = torch.tensor([s - 1 + j for s, n in zip(batch.response_starts, batch.response_lengths)
                               for j in range(n)], dtype=torch.long, device=device)
    out = model(input_ids=batch.input_ids, position_ids=batch.position_ids,
                mm_token_type_ids=batch.mm_token_type_ids, use_cache=False, logits_to_keep=predict_at,
                **batch.visual, **{PACKED_KWARG: batch.cu_seqlens})
    log_softmax = torch.log_softmax(out.logits[0].float(), dim=-1)  # (N, V)
    targets = batch.input_ids[0, predict_at + 1]
    token_lp = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    token_ent = -(log_softmax.exp() * log_softmax).sum(-1) if with_entropy else None
    rows = len(batch.response_lengths)
    log_probs = torch.zeros((rows, batch.response_length), dtype=torch.float32, device=device)
    entropy = torch.zeros_like(log_probs) if with_entropy else None
    at = 0
    for row, n in enumerate(batch.response_lengths):
        log_probs[row, :n] = token_lp[at:at + n]
        if entropy is not None:
            entropy[row, :n] = token_ent[at:at + n]
        at += n
    return log_probs, entropy


def _check_placeholders(config: Any, batch: PackedBatch) -> None:
    """Per packed sequence: placeholder tokens equal its visual features (else a named error)."""
    grids = {kind: ([] if batch.visual.get(f"{kind}_grid_thw") is None
                    else batch.visual[f"{kind}_grid_thw"].tolist()) for kind in ("image", "video")}
    ids = batch.input_ids[0].tolist()
    bounds = batch.cu_seqlens.tolist()
    at = {"image": 0, "video": 0}
    for row, sample_id in enumerate(batch.sample_ids):
        ni, nv = batch.images_per_row[row], batch.videos_per_row[row]
        check_visual_tokens(sample_id, ids[bounds[row]:bounds[row + 1]], image_token_id=config.image_token_id,
                            video_token_id=config.video_token_id,
                            image_grid_thw=grids["image"][at["image"]:at["image"] + ni],
                            video_grid_thw=grids["video"][at["video"]:at["video"] + nv],
                            merge_size=config.vision_config.spatial_merge_size)
        at["image"] += ni
        at["video"] += nv
