"""Clip windows: VideoParams validation, window arithmetic and decoding inside a window."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from video_samples import make_vfr_video, make_video

from easyvideor1.errors import MediaDecodeError
from easyvideor1.video import VideoMetadata, VideoParams, decode_video, sample_frame_indices
from easyvideor1.video.sampling import sample_window_indices, window_frame_range

SMALL = dict(min_pixels=28 * 28, max_pixels=64 * 64)


def params(**kw) -> VideoParams:
    return VideoParams(**{**SMALL, **kw})


# ---- VideoParams ---------------------------------------------------------------------------


def test_window_values_are_coerced_and_only_serialized_when_set():
    p = VideoParams(start_s=1, end_s=2)
    assert (p.start_s, p.end_s) == (1.0, 2.0) and isinstance(p.start_s, float)
    assert p == VideoParams(start_s=1.0, end_s=2.0) and p.has_window
    assert p.as_dict()["start_s"] == 1.0 and VideoParams(**p.as_dict()) == p
    whole = VideoParams()
    assert not whole.has_window and "start_s" not in whole.as_dict() and "end_s" not in whole.as_dict()
    assert VideoParams(**whole.as_dict()) == whole
    assert whole.with_window(3.0, None) == VideoParams(start_s=3.0)
    assert VideoParams(end_s=5).as_dict()["end_s"] == 5.0 and "start_s" not in VideoParams(end_s=5).as_dict()


@pytest.mark.parametrize("window, message", [
    ({"start_s": -1.0}, r"start_s must be a finite number of seconds >= 0.*-1\.0"),
    ({"end_s": -0.5}, r"end_s must be a finite number of seconds >= 0"),
    ({"start_s": float("nan")}, r"start_s must be a finite number"),
    ({"end_s": float("inf")}, r"end_s must be a finite number"),
    ({"start_s": True}, r"start_s must be a finite number"),
    ({"start_s": "1"}, r"start_s must be a finite number.*'1'"),
    ({"start_s": 2.0, "end_s": 2.0}, r"clip window \[2, 2\] s is empty: start_s must be < end_s"),
    ({"start_s": 3.0, "end_s": 1.0}, r"clip window \[3, 1\] s is empty"),
    ({"end_s": 0}, r"clip window \[0, 0\] s is empty"),
])
def test_bad_windows_are_refused_with_the_reason(window, message):
    with pytest.raises(ValueError, match=message):
        VideoParams(**window)


# ---- window arithmetic ---------------------------------------------------------------------


def test_window_range_is_half_open_and_tolerates_float_error():
    times = [i / 4 for i in range(8)]  # 0, 0.25, ..., 1.75
    assert window_frame_range(times, 0.5, 1.5) == (2, 6)  # 1.5 starts as the window closes
    assert window_frame_range(times, 0.5 + 1e-9, 1.5) == (2, 6)  # 0.5 read back as 0.4999999...
    assert window_frame_range(times, 0.0, float("inf")) == (0, 8)
    assert window_frame_range(times, 1.6, float("inf")) == (7, 8)


def test_window_shorter_than_a_frame_gets_the_frame_on_screen():
    times = [i / 4 for i in range(8)]
    assert window_frame_range(times, 0.6, 0.7) == (2, 3)  # frame 2 (0.5 s) is shown until 0.75 s
    assert window_frame_range(times, 5.0, 6.0) == (7, 8)


def test_window_sampling_applies_the_frame_rules_to_the_window():
    times = [i / 30 for i in range(1800)]  # one minute at 30 fps
    p = VideoParams(fps=2.0, max_frames=128)
    ten_seconds = sample_window_indices(times, 30.0, p, 20.0, 30.0)
    assert len(ten_seconds) == 20 and ten_seconds[0] == 600 and ten_seconds[-1] == 899
    assert ten_seconds == [600 + i for i in sample_frame_indices(300, 30.0, p)]
    assert len(sample_window_indices(times, 30.0, VideoParams(fps=2.0, max_frames=8), 0.0, 30.0)) == 8
    assert len(sample_window_indices(times, 30.0, VideoParams(fps=2.0, min_frames=16), 20.0, 21.0)) == 16
    # The whole video as a window samples exactly what the whole video does.
    assert sample_window_indices(times, 30.0, p, 0.0, 60.0) == sample_frame_indices(1800, 30.0, p)


@settings(max_examples=200, deadline=None)
@given(total=st.integers(1, 3000), source_fps=st.floats(1.0, 120.0), start=st.floats(0.0, 50.0),
       length=st.floats(0.001, 50.0), fps=st.floats(0.1, 10.0), min_frames=st.integers(1, 16))
def test_window_sampling_properties(total, source_fps, start, length, fps, min_frames):
    times = [i / source_fps for i in range(total)]
    p = VideoParams(fps=fps, min_frames=min_frames, max_frames=min_frames + 64)
    indices = sample_window_indices(times, source_fps, p, start, start + length)
    assert indices == sorted(indices) and len(indices) % 2 == 0
    first, stop = window_frame_range(times, start, start + length)
    assert all(first <= i < stop for i in indices)
    if stop - first > 1 or times[first] >= start - 1e-6:  # not the one-frame "on screen" case
        assert all(start - 1e-6 <= times[i] < start + length for i in indices)


# ---- decoding a window ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("clips") / "clip.mp4", count=30, fps=10)  # 3 s


@pytest.fixture(scope="module")
def every_frame(video):
    return decode_video(video, params(fps=10.0, max_frames=64))


def test_clip_frames_are_the_source_frames_inside_the_window(video, every_frame):
    all_frames, all_meta = every_frame
    assert all_meta.frame_indices == tuple(range(30))
    frames, meta = decode_video(video, params(fps=2.0, min_frames=2, start_s=1.0, end_s=2.0))
    assert meta.frame_indices == (10, 19) and meta.timestamps == pytest.approx((1.0, 1.9))
    assert meta.clip == (1.0, 2.0)
    # Absolute source indices, times and the whole video's length and count.
    assert meta.total_frames == 30 and meta.duration == pytest.approx(3.0) and meta.source_fps == 10.0
    assert np.array_equal(frames, all_frames[list(meta.frame_indices)])
    assert meta.sample_fps == pytest.approx(2.0)


@pytest.mark.parametrize("kw, count", [
    (dict(fps=2.0, min_frames=2, max_frames=64), 2),  # 1 s of window at 2 fps
    (dict(fps=10.0, min_frames=2, max_frames=64), 10),  # every frame of the window
    (dict(fps=10.0, min_frames=2, max_frames=4), 4),  # max_frames caps
    (dict(fps=1.0, min_frames=6, max_frames=64), 6),  # min_frames floors
    (dict(fps=10.0, min_frames=16, max_frames=64), 10),  # fewer frames than wanted: all of them
])
def test_window_frame_counts_follow_the_rules(video, kw, count):
    _, meta = decode_video(video, params(start_s=1.0, end_s=2.0, **kw))
    assert meta.num_frames == count
    assert all(1.0 - 1e-6 <= t < 2.0 for t in meta.timestamps)
    assert list(meta.frame_indices) == [10 + i for i in sample_frame_indices(10, 10.0, params(**kw))]


def test_open_ended_windows(video):
    _, tail = decode_video(video, params(fps=2.0, min_frames=2, start_s=2.0))
    assert tail.clip == (2.0, pytest.approx(3.0)) and tail.frame_indices == (20, 29)
    _, head = decode_video(video, params(fps=2.0, min_frames=2, end_s=1.0))
    assert head.clip == (0.0, 1.0) and head.frame_indices == (0, 9)


def test_window_past_the_end_is_clamped(video):
    frames, meta = decode_video(video, params(fps=10.0, start_s=2.5, end_s=60.0))
    # Five frames left, rounded down to whole temporal patches: four.
    assert meta.clip == (2.5, pytest.approx(3.0)) and meta.frame_indices == (25, 26, 28, 29)
    assert all(2.5 - 1e-6 <= t < 3.0 for t in meta.timestamps) and frames.shape[0] == 4


def test_the_whole_video_as_a_window_gives_the_whole_video_frames(video):
    whole_frames, whole = decode_video(video, params(fps=2.0))
    clip_frames, clip = decode_video(video, params(fps=2.0, start_s=0.0, end_s=3.0))
    assert clip.frame_indices == whole.frame_indices and np.array_equal(clip_frames, whole_frames)
    assert whole.clip is None and clip.clip == (0.0, 3.0)


def test_a_window_after_the_end_names_the_file_and_the_window(video):
    with pytest.raises(MediaDecodeError, match=r"clip\.mp4: clip window \[3\.5, 9\] s starts at or after the end "
                                               r"of the video \(3\.000 s\)"):
        decode_video(video, params(start_s=3.5, end_s=9.0))
    with pytest.raises(MediaDecodeError, match=r"clip window \[3, end\] s starts at or after the end"):
        decode_video(video, params(start_s=3.0))


def test_a_window_within_one_frame_gets_the_frame_on_screen(video):
    _, meta = decode_video(video, params(start_s=1.02, end_s=1.05))
    assert meta.frame_indices == (10, 10) and meta.timestamps == pytest.approx((1.0, 1.0))


def test_variable_frame_rate_windows_use_the_true_presentation_times(tmp_path):
    pts_ms = [0, 40, 80, 500, 1000, 1040, 1500, 2000, 2100, 2600]
    path = make_vfr_video(tmp_path / "vfr.mp4", pts_ms)
    # fps=8 wants more frames than the window's four: all of them, padding none.
    _, meta = decode_video(path, params(fps=8.0, min_frames=2, start_s=0.9, end_s=2.05))
    assert meta.frame_indices == (4, 5, 6, 7)
    assert meta.timestamps == pytest.approx((1.0, 1.04, 1.5, 2.0))


def test_clip_metadata_round_trips(video):
    _, meta = decode_video(video, params(start_s=1.0, end_s=2.0))
    data = meta.as_dict()
    assert data["clip"] == [1.0, 2.0] and VideoMetadata.from_dict(data) == meta
    _, whole = decode_video(video, params())
    assert "clip" not in whole.as_dict() and VideoMetadata.from_dict(whole.as_dict()) == whole
