"""Synthetic image tasks (one PNG per question) and text-only tasks (no media)."""

from __future__ import annotations

import numpy as np

from easyvideor1.data.synth_common import (
    SynthConfig,
    TaskFn,
    TaskInstance,
    choice_options,
    far_box,
    pick,
    pick_colours,
    shape_size,
    static_box,
    to_json,
)
from easyvideor1.data.synth_render import SHAPES, Box, Sprite, render_frames, shape_mask
from easyvideor1.data.synth_video_tasks import ocr_text_item


def _image(cfg: SynthConfig, sprites: list[Sprite], texts=()) -> np.ndarray:
    return render_frames(cfg.size, cfg.size, 1, sprites, texts)[0]


def _two_shapes(rng: np.random.Generator, cfg: SynthConfig, sides: tuple[int, int] | None = None
                ) -> tuple[tuple[str, str], tuple[str, str], tuple[Box, Box]]:
    """One square and one circle (in random order), apart, with two different colours."""
    kinds = tuple(pick(rng, SHAPES, 2))
    colours = tuple(pick_colours(rng, 2))
    side_a, side_b = sides or (shape_size(rng, cfg), shape_size(rng, cfg))
    box_a = static_box(rng, cfg, side_a)
    return kinds, colours, (box_a, far_box(rng, cfg, side_b, box_a))


def image_multiple_choice(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    kinds, colours, boxes = _two_shapes(rng, cfg)
    asked = int(rng.integers(2))
    others = [c for c in pick_colours(rng, 4) if c not in colours][:2]
    options, letter = choice_options(rng, colours[asked], [colours[1 - asked], *others])
    sprites = [Sprite(k, c, (b,)) for k, c, b in zip(kinds, colours, boxes)]
    return TaskInstance(
        "multiple choice", f"What colour is the {kinds[asked]}?", letter,
        f"The {kinds[asked]} is {colours[asked]} and the {kinds[1 - asked]} is {colours[1 - asked]}: "
        f"option {letter}.", options=options, image=_image(cfg, sprites), info={"colour": colours[asked]})


def image_spatial_grounding(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    kinds, colours, boxes = _two_shapes(rng, cfg)
    sprites = [Sprite(k, c, (b,)) for k, c, b in zip(kinds, colours, boxes)]
    box = boxes[0]
    return TaskInstance(
        "spatial grounding", f"Give the bounding box of the {colours[0]} {kinds[0]} as [x1, y1, x2, y2] "
                             "in pixels.", to_json(list(box)),
        f"The {colours[0]} {kinds[0]} spans x from {box[0]} to {box[2]} and y from {box[1]} to {box[3]}.",
        image=_image(cfg, sprites), info={"colour": colours[0], "kind": kinds[0]})


def image_ocr(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    text, item = ocr_text_item(rng, cfg, first=0, last=0)
    return TaskInstance(
        "ocr", "What text is written in the image? Answer with the text exactly.", text,
        f"The image shows the text '{text}'.", image=_image(cfg, [], (item,)),
        info={"xy": list(item.xy), "font_size": item.font_size})


def image_boolean(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    """Is the circle larger (more painted pixels) than the square? Sizes differ by >= 25%."""
    lo, hi = cfg.size // 8, cfg.size // 3
    for _ in range(1000):
        sides = (int(rng.integers(lo, hi + 1)), int(rng.integers(lo, hi + 1)))
        kinds, colours, boxes = _two_shapes(rng, cfg, sides)
        areas = {k: int(shape_mask(k, b, cfg.size, cfg.size).sum()) for k, b in zip(kinds, boxes)}
        if max(areas.values()) >= 1.25 * min(areas.values()):
            break
    else:
        raise ValueError(f"no two shape sizes in {lo}..{hi} px differ enough in area at size {cfg.size}")
    answer = "yes" if areas["circle"] > areas["square"] else "no"
    sprites = [Sprite(k, c, (b,)) for k, c, b in zip(kinds, colours, boxes)]
    return TaskInstance(
        "boolean", "Is the circle larger (does it cover more pixels) than the square? Answer yes or no.", answer,
        f"The circle covers {areas['circle']} pixels and the square {areas['square']}, so the answer is {answer}.",
        image=_image(cfg, sprites), info={"areas": areas})


def text_math(rng: np.random.Generator, cfg: SynthConfig) -> TaskInstance:
    a, b = (int(v) for v in rng.integers(2, 50, size=2))
    op = pick(rng, ["+", "-", "*"])[0]
    result = {"+": a + b, "-": a - b, "*": a * b}[op]
    return TaskInstance(
        "math", f"What is {a} {op} {b}? Answer with a number.", str(result), f"{a} {op} {b} = {result}.",
        info={"a": a, "b": b, "op": op})


STILL_TASKS: dict[str, TaskFn] = {
    "image_multiple_choice": image_multiple_choice,
    "image_spatial_grounding": image_spatial_grounding,
    "image_ocr": image_ocr,
    "image_boolean": image_boolean,
    "text_math": text_math,
}
