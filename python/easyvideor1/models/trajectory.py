"""A multi-turn response: the policy's turns interleaved with tool turns that carry media.

Rollout (rollout/multi_turn.py) builds it; the trainer's forward (models/forward.py,
models/packing.py) consumes it. Everything after the prompt is one token stream,
``token_ids``; ``loss_mask`` is 1 on the tokens the policy sampled and 0 on the tool turns
(their text and vision placeholders), so the loss, the KL and the entropy cover only the
policy's own tokens while the log-probs are computed on the whole sequence. Positions are
explicit because a tool turn's vision block moves the M-RoPE position on by its extent,
not by its token count (models/rope.py). The tool media's pixel tensors follow the prompt's
in sequence order, so a row's grids match its placeholder blocks in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from easyvideor1.models.inputs import Grid, ImageInput, VideoInput


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
