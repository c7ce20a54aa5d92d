"""Small, strongly visual tasks for the CPU demo: learnable by a tiny model in minutes.

The general synthetic tasks test the whole reward surface; these isolate one visual fact
each (a big shape's colour, or when it is on screen) with a fixed question wording, so a
two-layer random-weight model can learn the mapping from pixels to answer within a few
dozen RL steps. Chance levels are exact: 1/2 for ``demo_colour``, 1/3 for ``demo_choice``,
and for ``demo_when`` the mean tIoU of the best answer that ignores the video
(:func:`demo_when_chance`: 0.381).

``demo_when`` keeps its windows on the model's own time grid: the demo samples its 4 s
videos at 2 fps and a Qwen-VL temporal patch holds two sampled frames, so the policy sees
the video in whole seconds. Windows of 1-2 such seconds can be read exactly from the frames
and are answered in whole seconds (``[1, 3]``: six tokens, where ``[0.375, 1.625]`` took ten).
One-second windows alone would lower chance to 0.25, but there the policy fell back to a
video-blind answer (seed 0: tIoU 0.25 after 80 steps, against 0.51 with both lengths).
The earlier windows, cut at source frames the sampler skipped and 5-14 of 16 frames long,
let a constant answer reach tIoU 0.66, so a run that learnt nothing from the video looked learnt.
While the square is on screen, each second of a ``demo_when`` video also shows the scene's clock
(:data:`WHEN_CLOCK`, a backdrop colour per second); the other frames keep the plain backdrop. The
window can then be read from which clock colours the video shows at all, a sum over its frames:
a two-layer model learns that, where a clock on every frame asked it to find the frames with the
square and read their colour, which 80 steps did not teach it on every seed (below).
"""

from __future__ import annotations

import numpy as np

from easyvideor1.data.synth_common import (
    DIRECTIONS,
    SynthConfig,
    TaskFn,
    TaskInstance,
    interval_answer,
    only_during,
    pick,
    straight_motion,
    to_json,
)
from easyvideor1.data.synth_render import BACKGROUND, Sprite, render_frames

DEMO_COLOURS = ("red", "green", "blue")
# The demo's videos (train/demo.py samples them at DEMO_SAMPLE_FPS): 16 frames of 4 s.
DEMO_VIDEO = SynthConfig(size=64, fps=4.0, seconds=4.0)
DEMO_SAMPLE_FPS = 2.0


def _big_square(rng: np.random.Generator, cfg: SynthConfig, colour: str) -> Sprite:
    side = int(cfg.size * 0.5)
    direction = pick(rng, list(DIRECTIONS))[0]
    return Sprite("square", colour, straight_motion(rng, cfg, side, direction))


