"""The trainer's log-prob function over prompt + response with multimodal inputs.

Layout (as in common RL trainers): each row is its prompt left-padded to the longest prompt,
then its response right-padded to ``response_length``. M-RoPE positions come from
models/rope.py (the original Qwen rule, Trap 1) and are passed explicitly, so the model
never runs transformers' own ``get_rope_index``; ``mm_token_type_ids`` covers the full
length with 0 on padding and text. Log-probs and entropy are float32.

A multi-turn response (``trajectories[row]``, models/trajectory.py) keeps its own positions and
token types, its tool media follow the prompt's pixels, and ``loss_mask`` is its policy-token
mask: log-probs cover every real response token, the loss only the policy's
(models/response_rows.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from easyvideor1.models.inputs import PromptInputs, check_visual_tokens
from easyvideor1.models.response_rows import media_per_row, response_row, row_trajectories, row_visuals
from easyvideor1.models.trajectory import Trajectory

_PIXEL_KEYS = ("pixel_values", "pixel_values_videos")
_GRID_KEYS = ("image_grid_thw", "video_grid_thw", "second_per_grid_ts")


@dataclass
class ForwardBatch:
    """Tensors for one forward over ``B`` rows of ``L = prompt_length + response_length``."""

    input_ids: Any  # (B, L) int64
    attention_mask: Any  # (B, L) int64
    position_ids: Any  # (3, B, L) int64
    mm_token_type_ids: Any  # (B, L) int64
    response_mask: Any  # (B, R) int64, 1 on real response tokens (tool turns included)
    response_length: int
    sample_ids: list[str]
    images_per_row: list[int]
    videos_per_row: list[int]
    visual: dict[str, Any] = field(default_factory=dict)  # pixel tensors and grids, rows concatenated
    loss_mask: Any = None  # (B, R) int64, 1 on the policy's tokens (the response mask without tool turns)

    def __post_init__(self) -> None:
        if self.loss_mask is None:
            self.loss_mask = self.response_mask

    @property
    def responses(self) -> Any:
        return self.input_ids[:, -self.response_length:]

    def model_kwargs(self) -> dict[str, Any]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "position_ids": self.position_ids, "mm_token_type_ids": self.mm_token_type_ids, **self.visual}


def collate_forward_batch(prompts: Sequence[PromptInputs], responses: Sequence[Sequence[int]], *,
                          pad_token_id: int, response_length: int | None = None,
                          trajectories: Sequence[Trajectory | None] | None = None) -> ForwardBatch:
    """Stack prompts (left-padded) and responses (right-padded) with positions and visuals.

    ``trajectories[row]`` (None for a single-turn row) is that row's multi-turn response."""
    import torch

    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts for {len(responses)} responses")
    if not prompts:
        raise ValueError("empty batch")
    rows = row_trajectories(responses, trajectories)
    longest = max(len(r) for r in responses)
    resp_len = longest if response_length is None else response_length
    if longest > resp_len:
        raise ValueError(f"a response has {longest} tokens, more than response_length={resp_len}")
    prompt_len = max(len(p.prompt_ids) for p in prompts)
    batch, total = len(prompts), prompt_len + resp_len
    input_ids = torch.full((batch, total), pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch, total), dtype=torch.long)
    positions = torch.zeros((3, batch, total), dtype=torch.long)
    type_ids = torch.zeros((batch, total), dtype=torch.long)
    response_mask = torch.zeros((batch, resp_len), dtype=torch.long)
    loss_mask = torch.zeros((batch, resp_len), dtype=torch.long)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        p_start = prompt_len - len(prompt.prompt_ids)
        input_ids[row, p_start:prompt_len] = torch.tensor(prompt.prompt_ids)
        attention[row, p_start:prompt_len] = 1
        positions[:, row, p_start:prompt_len] = torch.from_numpy(prompt.position_ids)
        type_ids[row, p_start:prompt_len] = torch.tensor(prompt.mm_token_type_ids)
        n = len(response)
        if n:
            part = response_row(prompt, response, rows[row])
            input_ids[row, prompt_len:prompt_len + n] = torch.tensor(part.token_ids)
            attention[row, prompt_len:prompt_len + n] = 1
            positions[:, row, prompt_len:prompt_len + n] = torch.from_numpy(part.position_ids)
            type_ids[row, prompt_len:prompt_len + n] = torch.tensor(part.mm_token_type_ids)
            response_mask[row, :n] = 1
            loss_mask[row, :n] = torch.tensor(part.loss_mask)
    images_per_row, videos_per_row = media_per_row(prompts, rows)
    return ForwardBatch(
        input_ids=input_ids, attention_mask=attention, position_ids=positions, mm_token_type_ids=type_ids,
        response_mask=response_mask, response_length=resp_len, sample_ids=[p.sample_id for p in prompts],
        images_per_row=images_per_row, videos_per_row=videos_per_row,
        visual=row_visuals(prompts, rows, _PIXEL_KEYS + _GRID_KEYS), loss_mask=loss_mask,
    )


