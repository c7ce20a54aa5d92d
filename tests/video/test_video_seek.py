"""Clip decoding by seeking: the same result as a full decode, for far fewer decoded frames."""

from __future__ import annotations

import av
import numpy as np
import pytest
from video_samples import make_gop_video, make_vfr_video, make_video

from easyvideor1.data.synth_render import make_long_video
from easyvideor1.errors import MediaDecodeError
from easyvideor1.video import VideoParams, decode_video
from easyvideor1.video import seek as seek_module
from easyvideor1.video.decode import decode_stats, reset_decode_stats
from easyvideor1.video.seek import _Bitstream, _vp9_key_frame

SMALL = dict(min_pixels=28 * 28, max_pixels=64 * 64)


def params(**kw) -> VideoParams:
    return VideoParams(**{**SMALL, "fps": 4.0, "min_frames": 2, **kw})


def decode_both(path, p: VideoParams) -> tuple[np.ndarray, object, dict[str, int]]:
    """Decode with and without the shortcut; assert they agree; the shortcut's result and stats."""
    full_frames, full_meta = decode_video(path, p, seek=False)
    reset_decode_stats()
    frames, meta = decode_video(path, p)
    stats = decode_stats()
    assert frames.dtype == np.uint8 and not frames.flags.writeable
    assert frames.shape == full_frames.shape and np.array_equal(frames, full_frames)
    assert meta == full_meta
    assert meta.as_dict() == full_meta.as_dict()  # extra (codec, padding) included
    return frames, meta, stats


def packets(path) -> list[tuple[int, bool]]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return sorted((p.pts, bool(p.is_keyframe)) for p in container.demux(stream) if p.size)


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("seek")
    return {
        # 12 s at 30 fps: a keyframe every 10 frames, B-frames (PTS != DTS).
        "short_gop": make_gop_video(root / "short_gop.mp4", count=360, keyint=10, bframes=2),
        # x264's default keyint (250): the seek lands up to 8 s before the window.
        "long_gop": make_gop_video(root / "long_gop.mp4", count=600, keyint=250, bframes=3),
        # The project's benchmark video (zero-latency x264, keyint 250, no B-frames).
        "long_video": make_long_video(root / "long_video.mp4", seconds=20, fps=30, width=96, height=64),
        # First PTS 1.5 s: an MP4 edit list and Matroska timestamps (no frame count in the header).
        "late_start_mp4": make_gop_video(root / "late.mp4", count=360, keyint=15, start_frame=45),
        "late_start_mkv": make_gop_video(root / "late.mkv", count=360, keyint=15, start_frame=45),
        "vp9": make_gop_video(root / "vp9.webm", count=360, keyint=15, codec="libvpx-vp9"),
    }


ALL = ["short_gop", "long_gop", "long_video", "late_start_mp4", "late_start_mkv", "vp9"]

# (start_s, end_s) in seconds of video time: the start, the middle, the end, open-ended,
# past the end (clamped), shorter than one frame interval, on/next to a keyframe.
WINDOWS = [
    (0.0, 1.0), (0.5, 2.5), (4.0, 5.5), (6.0, 7.0), (5.01, 5.02), (3.3333, 3.4), (3.3, 4.0), (3.4, 4.2),
    (9.0, None), (9.5, 1000.0), (11.9, 12.5), (2.0, 2.1), (7.99, 9.0),
]


@pytest.mark.parametrize("name", ALL)
def test_seek_and_full_decode_are_identical(videos, name):
    path = videos[name]
    seeks = 0
    for start, end in WINDOWS:
        for p in (params(start_s=start, end_s=end), params(fps=30.0, max_frames=64, start_s=start, end_s=end)):
            _, meta, stats = decode_both(path, p)
            assert not any(key.startswith("fallback") for key in stats), stats
            seeks += stats.get("seeks", 0)
            assert meta.clip is not None and meta.clip[0] == start
    assert seeks > 0


