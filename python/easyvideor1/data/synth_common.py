"""What every synthetic task shares: its configuration, its output, and random helpers.

All randomness comes from the ``numpy.random.Generator`` a task is handed, so a task's
output depends only on (seed, task name, sample index) and the configuration.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from easyvideor1.data.synth_render import PALETTE, SHAPES, Box, fmt_seconds, moving_boxes

DIRECTIONS = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
LETTERS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class SynthConfig:
    """Size of the generated media. Frames are ``size`` x ``size``; frame i is at i / fps."""

    size: int = 64
    fps: float = 8.0
    seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.size < 32 or self.size % 2:
            raise ValueError(f"size must be an even number >= 32 (H.264 4:2:0 needs even sides), got {self.size}")
        if not self.fps > 0:
            raise ValueError(f"fps must be > 0, got {self.fps}")
        if self.n_frames < 8:
            raise ValueError(f"seconds * fps must give at least 8 frames, got {self.seconds} s at {self.fps} fps")

    @property
    def n_frames(self) -> int:
        return int(round(self.seconds * self.fps))

    @property
    def last_time(self) -> float:
        return (self.n_frames - 1) / self.fps

    @property
    def mark_step(self) -> int:
        """Frames between sampled timestamps of tracking answers (about every 0.5 s)."""
        return max(1, int(round(0.5 * self.fps)))


@dataclass
class TaskInstance:
    """One generated question: its media (frames or an image, or neither) and ground truth."""

    problem_type: str
    problem: str
    answer: str
    reasoning: str
    options: tuple[str, ...] | None = None
    frames: np.ndarray | None = None  # (T, H, W, 3) uint8 for video tasks
    image: np.ndarray | None = None  # (H, W, 3) uint8 for image tasks
    info: dict[str, Any] = field(default_factory=dict)  # small facts kept in the row for checks


TaskFn = Callable[[np.random.Generator, SynthConfig], TaskInstance]


def pick(rng: np.random.Generator, items: list[str] | tuple[str, ...], k: int = 1) -> list[str]:
    return [items[int(i)] for i in rng.choice(len(items), size=k, replace=False)]


def pick_colours(rng: np.random.Generator, k: int) -> list[str]:
    return pick(rng, list(PALETTE), k)


def pick_shape(rng: np.random.Generator) -> str:
    return pick(rng, SHAPES)[0]


def shape_size(rng: np.random.Generator, cfg: SynthConfig) -> int:
    return int(rng.integers(cfg.size // 8, cfg.size // 4 + 1))


def static_box(rng: np.random.Generator, cfg: SynthConfig, side: int) -> Box:
    x, y = (int(v) for v in rng.integers(0, cfg.size - side + 1, size=2))
    return (x, y, x + side, y + side)


def far_box(rng: np.random.Generator, cfg: SynthConfig, side: int, avoid: Box, tries: int = 50) -> Box:
    """A static box that does not overlap ``avoid`` (the last draw if none is found)."""
    box = static_box(rng, cfg, side)
    for _ in range(tries):
        if not boxes_overlap(box, avoid):
            return box
        box = static_box(rng, cfg, side)
    return box


def boxes_overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def straight_motion(rng: np.random.Generator, cfg: SynthConfig, side: int, direction: str) -> tuple[Box, ...]:
    """Boxes of a shape crossing 40-80% of the free space in ``direction``, never clamped."""
    dx, dy = DIRECTIONS[direction]
    free = cfg.size - side
    travel = int(round(float(rng.uniform(0.4, 0.8)) * free))
    along = int(rng.integers(0, free - travel + 1))
    across = int(rng.integers(0, free + 1))
    start = along if (dx > 0 or dy > 0) else along + travel
    x0, y0 = (start, across) if dx else (across, start)
    speed = travel / cfg.last_time
    return moving_boxes(x0, y0, side, side, dx * speed, dy * speed, cfg.fps, cfg.n_frames, cfg.size, cfg.size)


def visible_window(rng: np.random.Generator, n_frames: int, min_len: int) -> tuple[int, int]:
    """First and last frame (inclusive) of a visibility window shorter than the video."""
    length = int(rng.integers(min_len, max(min_len, n_frames - 2) + 1))
    first = int(rng.integers(0, n_frames - length + 1))
    return first, first + length - 1


def only_during(boxes: tuple[Box, ...], first: int, last: int) -> tuple[Box | None, ...]:
    return tuple(box if first <= i <= last else None for i, box in enumerate(boxes))


def interval_answer(first: int, last: int, fps: float) -> list[float]:
    """[start, end] seconds of frames first..last: frame i is on screen from i/fps to (i+1)/fps."""
    return [float(fmt_seconds(first / fps)), float(fmt_seconds((last + 1) / fps))]


def timed_boxes(boxes: tuple[Box | None, ...], step: int, fps: float) -> dict[str, list[int]]:
    """{"<t>": box} at every ``step``-th frame where the shape is visible."""
    return {fmt_seconds(i / fps): list(box) for i, box in enumerate(boxes) if i % step == 0 and box is not None}


def choice_options(rng: np.random.Generator, correct: str, distractors: list[str], n: int = 4
                   ) -> tuple[tuple[str, ...], str]:
    """Shuffled ``("A. red", ...)`` options and the correct letter."""
    texts = [correct, *distractors[: n - 1]]
    order = [texts[int(i)] for i in rng.permutation(len(texts))]
    return tuple(f"{LETTERS[i]}. {t}" for i, t in enumerate(order)), LETTERS[order.index(correct)]


def to_json(value: Any) -> str:
    return json.dumps(value)
