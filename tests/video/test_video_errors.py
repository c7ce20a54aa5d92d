"""Every kind of bad input raises a typed MediaError naming the file and the reason, fast."""

from __future__ import annotations

import os

import pytest
from video_samples import (
    make_audio_only,
    make_faststart_video,
    make_header_only_mkv,
    make_image,
    make_unknown_codec,
    make_video,
    png_bytes,
)

from easyvideor1.errors import MediaDecodeError, MediaError, MediaMissingError, MediaTooLargeError
from easyvideor1.video import ImageParams, VideoParams, decode_video, load_image

pytestmark = pytest.mark.timeout(30)
SMALL_BUDGET = dict(min_pixels=28 * 28, max_pixels=64 * 64)
PARAMS = VideoParams(**SMALL_BUDGET)


def expect(error: type[MediaError], path, match: str, params: VideoParams = PARAMS) -> MediaError:
    with pytest.raises(error, match=match) as info:
        decode_video(path, params)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    return info.value


def test_missing_file(tmp_path):
    expect(MediaMissingError, tmp_path / "nope.mp4", "no such file")


def test_zero_byte_file(tmp_path):
    path = tmp_path / "empty.mp4"
    path.touch()
    expect(MediaDecodeError, path, "empty file")


def test_directory(tmp_path):
    expect(MediaDecodeError, tmp_path, "directory")


def test_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / "pipe.mp4"
    os.mkfifo(path)
    expect(MediaDecodeError, path, "not a regular file")


def test_garbage_bytes(tmp_path):
    path = tmp_path / "junk.mp4"
    path.write_bytes(b"\x00\x01not a video" * 300)  # fixed bytes: random ones can probe as a subtitle file
    expect(MediaDecodeError, path, "not a readable media container")


def test_truncated_mp4_without_index(tmp_path):
    path = make_video(tmp_path / "clip.mp4", count=40)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # the index (moov) is at the end: gone
    expect(MediaDecodeError, path, "not a readable media container")


def test_truncated_mp4_with_intact_index(tmp_path):
    path = make_faststart_video(tmp_path / "fast.mp4", count=60)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.45)])
    expect(MediaDecodeError, path, "truncated or corrupt")


def test_audio_only(tmp_path):
    path = make_audio_only(tmp_path / "sound.wav")
    expect(MediaDecodeError, path, "no video stream .*audio")


def test_unsupported_codec(tmp_path):
    path = make_unknown_codec(tmp_path / "odd.avi")
    expect(MediaDecodeError, path, "unsupported codec")


def test_huge_resolution_is_refused_from_the_header_before_decoding(tmp_path):
    # A valid header and no decodable frame: only a check made before decoding can name the size.
    path = make_header_only_mkv(tmp_path / "header.mkv", height=48, width=64)
    expect(MediaTooLargeError, path, "resolution 64x48", VideoParams(max_source_pixels=1000, **SMALL_BUDGET))
    expect(MediaDecodeError, path, "no decodable video frames|the video stream has no frames")


def test_too_long_video(tmp_path):
    path = make_video(tmp_path / "long.mp4", count=30, fps=10)
    expect(MediaTooLargeError, path, "duration 3.0s exceeds max_duration_s=1",
           VideoParams(max_duration_s=1.0, **SMALL_BUDGET))


def test_image_errors(tmp_path):
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"\x89PNG not really")
    with pytest.raises(MediaDecodeError, match="not a readable image") as info:
        load_image(junk, ImageParams())
    assert info.value.path == str(junk)

    cut = tmp_path / "cut.png"
    cut.write_bytes(png_bytes(200, 200)[:120])
    with pytest.raises(MediaDecodeError, match=str(cut)):
        load_image(cut, ImageParams())

    big = make_image(tmp_path / "big.png", height=300, width=400)
    with pytest.raises(MediaTooLargeError, match="resolution 400x300"):
        load_image(big, ImageParams(max_source_pixels=100_000))

    with pytest.raises(MediaMissingError):
        load_image(tmp_path / "none.png", ImageParams())
    empty = tmp_path / "empty.jpg"
    empty.touch()
    with pytest.raises(MediaDecodeError, match="empty file"):
        load_image(empty, ImageParams())
