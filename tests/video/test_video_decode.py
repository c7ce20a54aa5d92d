"""decode_video / load_image on real files: sampling, timestamps, rotation, sizes, images."""

from __future__ import annotations

import numpy as np
import pytest
from video_samples import make_image, make_vfr_video, make_video, moving_frames

from easyvideor1.video import (
    DECODER_NAME,
    FACTOR_QWEN3,
    ImageParams,
    VideoParams,
    decode_video,
    load_image,
    sample_frame_indices,
)
from easyvideor1.video.encode import write_video

SMALL = dict(min_pixels=28 * 28, max_pixels=64 * 64)


def test_decode_samples_resizes_and_describes(tmp_path):
    path = make_video(tmp_path / "clip.mp4", count=30, fps=10)
    frames, meta = decode_video(path, VideoParams(fps=2.0, **SMALL))
    assert frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[-1] == 3
    assert not frames.flags.writeable
    assert frames.shape == (6, meta.height, meta.width, 3)
    assert meta.height % 28 == 0 and meta.width % 28 == 0 and meta.height * meta.width <= 64 * 64
    assert meta.total_frames == 30 and meta.source_fps == 10.0
    assert meta.duration == pytest.approx(3.0)
    assert list(meta.frame_indices) == sample_frame_indices(30, 10.0, VideoParams(fps=2.0, **SMALL))
    assert meta.timestamps == pytest.approx([i / 10 for i in meta.frame_indices])
    assert (meta.source_height, meta.source_width) == (48, 64)
    assert meta.decoder == DECODER_NAME and meta.rotation == 0 and meta.factor == 28


def test_kept_frames_are_the_sampled_source_frames(tmp_path):
    source = moving_frames(20, 56, 56)
    path = write_video(tmp_path / "exact.mp4", source, 10, crf=0)  # lossless luma: near-exact pixels
    frames, meta = decode_video(path, VideoParams(fps=4.0, min_pixels=56 * 56, max_pixels=56 * 56))
    assert frames.shape[1:3] == (56, 56)
    for out, index in zip(frames, meta.frame_indices):
        error = np.abs(out.astype(int) - source[index].astype(int)).mean()
        others = [np.abs(out.astype(int) - source[j].astype(int)).mean() for j in range(20) if j != index]
        assert error < min(others)  # closest to its own source frame, not a neighbour


def test_qwen3_factor(tmp_path):
    path = make_video(tmp_path / "clip.mp4", count=20, height=90, width=160)
    frames, meta = decode_video(path, VideoParams(factor=FACTOR_QWEN3, min_pixels=32 * 32, max_pixels=128 * 128))
    assert meta.height % 32 == 0 and meta.width % 32 == 0 and meta.factor == FACTOR_QWEN3
    assert frames.shape[1:3] == (meta.height, meta.width)


def test_variable_frame_rate_timestamps_come_from_pts(tmp_path):
    pts_ms = [0, 100, 150, 400, 1000, 1040, 1500, 2600]
    path = make_vfr_video(tmp_path / "vfr.mp4", pts_ms)
    frames, meta = decode_video(path, VideoParams(fps=100.0, max_frames=8, **SMALL))
    assert meta.frame_indices == tuple(range(8))
    assert meta.timestamps == pytest.approx([p / 1000 for p in pts_ms])
    assert meta.duration >= 2.6  # measured from PTS even though the header says less
    _, sparse = decode_video(path, VideoParams(fps=2.0, max_frames=8, min_frames=2, **SMALL))
    assert sparse.timestamps == pytest.approx([pts_ms[i] / 1000 for i in sparse.frame_indices])


def _quadrant_means(frame: np.ndarray) -> dict[str, float]:
    h, w = frame.shape[0] // 2, frame.shape[1] // 2
    red = frame[..., 0].astype(float)
    return {"tl": red[:h, :w].mean(), "tr": red[:h, w:].mean(), "bl": red[h:, :w].mean(), "br": red[h:, w:].mean()}