def demo_colour(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    colour = pick(rng, ["red", "blue"])[0]
    frames = render_frames(cfg.size, cfg.size, cfg.n_frames, [_big_square(rng, cfg, colour)])
    answer = "yes" if colour == "red" else "no"
    return TaskInstance("boolean", "Is the square red? Answer yes or no.", answer,
                        f"The square is {colour}.", frames=frames, info={"colour": colour})


def demo_choice(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    index = int(rng.integers(0, len(DEMO_COLOURS)))
    colour = DEMO_COLOURS[index]
    frames = render_frames(cfg.size, cfg.size, cfg.n_frames, [_big_square(rng, cfg, colour)])
    options = tuple(f"{letter}. {name}" for letter, name in zip("ABC", DEMO_COLOURS))
    letter = "ABC"[index]
    return TaskInstance("multiple choice", "Which colour is the square?", letter,
                        f"The square is {colour}.", options=options, frames=frames, info={"colour": colour})


# The time step the tiny policy resolves (see the module docstring) and the window lengths
# in such steps: short windows keep the video-blind answer's tIoU low.
WHEN_STEP_S = 1.0
WHEN_LENGTHS = (1, 2)


def when_windows(cfg: SynthConfig) -> list[tuple[int, int]]:
    """Every possible ``(first, last)`` frame window of ``demo_when`` (inclusive), equally likely."""
    per_step = cfg.fps * WHEN_STEP_S
    if abs(per_step - round(per_step)) > 1e-9 or cfg.n_frames % round(per_step):
        raise ValueError(f"demo_when needs {WHEN_STEP_S} s steps of whole frames that tile the video, "
                         f"got {cfg.fps} fps for {cfg.seconds} s")
    per_step = round(per_step)
    steps = cfg.n_frames // per_step
    return [(start * per_step, (start + length) * per_step - 1)
            for length in WHEN_LENGTHS for start in range(steps - length + 1)]


def demo_when_chance(cfg: SynthConfig | None = None) -> float:
    """Mean tIoU of the best constant interval (on the frame grid) over :func:`when_windows`:
    what a policy that never looks at the video can reach."""
    cfg = cfg or DEMO_VIDEO
    windows = [(first, last + 1) for first, last in when_windows(cfg)]
    best = 0.0
    for lo in range(cfg.n_frames):
        for hi in range(lo + 1, cfg.n_frames + 1):
            total = sum(max(0, min(hi, b) - max(lo, a)) / (max(hi, b) - min(lo, a)) for a, b in windows)
            best = max(best, total / len(windows))
    return best


# The scene's clock: while the square is visible, the backdrop of a ``demo_when`` video takes
# one of these colours per second, the same sequence in every video. Without any clock, time
# reached the two-layer decoder only through M-RoPE positions, and 80 steps did not teach it to
# tell them apart (tIoU 0.33-0.36 against chance 0.38). With the clock on every frame, seeds
# 0-2 ended 0.51, 0.34, 0.47: reading it needs attention to the frames that hold the square.
# Lit only while the square is there, the colours present name the window (seeds 0-2: 0.54, 0.61, 0.52).
# Distinct hues, not brightness steps (a vision token's LayerNorm flattens a uniform patch's
# brightness), dim and far from the square's green. A video-blind answer is still at chance.
WHEN_CLOCK: tuple[tuple[int, int, int], ...] = ((120, 24, 24), (24, 32, 130), (120, 24, 120), (130, 90, 16))


def clock_backdrop(frames: np.ndarray, cfg: SynthConfig, first: int = 0, last: int | None = None) -> np.ndarray:
    """``frames`` with every background pixel of frames ``first..last`` (inclusive; default all)
    painted ``WHEN_CLOCK[k]``, ``k`` the frame's second."""
    per_step = round(cfg.fps * WHEN_STEP_S)
    steps = cfg.n_frames // per_step
    if steps > len(WHEN_CLOCK):
        raise ValueError(f"demo_when's clock has {len(WHEN_CLOCK)} colours, the video needs {steps} "
                         f"({cfg.seconds} s in {WHEN_STEP_S} s steps)")
    out = frames.copy()
    for i in range(first, cfg.n_frames if last is None else last + 1):
        backdrop = np.all(out[i] == BACKGROUND, axis=-1)
        out[i][backdrop] = WHEN_CLOCK[i // per_step]
    return out


def demo_when(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    windows = when_windows(cfg)
    first, last = windows[int(rng.integers(0, len(windows)))]
    square = _big_square(rng, cfg, "green")
    sprite = Sprite(square.kind, square.colour, only_during(square.boxes, first, last))
    frames = clock_backdrop(render_frames(cfg.size, cfg.size, cfg.n_frames, [sprite]), cfg, first, last)
    # Whole seconds as integers: fewer tokens for the tiny policy to get right.
    interval = [int(t) if float(t).is_integer() else t for t in interval_answer(first, last, cfg.fps)]
    return TaskInstance("temporal grounding",
                        "When is the green square visible? Answer [start, end] in seconds.", to_json(interval),
                        f"The square is visible from {interval[0]} s to {interval[1]} s.", frames=frames,
                        info={"first": first, "last": last})


DEMO_TASKS: dict[str, TaskFn] = {"demo_colour": demo_colour, "demo_choice": demo_choice, "demo_when": demo_when}
