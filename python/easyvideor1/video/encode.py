"""Write frames to a video file with PyAV (synthetic data, test fixtures, benchmarks)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np


def write_video(
    path: str | Path,
    frames: np.ndarray,
    fps: float,
    *,
    codec: str = "libx264",
    crf: int = 23,
    pix_fmt: str = "yuv420p",
    rotation: int = 0,
) -> Path:
    """Encode ``frames`` (T, H, W, 3) uint8 RGB at a constant ``fps``.

    ``rotation`` (degrees) is stored as display-matrix side data, the way phones tag
    portrait video, so decoders must apply it.
    """
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be (T, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rate = Fraction(fps).limit_denominator(1001)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=rate)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = pix_fmt
        if codec in ("libx264", "libx265"):
            stream.options = {"crf": str(crf), "preset": "veryfast", "tune": "zerolatency"}
        if rotation:
            # Clockwise like the legacy ``rotate`` tag (which FFmpeg >= 7 no longer writes);
            # the display matrix takes counter-clockwise degrees.
            stream.set_display_rotation(-rotation)
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
