"""Synthetic video tasks, one function per problem type.

Each task fixes its sprites' boxes per frame, renders exactly those, and derives the
answer from the same boxes, so the ground truth is exact by construction.
"""

from __future__ import annotations

import numpy as np

from easyvideor1.data.synth_common import (
    DIRECTIONS,
    SynthConfig,
    TaskFn,
    TaskInstance,
    choice_options,
    far_box,
    interval_answer,
    only_during,
    pick,
    pick_colours,
    pick_shape,
    shape_size,
    static_box,
    straight_motion,
    timed_boxes,
    to_json,
    visible_window,
)
from easyvideor1.data.synth_render import (
    PALETTE,
    Sprite,
    TextItem,
    fmt_seconds,
    moving_boxes,
    place_text,
    render_frames,
)
from easyvideor1.data.synth_words import random_text


def _frames(cfg: SynthConfig, sprites: list[Sprite], texts: tuple[TextItem, ...] = ()) -> np.ndarray:
    return render_frames(cfg.size, cfg.size, cfg.n_frames, sprites, texts)


def _static(kind: str, colour: str, box, cfg: SynthConfig) -> Sprite:
    return Sprite(kind, colour, (box,) * cfg.n_frames)


def multiple_choice(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    moving_c, still_c, *others = pick_colours(rng, 4)
    kind, direction = pick_shape(rng), pick(rng, list(DIRECTIONS))[0]
    side = shape_size(rng, cfg)
    moving = Sprite(kind, moving_c, straight_motion(rng, cfg, side, direction))
    still = _static(pick_shape(rng), still_c, static_box(rng, cfg, shape_size(rng, cfg)), cfg)
    options, letter = choice_options(rng, moving_c, [still_c, *others])
    return TaskInstance(
        "multiple choice", f"Which colour is the moving {kind}?", letter,
        f"The {still_c} {still.kind} stays still while the {moving_c} {kind} moves {direction}, "
        f"so the moving {kind} is {moving_c}: option {letter}.",
        options=options, frames=_frames(cfg, [still, moving]),
        info={"colour": moving_c, "direction": direction})


def numerical(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    """A shape flashes k times: k on-runs of >= 2 frames separated by off-runs of >= 2 frames."""
    colour, kind = pick_colours(rng, 1)[0], pick_shape(rng)
    max_k = min(5, (cfg.n_frames + 2) // 4)
    k = int(rng.integers(1, max_k + 1))
    minimums = [0] + [2] * (2 * k - 1) + [0]  # lead, on, gap, on, ..., on, trail
    runs = np.array(minimums) + rng.multinomial(cfg.n_frames - sum(minimums), [1 / len(minimums)] * len(minimums))
    box = static_box(rng, cfg, shape_size(rng, cfg))
    boxes = []
    for slot, length in enumerate(runs):
        boxes.extend([box if slot % 2 == 1 else None] * int(length))
    sprite = Sprite(kind, colour, tuple(boxes))
    return TaskInstance(
        "numerical", f"How many times does the {colour} {kind} flash on (appear) in the video? "
                     "Answer with a number.", str(k),
        f"The {colour} {kind} appears, disappears and appears again; counting its appearances gives {k}.",
        frames=_frames(cfg, [sprite]), info={"count": k, "colour": colour})


_EDGE_OF = {"right": ("right", 2), "left": ("left", 0), "down": ("bottom", 3), "up": ("top", 1)}


def regression(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    """When does a shape moving at constant speed first touch an edge?"""
    colour, kind, direction = pick_colours(rng, 1)[0], pick_shape(rng), pick(rng, list(DIRECTIONS))[0]
    side = shape_size(rng, cfg)
    edge, coord = _EDGE_OF[direction]
    hit = int(rng.integers(cfg.n_frames // 4, cfg.n_frames - 1))
    free = cfg.size - side
    start = int(rng.integers(0, free // 4 + 1))
    dx, dy = DIRECTIONS[direction]
    speed = (free - start) / (hit / cfg.fps)
    x0 = (start if dx > 0 else free - start) if dx else int(rng.integers(0, free + 1))
    y0 = (start if dy > 0 else free - start) if dy else int(rng.integers(0, free + 1))
    boxes = moving_boxes(x0, y0, side, side, dx * speed, dy * speed, cfg.fps, cfg.n_frames, cfg.size, cfg.size)
    limit = cfg.size if coord >= 2 else 0
    first = next(i for i, b in enumerate(boxes) if b[coord] == limit)
    t = fmt_seconds(first / cfg.fps)
    return TaskInstance(
        "regression", f"The {colour} {kind} moves toward the {edge} edge of the frame. At what time, in seconds, "
                      "does it first touch that edge? Answer with a number.", t,
        f"The {kind} moves {direction} at a constant speed and first touches the {edge} edge "
        f"in the frame at {t} s.",
        frames=_frames(cfg, [Sprite(kind, colour, boxes)]), info={"edge": edge, "frame": first})


def boolean(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    colour, kind = pick_colours(rng, 1)[0], pick_shape(rng)
    actual = pick(rng, list(DIRECTIONS))[0]
    asked = actual if rng.random() < 0.5 else pick(rng, [d for d in DIRECTIONS if d != actual])[0]
    sprite = Sprite(kind, colour, straight_motion(rng, cfg, shape_size(rng, cfg), actual))
    answer = "yes" if asked == actual else "no"
    return TaskInstance(
        "boolean", f"Does the {colour} {kind} move {asked}? Answer yes or no.", answer,
        f"The {colour} {kind} moves {actual}, so the answer is {answer}.",
        frames=_frames(cfg, [sprite]), info={"direction": actual, "asked": asked})


def temporal_grounding(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    target_c, other_c = pick_colours(rng, 2)
    kind = pick_shape(rng)
    first, last = visible_window(rng, cfg.n_frames, 3)
    box = static_box(rng, cfg, shape_size(rng, cfg))
    other = _static(pick_shape(rng), other_c, far_box(rng, cfg, shape_size(rng, cfg), box), cfg)
    target = Sprite(kind, target_c, only_during((box,) * cfg.n_frames, first, last))
    span = interval_answer(first, last, cfg.fps)
    return TaskInstance(
        "temporal grounding", f"During which time interval is the {target_c} {kind} visible? "
                              "Answer with [start, end] in seconds.", to_json(span),
        f"The {target_c} {kind} appears at {span[0]} s and is gone from {span[1]} s on.",
        frames=_frames(cfg, [other, target]), info={"colour": target_c, "frames": [first, last]})


def spatial_grounding(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    target_c, other_c = pick_colours(rng, 2)
    kind = pick_shape(rng)
    box = static_box(rng, cfg, shape_size(rng, cfg))
    # The distractor moves (and may pass behind the target), which makes this a video task.
    other = Sprite(pick_shape(rng), other_c, straight_motion(rng, cfg, shape_size(rng, cfg),
                                                             pick(rng, list(DIRECTIONS))[0]))
    target = _static(kind, target_c, box, cfg)
    return TaskInstance(
        "spatial grounding", f"The {target_c} {kind} does not move. Give its bounding box as "
                             "[x1, y1, x2, y2] in pixels.", to_json(list(box)),
        f"The {target_c} {kind} spans x from {box[0]} to {box[2]} and y from {box[1]} to {box[3]}.",
        frames=_frames(cfg, [other, target]), info={"colour": target_c, "kind": kind})


def spatial_temporal_grounding(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    target_c, other_c = pick_colours(rng, 2)
    kind, direction = pick_shape(rng), pick(rng, list(DIRECTIONS))[0]
    step = cfg.mark_step
    first, last = visible_window(rng, cfg.n_frames, step + 1)  # holds at least one marked frame
    boxes = only_during(straight_motion(rng, cfg, shape_size(rng, cfg), direction), first, last)
    other = _static(pick_shape(rng), other_c, static_box(rng, cfg, shape_size(rng, cfg)), cfg)
    answer = {"time": interval_answer(first, last, cfg.fps), "boxes": timed_boxes(boxes, step, cfg.fps)}
    every = fmt_seconds(step / cfg.fps)
    return TaskInstance(
        "spatial-temporal grounding",
        f"When is the {target_c} {kind} visible, and where is it? Answer with JSON "
        f'{{"time": [start, end], "boxes": {{"<t>": [x1, y1, x2, y2]}}}} giving its box in pixels at every '
        f"multiple of {every} s while it is visible.", to_json(answer),
        f"The {target_c} {kind} is visible from {answer['time'][0]} s to {answer['time'][1]} s while moving "
        f"{direction}; its boxes at the marked times are " + ", ".join(
            f"{t} s: {b}" for t, b in answer["boxes"].items()) + ".",
        frames=_frames(cfg, [other, Sprite(kind, target_c, boxes)]), info={"colour": target_c, "kind": kind})


def tracking(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    target_c, other_c = pick_colours(rng, 2)
    kind = pick_shape(rng)
    side = shape_size(rng, cfg)
    # Diagonal motion: both coordinates change, so a tracker must follow x and y.
    vx, vy = (float(rng.choice([-1, 1]) * rng.uniform(0.2, 0.4) * cfg.size / cfg.last_time) for _ in range(2))
    x0, y0 = (int(rng.integers(0, cfg.size - side + 1)) for _ in range(2))
    boxes = moving_boxes(x0, y0, side, side, vx, vy, cfg.fps, cfg.n_frames, cfg.size, cfg.size)
    other = _static(pick_shape(rng), other_c, static_box(rng, cfg, shape_size(rng, cfg)), cfg)
    answer = timed_boxes(boxes, cfg.mark_step, cfg.fps)
    times = ", ".join(answer)
    return TaskInstance(
        "tracking", f"Track the {target_c} {kind}: give its bounding box [x1, y1, x2, y2] in pixels at "
                    f"t = {times} s, as JSON {{\"<t>\": [x1, y1, x2, y2]}}.", to_json(answer),
        f"Following the {target_c} {kind} frame by frame: " + ", ".join(
            f"{t} s: {b}" for t, b in answer.items()) + ".",
        frames=_frames(cfg, [other, Sprite(kind, target_c, boxes)]), info={"colour": target_c, "kind": kind})


def ocr(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    text, item = ocr_text_item(rng, cfg, first=0, last=cfg.n_frames - 1)
    return TaskInstance(
        "ocr", "What text is written in the video? Answer with the text exactly.", text,
        f"The frames show the text '{text}'.", frames=_frames(cfg, [], (item,)),
        info={"xy": list(item.xy), "font_size": item.font_size})


def ocr_text_item(rng: np.random.Generator, cfg: SynthConfig, first: int, last: int) -> tuple[str, TextItem]:
    """A random word or number, as large as fits (DejaVu Sans), at a random spot."""
    text = random_text(rng)
    colour = pick(rng, [c for c in PALETTE if c != "blue"])[0]  # blue is too dark to read on black
    font_size = cfg.size // 4
    while True:
        try:
            xy = place_text(text, font_size, cfg.size, cfg.size, rng)
            break
        except ValueError:
            if font_size <= 8:
                raise
            font_size -= 1
    return text, TextItem(text, xy, font_size, colour, first, last)


def math(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    a, b = (int(v) for v in rng.integers(1, 10, size=2))
    op = pick(rng, ["sum", "product"])[0]
    result = a + b if op == "sum" else a * b
    half = cfg.n_frames // 2
    colour = pick(rng, [c for c in PALETTE if c != "blue"])[0]
    size = cfg.size // 2
    items = []
    for digit, first, last in ((a, 0, half - 1), (b, half, cfg.n_frames - 1)):
        items.append(TextItem(str(digit), place_text(str(digit), size, cfg.size, cfg.size, rng), size, colour,
                              first, last))
    sign = "+" if op == "sum" else "*"
    return TaskInstance(
        "math", f"Two digits are shown one after the other. What is their {op}? Answer with a number.",
        str(result), f"The first digit is {a} and the second is {b}; {a} {sign} {b} = {result}.",
        frames=_frames(cfg, [], tuple(items)),
        info={"digits": [a, b], "op": op, "xy": [list(i.xy) for i in items], "font_size": size})


def open_ended(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    colour, kind, direction = pick_colours(rng, 1)[0], pick_shape(rng), pick(rng, list(DIRECTIONS))[0]
    sprite = Sprite(kind, colour, straight_motion(rng, cfg, shape_size(rng, cfg), direction))
    caption = f"a {colour} {kind} moves {direction}"
    return TaskInstance(
        "open-ended", "Describe the video in one short sentence of the form "
                      "'a <colour> <shape> moves <direction>'.", caption,
        f"There is one {colour} {kind} and it moves {direction}.", frames=_frames(cfg, [sprite]),
        info={"colour": colour, "kind": kind, "direction": direction})


VIDEO_TASKS: dict[str, TaskFn] = {
    "multiple_choice": multiple_choice,
    "numerical": numerical,
    "regression": regression,
    "boolean": boolean,
    "temporal_grounding": temporal_grounding,
    "spatial_grounding": spatial_grounding,
    "spatial_temporal_grounding": spatial_temporal_grounding,
    "tracking": tracking,
    "ocr": ocr,
    "math": math,
    "open_ended": open_ended,
}
