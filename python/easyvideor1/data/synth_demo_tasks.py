"""Small, strongly visual tasks for the CPU demo: learnable by a tiny model in minutes.

The general synthetic tasks test the whole reward surface; these isolate one visual fact
each (a big shape's colour, or when it is on screen) with a fixed question wording, so a
two-layer random-weight model can learn the mapping from pixels to answer within a few
dozen RL steps. Chance levels are exact: 1/2 for ``demo_colour``, 1/3 for ``demo_choice``.
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
    visible_window,
)
from easyvideor1.data.synth_render import Sprite, render_frames

DEMO_COLOURS = ("red", "green", "blue")


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


def demo_when(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    first, last = visible_window(rng, cfg.n_frames, max(2, cfg.n_frames // 3))
    square = _big_square(rng, cfg, "green")
    sprite = Sprite(square.kind, square.colour, only_during(square.boxes, first, last))
    frames = render_frames(cfg.size, cfg.size, cfg.n_frames, [sprite])
    interval = interval_answer(first, last, cfg.fps)
    return TaskInstance("temporal grounding",
                        "When is the green square visible? Answer [start, end] in seconds.", to_json(interval),
                        f"The square is visible from {interval[0]} s to {interval[1]} s.", frames=frames,
                        info={"first": first, "last": last})


DEMO_TASKS: dict[str, TaskFn] = {"demo_colour": demo_colour, "demo_choice": demo_choice, "demo_when": demo_when}
