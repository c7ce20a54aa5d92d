"""Real media files for the video and cache tests (small, so every test stays fast)."""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

from easyvideor1.video.encode import write_video


def moving_frames(count: int, height: int = 48, width: int = 64, seed: int = 0) -> np.ndarray:
    """A bright square moving over a gradient; frame ``i`` carries ``i`` in its top-left block."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 60, size=(height, width, 3), dtype=np.uint8)
    frames = np.repeat(base[None], count, axis=0)
    for i in range(count):
        x = (i * 3) % max(1, width - 12)
        frames[i, 10:22, x:x + 12] = (255, 255, 255)
        frames[i, :8, :8] = (min(255, i * 4) % 256, 0, 0)
    return frames


def make_video(path: Path, count: int = 30, fps: float = 10, height: int = 48, width: int = 64,
               rotation: int = 0, seed: int = 0, codec: str = "libx264") -> Path:
    return write_video(path, moving_frames(count, height, width, seed), fps, rotation=rotation, codec=codec)


def make_vfr_video(path: Path, pts_ms: list[int], height: int = 48, width: int = 64) -> Path:
    """H.264 in mp4 with explicit, irregular presentation times (milliseconds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = moving_frames(len(pts_ms), height, width)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.time_base = Fraction(1, 1000)
        stream.time_base = Fraction(1, 1000)
        for frame_rgb, pts in zip(frames, pts_ms):
            frame = av.VideoFrame.from_ndarray(frame_rgb, format="rgb24")
            frame.pts, frame.time_base = pts, Fraction(1, 1000)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def make_faststart_video(path: Path, count: int = 60, fps: float = 10) -> Path:
    """An mp4 with its index (moov) first, so a truncated copy still has a valid header."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = moving_frames(count)
    with av.open(str(path), "w", options={"movflags": "faststart"}) as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        stream.options = {"crf": "18", "g": "5"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def make_audio_only(path: Path, seconds: float = 0.5) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rate = 16000
    samples = (np.sin(np.arange(int(rate * seconds)) / 10.0) * 10000).astype(np.int16)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(samples[None], format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def make_unknown_codec(path: Path) -> Path:
    """An AVI whose codec tag no FFmpeg decoder knows (mpeg4 data relabelled 'QQQQ')."""
    make_video(path, count=4, codec="mpeg4")
    data = path.read_bytes()
    assert data.count(b"FMP4") >= 1
    path.write_bytes(data.replace(b"FMP4", b"QQQQ"))
    return path


def make_header_only_mkv(path: Path, height: int = 48, width: int = 64) -> Path:
    """A Matroska file whose header is intact and whose frame data is zeroed: the size is
    readable from the header, no frame is decodable."""
    full = path.with_name(path.stem + "-full.mkv")
    make_video(full, count=10, height=height, width=width)
    data = full.read_bytes()
    cluster = data.find(b"\x1f\x43\xb6\x75")  # the first Cluster element: frame data starts here
    assert cluster > 0
    keep = cluster + 40  # the cluster and block headers stay parseable
    path.write_bytes(data[:keep] + bytes(len(data) - keep))
    full.unlink()
    return path


def make_image(path: Path, height: int = 60, width: int = 90, orientation: int | None = None,
               fmt: str = "PNG") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    array = np.zeros((height, width, 3), dtype=np.uint8)
    array[: height // 3, : width // 3] = (255, 0, 0)  # red marks the top-left corner
    array[..., 2] = np.linspace(0, 255, width, dtype=np.uint8)[None, :]
    image = Image.fromarray(array)
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        image.save(path, format=fmt, exif=exif.tobytes())
    else:
        image.save(path, format=fmt)
    return path


def png_bytes(height: int, width: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def make_gop_video(path: Path, count: int = 120, fps: float = 30, keyint: int = 10, bframes: int = 2,
                   start_frame: int = 0, codec: str = "libx264", open_gop: bool = False, height: int = 48,
                   width: int = 64) -> Path:
    """A constant-rate video with a chosen keyframe interval and B-frames (pts != dts).

    ``start_frame`` > 0 gives a stream whose first PTS is ``start_frame`` frame intervals
    (an MP4 edit list or Matroska timestamps); the container follows the suffix.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = moving_frames(count, height, width)
    rate = Fraction(fps).limit_denominator(1001)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if codec == "libx264":
            params = f"keyint={keyint}:min-keyint={keyint}:scenecut=0:bframes={bframes}"
            stream.options = {"preset": "veryfast", "x264-params": params + (":open-gop=1" if open_gop else "")}
        elif codec == "libx265":
            stream.options = {"x265-params": f"keyint={keyint}:min-keyint={keyint}:bframes={bframes}:log-level=error"}
        else:
            stream.options = {"g": str(keyint)}
        for i, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = start_frame + i, 1 / rate
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
