"""Fixtures for model-layer tests: tiny models of every family and frame/metadata factories."""

from __future__ import annotations

import numpy as np
import pytest

from easyvideor1.models import ImageInput, VideoInput, build_tiny_model, get_family
from easyvideor1.video.metadata import ImageMetadata, VideoMetadata

FAMILY_NAMES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """family name -> directory of a tiny model (seed 0), built once per session."""
    root = tmp_path_factory.mktemp("tiny_models")
    return {name: build_tiny_model(name, root / name, seed=0) for name in FAMILY_NAMES}


@pytest.fixture(scope="session")
def processors(tiny_dirs):
    from transformers import AutoProcessor

    return {name: AutoProcessor.from_pretrained(path) for name, path in tiny_dirs.items()}


def video_input(family: str, num_frames: int, rows: int, cols: int, *, source_fps: float = 3.0, stride: int = 2,
                seed: int = 0, first_index: int = 0) -> VideoInput:
    """Random frames of ``rows x cols`` factor-units and exact metadata of a sampled video."""
    factor = get_family(family).factor
    height, width = rows * factor, cols * factor
    frames = np.random.default_rng(seed).integers(0, 256, (num_frames, height, width, 3), dtype=np.uint8)
    indices = tuple(first_index + stride * i for i in range(num_frames))
    total = indices[-1] + 1 + stride
    metadata = VideoMetadata(
        source_fps=source_fps, total_frames=total, duration=total / source_fps, frame_indices=indices,
        timestamps=tuple(i / source_fps for i in indices), height=height, width=width, source_height=height,
        source_width=width, factor=factor, decoder="synthetic",
    )
    return VideoInput(frames, metadata)


def image_input(family: str, rows: int, cols: int, *, seed: int = 0) -> ImageInput:
    factor = get_family(family).factor
    height, width = rows * factor, cols * factor
    image = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return ImageInput(image, ImageMetadata(height=height, width=width, source_height=height, source_width=width,
                                           factor=factor))


@pytest.fixture(scope="session")
def make_video():
    return video_input


@pytest.fixture(scope="session")
def make_image():
    return image_input
