"""The response part of one trainer row, single-turn or multi-turn, for both collations.

The padded (models/forward.py) and packed (models/packing.py) layouts place a row's response
the same way: a plain response is text continuing the prompt's positions, every token in the
loss; a multi-turn response (models/trajectory.py) brings its own positions and token types
(its tool turns hold vision blocks) and its loss mask (0 on the tool turns). A row's pixel
tensors are the prompt's followed by the trajectory's tool media, so the grids stay in the
order of the row's placeholder blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from easyvideor1.models.inputs import PromptInputs
from easyvideor1.models.rope import continue_positions
from easyvideor1.models.trajectory import Trajectory

VISUAL_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


@dataclass(frozen=True)
class ResponseRow:
    token_ids: list[int]
    position_ids: np.ndarray  # (3, n)
    mm_token_type_ids: list[int]
    loss_mask: list[int]


def tool_media_count(trajectory: Trajectory) -> tuple[int, int]:
    """(images, videos) the trajectory's tool turns show."""
    return (max(len(trajectory.images), len(trajectory.image_grid_thw)),
            max(len(trajectory.videos), len(trajectory.video_grid_thw)))


def trajectory_pixels_pending(trajectory: Trajectory | None) -> bool:
    """True for a trajectory whose tool media came without pixel tensors (over the wire, by refs)."""
    return trajectory is not None and sum(tool_media_count(trajectory)) > 0 and not trajectory.tensors


def row_trajectories(responses: Sequence[Sequence[int]],
                     trajectories: Sequence[Trajectory | None] | None) -> list[Trajectory | None]:
    """One trajectory (or None) per row, checked against the row's response ids."""
    if trajectories is None:
        return [None] * len(responses)
    if len(trajectories) != len(responses):
        raise ValueError(f"{len(trajectories)} trajectories for {len(responses)} responses")
    return list(trajectories)


def response_row(prompt: PromptInputs, response: Sequence[int], trajectory: Trajectory | None) -> ResponseRow:
    ids = [int(t) for t in response]
    if trajectory is None:
        return ResponseRow(ids, continue_positions(prompt.next_position, len(ids)), [0] * len(ids), [1] * len(ids))
    where = f"sample {prompt.sample_id!r}"
    if ids != [int(t) for t in trajectory.token_ids]:
        raise ValueError(f"{where}: the response ids differ from its trajectory's token ids "
                         f"({len(ids)} vs {len(trajectory.token_ids)} tokens)")
    if ids and int(trajectory.position_ids[0, 0]) != prompt.next_position:
        raise ValueError(f"{where}: the trajectory's positions start at {int(trajectory.position_ids[0, 0])}, "
                         f"the prompt's text continues at {prompt.next_position} (a trajectory of another prompt?)")
    if trajectory_pixels_pending(trajectory):
        raise ValueError(f"{where}: the trajectory's tool media have no pixel tensors (the trainer re-fetches "
                         "them by their media refs first, train/media.py)")
    return ResponseRow(ids, np.asarray(trajectory.position_ids, dtype=np.int64),
                       [int(t) for t in trajectory.mm_token_type_ids], [int(m) for m in trajectory.loss_mask])


def media_per_row(prompts: Sequence[PromptInputs],
                  trajectories: Sequence[Trajectory | None]) -> tuple[list[int], list[int]]:
    """Images and videos per row: the prompt's, then the tool turns'."""
    images, videos = [], []
    for prompt, trajectory in zip(prompts, trajectories):
        extra_images, extra_videos = tool_media_count(trajectory) if trajectory is not None else (0, 0)
        images.append(len(prompt.images) + extra_images)
        videos.append(len(prompt.videos) + extra_videos)
    return images, videos


def row_visuals(prompts: Sequence[PromptInputs], trajectories: Sequence[Trajectory | None],
                keys: Sequence[str] = VISUAL_KEYS) -> dict[str, Any]:
    """Pixel tensors and grids of all rows, row by row (each row: prompt, then tool media)."""
    import torch

    visual: dict[str, Any] = {}
    for key in keys:
        parts = []
        for prompt, trajectory in zip(prompts, trajectories):
            if key in prompt.tensors:
                parts.append(prompt.tensors[key])
            if trajectory is not None and key in trajectory.tensors:
                parts.append(_as_tensor(trajectory.tensors[key]))
        if parts:
            visual[key] = torch.cat(parts, dim=0)
    return visual


def _as_tensor(value: Any) -> Any:
    import torch

    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