@pytest.mark.parametrize("name, start, end", [
    ("short_gop", 6.0, 7.0), ("long_gop", 17.0, None), ("long_video", 17.0, 18.0), ("late_start_mkv", 6.0, 7.0),
])
def test_the_seek_happens_and_decodes_few_frames(videos, name, start, end):
    path = videos[name]
    total = len(packets(path))
    keyframes = [i for i, (_, key) in enumerate(packets(path)) if key]
    _, meta, stats = decode_both(path, params(start_s=start, end_s=end))
    assert stats["seeks"] == 1 and stats["clip_passes"] == 1 and "full_passes" not in stats
    first = meta.frame_indices[0]
    keyframe = max(k for k in keyframes if k <= first)
    # The first frame, then the keyframe's GOP up to the window's last frame: nothing more.
    assert stats["frames_decoded"] == 1 + meta.frame_indices[-1] - keyframe + 1 < total / 2


def test_a_window_near_the_start_stops_after_its_last_frame(videos):
    path = videos["long_gop"]
    _, meta, stats = decode_both(path, params(start_s=0.5, end_s=1.5))
    assert "seeks" not in stats and stats["frames_decoded"] == meta.frame_indices[-1] + 1 < 60
    assert meta.total_frames == 600 and meta.duration == pytest.approx(20.0)


def test_late_start_keeps_source_times_and_indices(videos):
    for name in ("late_start_mp4", "late_start_mkv"):
        _, meta, stats = decode_both(videos[name], params(start_s=4.0, end_s=5.0))
        assert stats["seeks"] == 1
        # Times count from the stream start (1.5 s of PTS): frame i is at i / 30 s.
        assert meta.frame_indices[0] == 120 and meta.timestamps[0] == pytest.approx(4.0, abs=2e-3)


def test_variable_frame_rate_falls_back_to_the_full_decode(tmp_path):
    pts_ms = [0, 40, 80, 500, 1000, 1040, 1500, 2000, 2100, 2600] + [3000 + 40 * i for i in range(100)]
    path = make_vfr_video(tmp_path / "vfr.mp4", pts_ms)
    _, meta, stats = decode_both(path, params(fps=8.0, start_s=0.9, end_s=2.05))
    assert stats["fallback: variable frame rate"] == 1 and "seeks" not in stats and "clip_passes" not in stats
    assert all(0.9 - 1e-6 <= t < 2.05 for t in meta.timestamps)
    # The estimate (index / fps) disagrees with the PTS: a second pass, which stops after
    # the window's last frame instead of decoding the 110 frames again.
    assert stats["full_passes"] == 2 and stats["frames_decoded"] == 110 + 8


@pytest.mark.parametrize("make, reason", [
    (lambda d: make_video(d / "mpeg4.avi", count=90, fps=30, codec="mpeg4"), "container not verified for seeking"),
    (lambda d: make_video(d / "mpeg4.mp4", count=90, fps=30, codec="mpeg4"), "decoder not verified for seeking"),
])
def test_unverified_formats_fall_back(tmp_path, make, reason):
    _, _, stats = decode_both(make(tmp_path), params(start_s=2.0, end_s=2.5))
    assert stats[f"fallback: {reason}"] == 1


def test_open_gop_keyframes_are_not_seek_points(tmp_path):
    # x264's open-GOP keyframes are I-frames after which B-frames still refer back: only the
    # IDR at the start is a random-access point, so the decode starts there (and stops early).
    path = make_gop_video(tmp_path / "open.mp4", count=300, keyint=30, bframes=3, open_gop=True)
    assert sum(key for _, key in packets(path)) > 1
    _, meta, stats = decode_both(path, params(start_s=6.0, end_s=7.0))
    assert "seeks" not in stats and not any(key.startswith("fallback") for key in stats)
    assert stats["frames_decoded"] == meta.frame_indices[-1] + 1


# The locked PyAV wheel bundles FFmpeg with libx265: no skip, a build without it must fail here.
def test_hevc_seeks_to_irap_frames(tmp_path):
    path = make_gop_video(tmp_path / "hevc.mp4", count=240, keyint=15, bframes=3, codec="libx265")
    for start, end in ((4.0, 5.0), (7.5, None), (2.5, 2.51)):
        _, _, stats = decode_both(path, params(start_s=start, end_s=end))
        assert stats.get("seeks") == 1, stats


