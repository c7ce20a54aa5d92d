"""Drawing for the synthetic tasks: sprites with one exact box per frame, text, and a long
benchmark video.

Ground truth is never measured from pixels: every task decides its sprites' integer boxes
per frame first, the renderer paints exactly those boxes, and the answers are computed from
the same boxes. Frame ``i`` is shown at ``t = i / fps``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import as_strided
from PIL import Image, ImageDraw, ImageFont

from easyvideor1.errors import ConfigError
from easyvideor1.video.encode import write_video

Box = tuple[int, int, int, int]  # x1, y1, x2, y2; pixels x1 <= x < x2, y1 <= y < y2 are the shape's

# Saturated, well-separated colours: they survive 4:2:0 chroma subsampling and stay
# distinguishable after H.264 coding.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (230, 30, 30),
    "green": (30, 200, 50),
    "blue": (40, 80, 240),
    "yellow": (240, 220, 30),
    "magenta": (220, 40, 220),
    "cyan": (30, 220, 230),
    "white": (245, 245, 245),
    "orange": (250, 140, 20),
}
BACKGROUND = (16, 16, 16)
SHAPES = ("square", "circle")
FONT_FILE = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
VIDEO_CRF = 12  # near-lossless: colours and edges stay exact enough to check ground truth


@dataclass(frozen=True)
class Sprite:
    """A filled shape with its box on every frame (``None`` where it is not visible)."""

    kind: str  # square | circle
    colour: str
    boxes: tuple[Box | None, ...]

    def visible_frames(self) -> list[int]:
        return [i for i, box in enumerate(self.boxes) if box is not None]


@dataclass(frozen=True)
class TextItem:
    """Text drawn on frames ``first..last`` (inclusive) at ``xy`` (its top-left ink corner)."""

    text: str
    xy: tuple[int, int]
    font_size: int
    colour: str
    first: int
    last: int


def frame_time(index: int, fps: float) -> float:
    return index / fps


def fmt_seconds(t: float) -> str:
    """Seconds as answers and JSON keys spell them: ``0.0``, ``1.5``, ``0.125``."""
    return str(round(float(t), 4))


def moving_boxes(x0: int, y0: int, w: int, h: int, vx: float, vy: float, fps: float, n_frames: int,
                 width: int, height: int) -> tuple[Box, ...]:
    """Boxes of a ``w`` x ``h`` shape starting at (x0, y0) moving at (vx, vy) pixels per
    second; positions are rounded at each frame time and clamped inside the frame."""
    boxes = []
    for i in range(n_frames):
        t = frame_time(i, fps)
        x = min(max(int(round(x0 + vx * t)), 0), width - w)
        y = min(max(int(round(y0 + vy * t)), 0), height - h)
        boxes.append((x, y, x + w, y + h))
    return tuple(boxes)


def fill_shape(canvas: np.ndarray, kind: str, box: Box, rgb: tuple[int, int, int]) -> None:
    """Paint ``kind`` so that its pixels span exactly ``box`` (tight on all four sides)."""
    x1, y1, x2, y2 = box
    if kind == "square":
        canvas[y1:y2, x1:x2] = rgb
        return
    # Ellipse inscribed in the box, tested at pixel centres; the centre row and column
    # always reach the box edges, so the box stays tight.
    ys = np.arange(y1, y2) + 0.5
    xs = np.arange(x1, x2) + 0.5
    cy, cx, ry, rx = (y1 + y2) / 2, (x1 + x2) / 2, (y2 - y1) / 2, (x2 - x1) / 2
    mask = ((ys[:, None] - cy) / ry) ** 2 + ((xs[None, :] - cx) / rx) ** 2 <= 1.0
    region = canvas[y1:y2, x1:x2]
    region[mask] = rgb


def shape_mask(kind: str, box: Box, height: int, width: int) -> np.ndarray:
    """Boolean (H, W) mask of the pixels :func:`fill_shape` paints (used by checks)."""
    canvas = np.zeros((height, width, 3), dtype=np.uint8)
    fill_shape(canvas, kind, box, (255, 255, 255))
    return canvas[..., 0] > 0


@functools.lru_cache(maxsize=32)
def load_font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """DejaVu Sans at ``size`` pixels; PIL's bundled font if DejaVu is not installed."""
    for candidate in (FONT_FILE, "DejaVuSans.ttf"):
        try:
            return ImageFont.truetype(candidate, size)
        except OSError:
            continue
    return ImageFont.load_default(size)