def check_batch_visual_tokens(batch: ForwardBatch, *, image_token_id: int, video_token_id: int,
                              merge_size: int) -> None:
    """Per row: placeholder tokens equal the features of that row's grids (else a named error)."""
    image_grids = batch.visual.get("image_grid_thw")
    video_grids = batch.visual.get("video_grid_thw")
    image_rows = [] if image_grids is None else image_grids.tolist()
    video_rows = [] if video_grids is None else video_grids.tolist()
    if sum(batch.images_per_row) != len(image_rows) or sum(batch.videos_per_row) != len(video_rows):
        raise ValueError(f"batch lists {sum(batch.images_per_row)} images / {sum(batch.videos_per_row)} videos "
                         f"but carries {len(image_rows)} / {len(video_rows)} grids")
    i_at = v_at = 0
    for row, sample_id in enumerate(batch.sample_ids):
        ni, nv = batch.images_per_row[row], batch.videos_per_row[row]
        ids = batch.input_ids[row][batch.attention_mask[row].bool()].tolist()
        check_visual_tokens(sample_id, ids, image_token_id=image_token_id, video_token_id=video_token_id,
                            image_grid_thw=image_rows[i_at:i_at + ni], video_grid_thw=video_rows[v_at:v_at + nv],
                            merge_size=merge_size)
        i_at, v_at = i_at + ni, v_at + nv


def compute_log_probs(model: Any, batch: ForwardBatch, *, temperature: float = 1.0,
                      with_entropy: bool = True) -> tuple[Any, Any]:
    """Per-token log-probs ``(B, R)`` of the response tokens and the policy entropy there.

    Both float32, 0 on response padding. Differentiable (call under ``torch.no_grad()`` for
    reference/old-policy passes). The visual placeholder counts are checked per row first.
    """
    import torch

    config = model.config
    check_batch_visual_tokens(batch, image_token_id=config.image_token_id, video_token_id=config.video_token_id,
                              merge_size=config.vision_config.spatial_merge_size)
    resp = batch.response_length
    # Only the logits that predict response tokens: the last prompt token's and the
    # response's own (except the final one).
    out = model(**batch.model_kwargs(), use_cache=False, logits_to_keep=resp + 1)
    logits = out.logits[:, -(resp + 1):-1, :].float()
    if temperature != 1.0:
        logits = logits / temperature
    log_softmax = torch.log_softmax(logits, dim=-1)
    targets = batch.responses.to(logits.device)
    log_probs = torch.gather(log_softmax, -1, targets.unsqueeze(-1)).squeeze(-1)
    mask = batch.response_mask.to(logits.device).bool()
    log_probs = log_probs.masked_fill(~mask, 0.0)
    if not with_entropy:
        return log_probs, None
    entropy = -(log_softmax.exp() * log_softmax).sum(-1).masked_fill(~mask, 0.0)
    return log_probs, entropy


def response_logits(model: Any, batch: ForwardBatch) -> Any:
    """Float32 logits that predict each response position, ``(B, R, V)`` (for full-vocabulary KL)."""
    resp = batch.response_length
    out = model(**batch.model_kwargs(), use_cache=False, logits_to_keep=resp + 1)
    return out.logits[:, -(resp + 1):-1, :].float()


def response_log_probs_numpy(log_probs: Any, batch: ForwardBatch) -> list[np.ndarray]:
    """Unpadded per-row arrays of response log-probs (for comparisons and logging)."""
    lengths = batch.response_mask.sum(-1).tolist()
    values = log_probs.detach().float().cpu().numpy()
    return [values[row, :n] for row, n in enumerate(lengths)]