def test_a_seek_that_lands_after_the_window_falls_back(videos, monkeypatch):
    real = seek_module.PacketTable.seek_point

    def too_late(self, first_index, min_skip):
        point = real(self, first_index, min_skip)
        later = [p for p in self.seek_points if p[0] > first_index]
        return (point[0], later[0][1]) if point and later else point  # the next keyframe's timestamp

    monkeypatch.setattr(seek_module.PacketTable, "seek_point", too_late)
    _, _, stats = decode_both(videos["short_gop"], params(start_s=5.05, end_s=5.5))
    assert stats["seeks"] == 1 and stats["fallback: decoded frames do not follow the packet table"] == 1
    assert stats["full_passes"] == 1


def test_errors_are_the_full_decodes(videos):
    for seek in (True, False):
        with pytest.raises(MediaDecodeError, match=r"clip window \[13, 20\] s starts at or after the end of the "
                                                   r"video \(12\.000 s\)"):
            decode_video(videos["short_gop"], params(start_s=13.0, end_s=20.0), seek=seek)


def test_whole_video_decodes_do_not_use_the_packet_table(videos):
    reset_decode_stats()
    decode_video(videos["short_gop"], params())
    stats = decode_stats()
    assert stats["full_passes"] == 1 and stats["frames_decoded"] == 360 and "clip_passes" not in stats


def test_vp9_key_frame_header():
    assert _vp9_key_frame(bytes([0b10000010]))  # profile 0, shown key frame
    assert not _vp9_key_frame(bytes([0b10000110]))  # frame_type 1: inter
    assert not _vp9_key_frame(bytes([0b10001000]))  # show_existing_frame
    assert _vp9_key_frame(bytes([0b10110000]))  # profile 3: a reserved bit first
    assert not _vp9_key_frame(bytes([0b00000010])) and not _vp9_key_frame(b"")


def nal(kind: int, payload: bytes) -> bytes:
    """One length-prefixed (4-byte) H.264 NAL unit."""
    unit = bytes([0x60 | kind]) + payload
    return len(unit).to_bytes(4, "big") + unit


SPS_A, SPS_B = nal(7, b"\x64\x00\x1e\xaa"), nal(7, b"\x64\x00\x1e\xbb")
IDR, SLICE = nal(5, b"\x88\x80"), nal(1, b"\x9a\x00")


def h264(extradata_sets: bytes = SPS_A) -> _Bitstream:
    bitstream = _Bitstream.for_stream("h264", bytes([1, 0x64, 0, 0x1E, 0xFF, 0xE1]) + extradata_sets[4:])
    assert isinstance(bitstream, _Bitstream) and bitstream.length_size == 4
    return bitstream


@pytest.mark.parametrize("first, later, ok", [
    (IDR, [SPS_A + IDR, SLICE], True),  # repeats of the header's set
    (SPS_B + IDR, [SPS_B + IDR, SLICE], True),  # repeats of the first packet's set
    (SPS_B + IDR, [SPS_A + IDR], False),  # the header's again after the first packet replaced it
    (IDR, [SLICE, SPS_B + IDR], False),  # a new set in the middle
])
def test_in_band_parameter_sets(first, later, ok):
    bitstream = h264()
    reasons = [bitstream.check(first, first=True)] + [bitstream.check(packet, first=False) for packet in later]
    assert (reasons[-1] is None) == ok and all(r is None for r in reasons[:-1])


def test_h264_random_access_is_an_idr():
    bitstream = h264()
    assert bitstream.random_access(SPS_A + IDR) and bitstream.random_access(IDR)
    assert not bitstream.random_access(nal(1, b"\x88"))  # an I-frame that is not an IDR
    assert not bitstream.random_access(b"\x00\x00\x00\x09\x65")  # malformed: length past the end
    assert _Bitstream.for_stream("h264", b"\x00\x00\x00\x01\x67") == "H.264 without an avcC header (Annex B)"
