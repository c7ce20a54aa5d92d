"""Frame-sampling arithmetic and smart_resize, against their stated properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from easyvideor1.video import FACTOR_QWEN2, FACTOR_QWEN3, VideoParams, sample_frame_indices, smart_resize


def params(**kw) -> VideoParams:
    return VideoParams(**kw)


def test_two_fps_over_a_minute_at_thirty_fps_gives_120_evenly_spaced_frames():
    indices = sample_frame_indices(1800, 30.0, params(fps=2.0, max_frames=128))
    assert len(indices) == 120
    assert indices[0] == 0 and indices[-1] == 1799
    assert indices == np.linspace(0, 1799, 120).round().astype(int).tolist()


def test_max_frames_caps_and_min_frames_floors():
    assert len(sample_frame_indices(1800, 30.0, params(fps=2.0, max_frames=64))) == 64
    # 1 s at 2 fps wants 2 frames; min_frames lifts it to 8.
    assert len(sample_frame_indices(30, 30.0, params(fps=2.0, min_frames=8))) == 8


def test_counts_are_always_even_rounding_down():
    # 3.5 s at 2 fps wants 7 frames: one temporal patch holds 2, so 6.
    assert len(sample_frame_indices(105, 30.0, params(fps=2.0, min_frames=2))) == 6
    # An odd max_frames is rounded down to a whole patch as well.
    assert len(sample_frame_indices(3000, 30.0, params(fps=2.0, max_frames=9))) == 8


def test_one_frame_video_repeats_its_frame_to_fill_a_patch():
    assert sample_frame_indices(1, 30.0, params()) == [0, 0]


def test_video_shorter_than_min_frames_keeps_every_frame_then_pads_the_last():
    assert sample_frame_indices(3, 30.0, params(min_frames=4)) == [0, 1, 2, 2]
    assert sample_frame_indices(2, 30.0, params(min_frames=4)) == [0, 1]


def test_zero_frames_is_refused():
    with pytest.raises(ValueError, match="total_frames"):
        sample_frame_indices(0, 30.0, params())


@settings(max_examples=300, deadline=None)
@given(total=st.integers(1, 20000), source_fps=st.floats(1.0, 240.0), fps=st.floats(0.1, 10.0),
       min_frames=st.integers(1, 16), extra=st.integers(0, 200))
def test_sampling_properties(total, source_fps, fps, min_frames, extra):
    p = params(fps=fps, min_frames=min_frames, max_frames=min_frames + extra)
    indices = sample_frame_indices(total, source_fps, p)
    assert len(indices) % 2 == 0 and len(indices) >= 2
    assert indices == sorted(indices)
    assert 0 <= indices[0] and indices[-1] <= total - 1
    distinct = len(set(indices))
    if distinct < len(indices):  # padding only happens for videos shorter than the request
        assert distinct == total and indices[-1] == total - 1
    else:
        assert len(indices) <= max(2, p.max_frames)


@pytest.mark.parametrize("factor", [FACTOR_QWEN2, FACTOR_QWEN3])
def test_smart_resize_examples(factor):
    assert smart_resize(360, 640, factor, 128 * 28 * 28, 262144) == (
        (364, 644) if factor == 28 else (352, 640))
    h, w = smart_resize(1080, 1920, factor, 4 * 28 * 28, 262144)
    assert h * w <= 262144 and h % factor == 0 and w % factor == 0
    # Upscaled to reach min_pixels, keeping the aspect ratio roughly.
    h, w = smart_resize(20, 40, factor, 100_000, 1_000_000)
    assert h * w >= 100_000 and abs(w / h - 2) < 0.3


def test_smart_resize_refuses_extreme_aspect_and_empty_sizes():
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 2500, 28, 784, 262144)
    with pytest.raises(ValueError, match="positive"):
        smart_resize(0, 100, 28, 784, 262144)


@settings(max_examples=500, deadline=None)
@given(h=st.integers(16, 4000), w=st.integers(16, 4000), factor=st.sampled_from([28, 32]),
       min_patches=st.integers(4, 200), span=st.integers(0, 2000))
def test_smart_resize_properties(h, w, factor, min_patches, span):
    assume(max(h, w) / min(h, w) <= 200)
    min_pixels = min_patches * factor * factor
    max_pixels = (min_patches + span) * factor * factor
    new_h, new_w = smart_resize(h, w, factor, min_pixels, max_pixels)
    assert new_h % factor == 0 and new_w % factor == 0
    assert new_h >= factor and new_w >= factor
    rounded = max(factor, round(h / factor) * factor) * max(factor, round(w / factor) * factor)
    short_side_at_max = min(h, w) * (max_pixels / (h * w)) ** 0.5
    if min_pixels <= rounded <= max_pixels:
        assert abs(new_h - h) <= factor / 2 + 1e-9 or new_h == factor
        assert abs(new_w - w) <= factor / 2 + 1e-9 or new_w == factor
    elif rounded > max_pixels:
        if short_side_at_max >= factor:  # shrinking floors each side: never above the budget
            assert new_h * new_w <= max_pixels
    else:
        assert new_h * new_w >= min_pixels  # growing ceils each side: never below the floor
    # With a budget at least 4x wide (the defaults are 2.6x-10x) both bounds hold together.
    if max_pixels >= 4 * min_pixels and short_side_at_max >= 2 * factor:
        assert min_pixels <= new_h * new_w <= max_pixels