@pytest.mark.parametrize(("rotation", "corner"), [(0, "tl"), (90, "tr"), (180, "br"), (270, "bl")])
def test_rotation_is_applied(tmp_path, rotation, corner):
    frames = np.zeros((4, 48, 80, 3), dtype=np.uint8)
    frames[:, :24, :40, 0] = 255  # red top-left quadrant in coded orientation
    path = write_video(tmp_path / f"rot{rotation}.mp4", frames, 10, rotation=rotation)
    out, meta = decode_video(path, VideoParams(min_pixels=28 * 28, max_pixels=100 * 100))
    assert meta.rotation == rotation
    if rotation in (90, 270):
        assert (meta.source_height, meta.source_width) == (80, 48)
        assert out.shape[1] > out.shape[2]
    else:
        assert (meta.source_height, meta.source_width) == (48, 80)
        assert out.shape[1] < out.shape[2]
    means = _quadrant_means(out[0])
    assert max(means, key=means.get) == corner


def test_one_frame_video_is_padded_to_a_temporal_patch(tmp_path):
    path = make_video(tmp_path / "one.mp4", count=1)
    frames, meta = decode_video(path, VideoParams(**SMALL))
    assert frames.shape[0] == 2 and meta.frame_indices == (0, 0) and meta.timestamps == (0.0, 0.0)
    assert np.array_equal(frames[0], frames[1])
    assert meta.total_frames == 1 and meta.extra["padded_frames"] == 1


def test_container_without_frame_count_uses_a_demux_pass(tmp_path):
    mkv = make_video(tmp_path / "clip.mkv", count=25, fps=10)
    mp4 = make_video(tmp_path / "clip.mp4", count=25, fps=10)
    f_mkv, m_mkv = decode_video(mkv, VideoParams(**SMALL))
    f_mp4, m_mp4 = decode_video(mp4, VideoParams(**SMALL))
    assert m_mkv.total_frames == m_mp4.total_frames == 25
    assert m_mkv.frame_indices == m_mp4.frame_indices
    assert m_mkv.timestamps == pytest.approx(m_mp4.timestamps)
    assert np.array_equal(f_mkv, f_mp4)


def test_decoding_twice_is_deterministic(tmp_path):
    path = make_video(tmp_path / "clip.mp4", count=40, fps=20)
    a, meta_a = decode_video(path, VideoParams(**SMALL))
    b, meta_b = decode_video(path, VideoParams(**SMALL))
    assert np.array_equal(a, b) and meta_a == meta_b


def test_image_budget_is_independent_of_video(tmp_path):
    path = make_image(tmp_path / "pic.png", height=600, width=900)
    small, meta_small = load_image(path, ImageParams(min_pixels=28 * 28, max_pixels=100_000))
    large, meta_large = load_image(path, ImageParams(min_pixels=28 * 28, max_pixels=1_000_000))
    assert meta_small.height * meta_small.width <= 100_000 < meta_large.height * meta_large.width
    assert small.shape == (meta_small.height, meta_small.width, 3) and small.dtype == np.uint8
    assert not small.flags.writeable
    assert meta_large.height % 28 == 0 and meta_large.width % 28 == 0
    assert (meta_large.source_height, meta_large.source_width) == (600, 900)


def test_image_exif_orientation_is_applied(tmp_path):
    # Orientation 6: the stored pixels must be turned 90 degrees clockwise for display.
    path = make_image(tmp_path / "phone.jpg", height=60, width=90, orientation=6, fmt="JPEG")
    image, meta = load_image(path, ImageParams(min_pixels=28 * 28, max_pixels=200 * 200, factor=28))
    assert (meta.source_height, meta.source_width) == (90, 60)
    assert image.shape[0] > image.shape[1]
    means = _quadrant_means(image)
    assert max(means, key=means.get) == "tr"


def test_grayscale_and_alpha_images_become_rgb(tmp_path):
    from PIL import Image

    gray = tmp_path / "gray.png"
    Image.fromarray(np.full((40, 40), 128, dtype=np.uint8), mode="L").save(gray)
    rgba = tmp_path / "rgba.png"
    Image.fromarray(np.full((40, 40, 4), 200, dtype=np.uint8), mode="RGBA").save(rgba)
    for path in (gray, rgba):
        array, meta = load_image(path, ImageParams(min_pixels=28 * 28, max_pixels=56 * 56))
        assert array.shape == (meta.height, meta.width, 3)
