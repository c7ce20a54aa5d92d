"""Synthetic tasks: determinism, loadable output, and ground truth checked against the
decoded pixels (PyAV for videos, PIL for images), never against the generator's own state."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from easyvideor1.data import load_samples
from easyvideor1.data.synth import SYNTH_TYPES, generate_synthetic, make_long_video
from easyvideor1.data.synth_render import BACKGROUND, PALETTE, TextItem, render_frames
from easyvideor1.errors import ConfigError

N, SEED, FPS, SIZE = 5, 3, 8.0, 64


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    generate_synthetic(out, N, SEED, progress=False)
    return out


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for name in ("train.jsonl", "val.jsonl") for line in open(out / name, encoding="utf-8")]


def decode(path: Path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def media_digest(out: Path) -> str:
    """Hash of every decoded frame and image, in file order (not of container bytes)."""
    digest = hashlib.sha256()
    for path in sorted((out / "media").rglob("*")):
        if path.suffix == ".mp4":
            digest.update(decode(path).tobytes())
        elif path.suffix == ".png":
            digest.update(np.asarray(Image.open(path).convert("RGB")).tobytes())
    return digest.hexdigest()


def colour_mask(frames: np.ndarray, colour: str, tol: float = 70.0) -> np.ndarray:
    diff = frames.astype(np.float32) - np.array(PALETTE[colour], dtype=np.float32)
    return np.sqrt((diff**2).sum(-1)) < tol


def mask_box(mask: np.ndarray) -> list[int] | None:
    ys, xs = np.nonzero(mask)
    return None if len(xs) == 0 else [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]


def visible(frames: np.ndarray, colour: str) -> list[bool]:
    return [bool(m.sum() >= 12) for m in colour_mask(frames, colour)]


def assert_box_close(found, expected, tol=1):
    assert found is not None and max(abs(a - b) for a, b in zip(found, expected)) <= tol, (found, expected)


def nearest_colour(pixels: np.ndarray) -> str:
    mean = pixels.reshape(-1, 3).astype(np.float32).mean(0)
    return min(PALETTE, key=lambda c: float(((np.array(PALETTE[c]) - mean) ** 2).sum()))


def option_text(row: dict) -> str:
    return next(o for o in row["options"] if o.startswith(row["answer"] + "."))[3:]


def media(out: Path, row: dict) -> np.ndarray:
    if "videos" in row:
        return decode(out / row["videos"][0])
    return np.asarray(Image.open(out / row["images"][0]).convert("RGB"))[None]


def test_output_loads_and_is_split(synth):
    train = load_samples(synth / "train.jsonl", check_media=True)
    val = load_samples(synth / "val.jsonl", check_media=True)
    assert len(train) + len(val) == N * len(SYNTH_TYPES) and len(val) == len(SYNTH_TYPES)
    assert {s.extra["synth"]["task"] for s in val} == set(SYNTH_TYPES)
    assert all(s.problem_id.endswith(f"{N - 1:04d}") for s in val)
    assert {s.data_type for s in train} == {"video", "image", "text"}
    offline = [s for s in train if s.has_offline_trajectory]
    assert len(offline) == 2 and not any(s.has_offline_trajectory for s in val)
    for s in offline:
        assert s.extra["synth"]["task"] == "spatial_temporal_grounding"
        assert re.fullmatch(r"<think>.+</think>\n<answer>(.+)</answer>", s.offline_output, re.S).group(1) == s.answer
    for s in train:
        assert s.problem.count("<video>") == len(s.videos) and s.problem.count("<image>") == len(s.images)
    problem_types = {s.problem_type for s in train}
    assert problem_types == {"multiple choice", "numerical", "regression", "boolean", "temporal grounding",
                             "spatial grounding", "spatial-temporal grounding", "tracking", "ocr", "math",
                             "open-ended"}


def test_deterministic_by_seed_and_independent_of_type_selection(synth, tmp_path):
    again = tmp_path / "again"
    generate_synthetic(again, N, SEED, progress=False)
    for name in ("train.jsonl", "val.jsonl"):
        assert (again / name).read_bytes() == (synth / name).read_bytes()
    assert media_digest(again) == media_digest(synth)

    other = tmp_path / "other"
    generate_synthetic(other, N, SEED + 1, progress=False)
    assert (other / "train.jsonl").read_bytes() != (synth / "train.jsonl").read_bytes()
    assert media_digest(other) != media_digest(synth)

    subset = tmp_path / "subset"
    generate_synthetic(subset, N, SEED, types=["tracking", "image_ocr"], progress=False)
    wanted = [r for r in rows_of(synth) if r["synth"]["task"] in ("tracking", "image_ocr")]
    assert sorted(rows_of(subset), key=lambda r: r["problem_id"]) == sorted(wanted, key=lambda r: r["problem_id"])


def test_multiple_choice_colour_matches_pixels(synth):
    for row in (r for r in rows_of(synth) if r["problem_type"] == "multiple choice"):
        frames = media(synth, row)
        if "videos" in row:
            moving = np.abs(frames[0].astype(int) - frames[-1].astype(int)).sum(-1) > 150
            pixels = frames[-1][moving & (np.abs(frames[-1].astype(int) - BACKGROUND).sum(-1) > 150)]
            assert nearest_colour(pixels) == option_text(row), row["problem_id"]
        else:
            kind = re.search(r"colour is the (\w+)", row["problem"]).group(1)
            shapes = _still_shapes(frames[0])
            assert shapes[kind][0] == option_text(row), row["problem_id"]


def _still_shapes(image: np.ndarray) -> dict[str, tuple[str, int]]:
    """kind -> (colour, painted pixels) from a lossless image: a square fills its box."""
    found = {}
    for colour in PALETTE:
        mask = np.all(image == PALETTE[colour], axis=-1)
        if mask.any():
            x1, y1, x2, y2 = mask_box(mask)
            kind = "square" if mask.sum() == (x2 - x1) * (y2 - y1) else "circle"
            found[kind] = (colour, int(mask.sum()))
    return found


def test_boolean_and_open_ended_match_motion(synth):
    for row in (r for r in rows_of(synth) if r["problem_type"] in ("boolean", "open-ended")):
        frames = media(synth, row)
        if row["problem_type"] == "boolean" and "images" in row:
            shapes = _still_shapes(frames[0])
            assert row["answer"] == ("yes" if shapes["circle"][1] > shapes["square"][1] else "no")
            continue
        colour = re.search(r"the (\w+) (square|circle)", row["problem"], re.I) if row["problem_type"] == "boolean" \
            else re.match(r"a (\w+) (square|circle) moves (\w+)", row["answer"])
        masks = colour_mask(frames, colour.group(1))
        (y0, x0), (y1, x1) = (np.argwhere(m).mean(0) for m in (masks[0], masks[-1]))
        dx, dy = x1 - x0, y1 - y0
        direction = ("right" if dx > 0 else "left") if abs(dx) > abs(dy) else ("down" if dy > 0 else "up")
        if row["problem_type"] == "boolean":
            asked = re.search(r"move (\w+)\?", row["problem"]).group(1)
            assert row["answer"] == ("yes" if asked == direction else "no"), row["problem_id"]
        else:
            assert colour.group(3) == direction
            box = mask_box(masks[0])
            fill = masks[0].sum() / ((box[2] - box[0]) * (box[3] - box[1]))
            assert colour.group(2) == ("square" if fill > 0.9 else "circle"), row["problem_id"]


def test_grounding_boxes_and_times_match_pixels(synth):
    checked = 0
    for row in rows_of(synth):
        kind = row["problem_type"]
        if kind not in ("spatial grounding", "tracking", "temporal grounding", "spatial-temporal grounding"):
            continue
        colour = re.search(r"the (\w+) (square|circle)", row["problem"], re.I).group(1)
        frames = media(synth, row)
        answer = json.loads(row["answer"])
        shown = visible(frames, colour)
        if kind in ("temporal grounding", "spatial-temporal grounding"):
            times = answer["time"] if isinstance(answer, dict) else answer
            on = [i for i, v in enumerate(shown) if v]
            assert on == list(range(on[0], on[-1] + 1))
            assert times == [on[0] / FPS, (on[-1] + 1) / FPS], row["problem_id"]
        boxes = answer if kind == "tracking" else answer.get("boxes", {}) if isinstance(answer, dict) else {}
        if kind == "spatial grounding":
            boxes = {"0.0": answer}
        for t, box in boxes.items():
            index = round(float(t) * FPS)
            assert shown[index]
            assert_box_close(mask_box(colour_mask(frames[index], colour)), box)
            checked += 1
        if kind == "tracking":
            assert list(boxes) == ["0.0", "0.5", "1.0", "1.5"]
    assert checked > 4 * N


def test_counting_regression_math_and_text(synth):
    for row in rows_of(synth):
        kind, frames = row["problem_type"], None
        if "videos" in row or "images" in row:
            frames = media(synth, row)
        if kind == "numerical":
            colour = re.search(r"the (\w+) (square|circle)", row["problem"], re.I).group(1)
            shown = visible(frames, colour)
            runs = sum(1 for i, v in enumerate(shown) if v and (i == 0 or not shown[i - 1]))
            assert str(runs) == row["answer"], row["problem_id"]
        elif kind == "regression":
            colour = re.search(r"the (\w+) (square|circle)", row["problem"], re.I).group(1)
            edge = re.search(r"toward the (\w+) edge", row["problem"]).group(1)
            coord, limit = {"left": (0, 0), "top": (1, 0), "right": (2, SIZE), "bottom": (3, SIZE)}[edge]
            boxes = [mask_box(m) for m in colour_mask(frames, colour)]
            first = next(i for i, b in enumerate(boxes) if b[coord] == limit)
            assert float(row["answer"]) == first / FPS, row["problem_id"]
        elif kind == "math" and frames is None:
            assert str(eval(re.search(r"What is (.+)\?", row["problem"]).group(1))) == row["answer"]
        elif kind == "math":
            info = row["synth"]
            half = len(frames) // 2
            for digit, (x, y), part in zip(info["digits"], info["xy"], (frames[:half], frames[half:])):
                _assert_text_drawn(part, str(digit), (x, y), info["font_size"])
            a, b = info["digits"]
            op = re.search(r"their (\w+)\?", row["problem"]).group(1)
            assert row["answer"] == str(a + b if op == "sum" else a * b)
        elif kind == "ocr":
            _assert_text_drawn(frames, row["answer"], tuple(row["synth"]["xy"]), row["synth"]["font_size"])


def _assert_text_drawn(frames: np.ndarray, text: str, xy: tuple[int, int], font_size: int) -> None:
    """The decoded ink matches ``text`` rendered at ``xy`` much better than any other text."""
    def ink(image: np.ndarray) -> np.ndarray:
        return (np.abs(image.astype(int) - BACKGROUND).sum(-1) > 120).astype(np.float32)

    seen = ink(frames).mean(0)
    def error(candidate: str) -> float:
        item = TextItem(candidate, xy, font_size, "white", 0, 0)
        return float(np.abs(ink(render_frames(SIZE, SIZE, 1, (), (item,))[0]) - seen).mean())

    assert error(text) < 0.02
    assert all(error(other) > 2 * error(text) + 0.005 for other in ("CAT", "808", "1", "7") if other != text)


def test_bad_arguments_raise_config_error(tmp_path):
    for kwargs in ({"n_per_type": 0}, {"types": ["nope"]}, {"seed": -1}, {"size": 30}, {"val_fraction": 1.0},
                   {"offline_type": "nope"}, {"fps": 2.0, "seconds": 1.0}):
        args = {"n_per_type": 2, "seed": 0, **kwargs}
        with pytest.raises(ConfigError):
            generate_synthetic(tmp_path, progress=False, **args)


def test_long_video_is_h264_with_motion(tmp_path):
    path = make_long_video(tmp_path / "long.mp4", seconds=1.0, fps=30, width=640, height=360, seed=1)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.name, stream.width, stream.height) == ("h264", 640, 360)
        assert stream.average_rate == 30
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 30
    assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).mean() > 10
    with pytest.raises(ConfigError):
        make_long_video(tmp_path / "bad.mp4", width=641)