def text_box(text: str, font_size: int) -> tuple[int, int, int, int]:
    """Ink box of ``text`` drawn with its anchor at (0, 0) (may start at a small offset)."""
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    left, top, right, bottom = probe.textbbox((0, 0), text, font=load_font(font_size))
    return int(left), int(top), int(right), int(bottom)


def place_text(text: str, font_size: int, width: int, height: int, rng: np.random.Generator) -> tuple[int, int]:
    """A random top-left ink position that keeps the whole text inside the frame."""
    left, top, right, bottom = text_box(text, font_size)
    w, h = right - left, bottom - top
    if w + 2 > width or h + 2 > height:
        raise ValueError(f"text {text!r} at {font_size}px ({w}x{h}) does not fit a {width}x{height} frame")
    return int(rng.integers(1, width - w)), int(rng.integers(1, height - h))


def draw_text(canvas: np.ndarray, item: TextItem) -> None:
    left, top, _, _ = text_box(item.text, item.font_size)
    image = Image.fromarray(canvas)
    ImageDraw.Draw(image).text((item.xy[0] - left, item.xy[1] - top), item.text, font=load_font(item.font_size),
                               fill=PALETTE[item.colour])
    canvas[...] = np.asarray(image)


def render_frames(width: int, height: int, n_frames: int, sprites: Sequence[Sprite] = (),
                  texts: Sequence[TextItem] = ()) -> np.ndarray:
    """(T, H, W, 3) uint8 RGB: sprites painted in order (later ones on top), then text."""
    frames = np.empty((n_frames, height, width, 3), dtype=np.uint8)
    frames[...] = BACKGROUND
    for i in range(n_frames):
        for sprite in sprites:
            box = sprite.boxes[i]
            if box is not None:
                fill_shape(frames[i], sprite.kind, box, PALETTE[sprite.colour])
        for item in texts:
            if item.first <= i <= item.last:
                draw_text(frames[i], item)
    return frames


def save_video(path: str | os.PathLike, frames: np.ndarray, fps: float) -> Path:
    return write_video(path, frames, fps, crf=VIDEO_CRF)


def save_image(path: str | os.PathLike, frame: np.ndarray) -> Path:
    """PNG (lossless, no timestamps in the file: same pixels give the same bytes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(frame).save(path, format="PNG", optimize=False)
    return path


def make_long_video(path: str | os.PathLike, seconds: float = 60, fps: float = 30, width: int = 640,
                    height: int = 360, seed: int = 0) -> Path:
    """An H.264 video with moving content, for cache and decode benchmarks.

    The frames are a window scrolling over one wide textured panorama (a zero-copy
    strided view, so a minute of 640x360 needs only the panorama's memory), which gives
    the encoder real motion at a low cost.
    """
    if seconds <= 0 or fps <= 0 or width < 16 or height < 16 or width % 2 or height % 2:
        raise ConfigError(f"long video: need seconds > 0, fps > 0 and even width/height >= 16; got {seconds=}, {fps=}, "
                         f"{width=}, {height=}")
    rng = np.random.default_rng(seed)
    n_frames = max(1, int(round(seconds * fps)))
    step = 3  # pixels per frame
    pano_w = width + step * (n_frames - 1)
    ys, xs = np.mgrid[0:height, 0:pano_w]
    pano = np.empty((height, pano_w, 3), dtype=np.uint8)
    for channel, period in enumerate((97.0, 151.0, 211.0)):
        phase = rng.uniform(0, 2 * np.pi)
        pano[..., channel] = (127 + 100 * np.sin(xs / period * 2 * np.pi + phase + ys / (period * 0.7))).astype(np.uint8)
    # Solid blocks give sharp edges that motion search has to follow.
    for _ in range(max(8, pano_w // 40)):
        bw, bh = (int(v) for v in rng.integers(12, 60, size=2))
        bx, by = int(rng.integers(0, pano_w - bw)), int(rng.integers(0, height - bh))
        pano[by:by + bh, bx:bx + bw] = rng.integers(0, 256, size=3, dtype=np.uint8)
    frames = as_strided(pano, shape=(n_frames, height, width, 3),
                        strides=(step * pano.strides[1], pano.strides[0], pano.strides[1], pano.strides[2]),
                        writeable=False)
    return write_video(path, frames, fps, crf=23)
