"""M-RoPE position ids computed the original Qwen way, for every family.

Each vision block gets 3-D positions (time, row, column) offset by the position where it
starts; the text after a block continues at ``max(t, h, w position) + 1``. That is what the
original Qwen code and vLLM do. transformers 5.19's ``get_rope_index`` for Qwen2-VL and
Qwen2.5-VL instead advances by ``max(h, w)`` only, ignoring the temporal extent of a
multi-frame video, so its positions after a video differ from vLLM's (Trap 1 in
docs/models.md). We therefore compute positions here and pass them to the model explicitly.

Time positions: Qwen2-VL uses the temporal patch index; Qwen2.5-VL scales it by
``tokens_per_second * second_per_grid_t`` and truncates to an integer; Qwen3-VL/Qwen3.5
split a video into one block per temporal patch (separated by timestamp text), each with
time position 0 relative to its start.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.models.families import ModelFamily, get_family


class PositionError(EasyVideoR1Error):
    """Vision placeholders in a sequence do not fit the grids given for it."""


def _block_positions(start: int, t: int, h: int, w: int, t_factor: float) -> np.ndarray:
    grid = np.indices((t, h, w)).reshape(3, -1)
    if t_factor != 1.0:
        # Same float64 multiply-then-truncate as vLLM, so both round identically.
        grid[0] = (np.indices((t, h, w))[0].reshape(-1) * t_factor).astype(np.int64)
    return grid + start


def mrope_positions(family: str | ModelFamily, input_ids: Sequence[int], *, image_token_id: int,
                    video_token_id: int, image_grid_thw: Sequence[Sequence[int]] = (),
                    video_grid_thw: Sequence[Sequence[int]] = (),
                    second_per_grid_ts: Sequence[float] | None = None,
                    sample_id: str = "") -> tuple[np.ndarray, int]:
    """Positions ``(3, L)`` int64 for ``input_ids`` and the position where text continues.

    ``image_grid_thw``/``video_grid_thw`` are the processor's patch grids in the order the
    items appear in the sequence. Raises :class:`PositionError` when the placeholder runs do
    not match the grids (wrong count or a run of the wrong length).
    """
    fam = get_family(family)
    merge = fam.merge_size
    ids = np.asarray(list(input_ids), dtype=np.int64)
    length = len(ids)
    positions = np.zeros((3, length), dtype=np.int64)
    blocks = _vision_blocks(fam, image_grid_thw, video_grid_thw, second_per_grid_ts)
    pending = {image_token_id: blocks["image"], video_token_id: blocks["video"]}
    used = {image_token_id: 0, video_token_id: 0}
    next_pos = 0
    i = 0
    while i < length:
        token = int(ids[i])
        if token not in pending:
            run_end = i + 1
            while run_end < length and int(ids[run_end]) not in pending:
                run_end += 1
            positions[:, i:run_end] = np.arange(next_pos, next_pos + run_end - i)
            next_pos += run_end - i
            i = run_end
            continue
        kind = "image" if token == image_token_id else "video"
        queue = pending[token]
        if used[token] >= len(queue):
            raise PositionError(f"sample {sample_id!r}: more {kind} placeholder blocks than {kind} grids "
                                f"({len(queue)} block(s) expected)")
        t, h, w, t_factor = queue[used[token]]
        used[token] += 1
        n = t * (h // merge) * (w // merge)
        run = ids[i:i + n]
        if len(run) != n or not np.all(run == token):
            raise PositionError(f"sample {sample_id!r}: a {kind} block needs {n} consecutive placeholder tokens "
                                f"at offset {i}, found a run that does not match")
        block = _block_positions(next_pos, t, h // merge, w // merge, t_factor)
        positions[:, i:i + n] = block
        next_pos = int(block.max()) + 1
        i += n
    for token, queue in pending.items():
        if used[token] != len(queue):
            kind = "image" if token == image_token_id else "video"
            raise PositionError(f"sample {sample_id!r}: {len(queue)} {kind} block(s) expected from the grids, "
                                f"{used[token]} found in the sequence")
    return positions, next_pos


def _vision_blocks(fam: ModelFamily, image_grid_thw: Sequence[Sequence[int]],
                   video_grid_thw: Sequence[Sequence[int]],
                   second_per_grid_ts: Sequence[float] | None) -> dict[str, list[tuple[int, int, int, float]]]:
    images = [(int(g[0]), int(g[1]), int(g[2]), 1.0) for g in image_grid_thw]
    videos: list[tuple[int, int, int, float]] = []
    for index, g in enumerate(video_grid_thw):
        t, h, w = (int(x) for x in g)
        if fam.per_frame_timestamps:
            videos.extend((1, h, w, 1.0) for _ in range(t))
        elif fam.time_axis == "seconds":
            seconds = 1.0 if second_per_grid_ts is None else float(second_per_grid_ts[index])
            videos.append((t, h, w, seconds * fam.tokens_per_second))
        else:
            videos.append((t, h, w, 1.0))
    return {"image": images, "video": videos}


def continue_positions(next_position: int, count: int) -> np.ndarray:
    """Positions ``(3, count)`` of ``count`` text tokens appended after a prompt."""
    return np.broadcast_to(np.arange(next_position, next_position + count, dtype=np.int64), (3, count)).copy()
