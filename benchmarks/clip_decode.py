"""Clip decoding: full decode vs seek to the keyframe before the window, side by side.

A clip (``VideoParams(start_s=..., end_s=...)``) near the end of a long video, decoded
two ways in one process, interleaved so both see the same background load:

* full: ``decode_video(path, params, seek=False)``, the reference path: decode the whole
  video (every frame's PTS, the count and the duration come from it), keep the window's;
* seek: ``decode_video(path, params)``: a demux-only pass for the packet table, then a seek
  to the random-access keyframe at or before the window and a decode up to its last frame.

It checks that both give identical frames and metadata, and prints the best time of each,
the ratio, and the frames each decoded (``decode_stats``). The video (10 min, 640x360,
30 fps, x264 keyint 250 as ``make_long_video`` writes it) is encoded once into ``--workdir``
and kept between runs.

    .venv/bin/python benchmarks/clip_decode.py [--workdir DIR] [--repeats 3] [--start 560 --end 590]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import _media  # noqa: E402  (benchmarks/ is the script folder)
import numpy as np
from _media import best_seconds  # noqa: E402

from easyvideor1.video import VideoParams, decode_video
from easyvideor1.video.decode import decode_stats, reset_decode_stats

# name, seconds, fps, width, height
CASES = [("long_600s_640x360_30fps", 600, 30, 640, 360)]


def frames_decoded(path: Path, params: VideoParams, seek: bool) -> dict[str, int]:
    reset_decode_stats()
    decode_video(path, params, seek=seek)
    return decode_stats()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "evr1-bench-clip"))
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; the best time of each path counts")
    parser.add_argument("--start", type=float, default=560.0, help="window start, seconds")
    parser.add_argument("--end", type=float, default=590.0, help="window end, seconds")
    parser.add_argument("--fps", type=float, default=2.0, help="sampling rate inside the window")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    params = VideoParams(fps=args.fps, max_frames=128, start_s=args.start, end_s=args.end)
    print(f"params: fps={params.fps} max_frames={params.max_frames} max_pixels={params.max_pixels} window "
          f"[{args.start:g}, {args.end:g}] s; {args.repeats} interleaved rounds, best of each")
    print(f"{'video':<26} {'frames':>13} {'full s':>8} {'seek s':>8} {'speedup':>8} {'decoded (full / seek)':>22}")
    for name, path in _media.make_videos(workdir, CASES):
        full_frames, full_meta = decode_video(path, params, seek=False)
        frames, meta = decode_video(path, params)
        if not (np.array_equal(frames, full_frames) and meta == full_meta and meta.as_dict() == full_meta.as_dict()):
            raise RuntimeError(f"{name}: the seek path returned different frames or metadata")
        full_stats, seek_stats = frames_decoded(path, params, False), frames_decoded(path, params, True)
        if seek_stats.get("seeks") != 1:
            raise RuntimeError(f"{name}: the seek path did not seek: {seek_stats}")
        full_times, seek_times = [], []
        for _ in range(args.repeats):
            full_times.append(best_seconds(lambda p=path: decode_video(p, params, seek=False), 1))
            seek_times.append(best_seconds(lambda p=path: decode_video(p, params), 1))
        full_s, seek_s = min(full_times), min(seek_times)
        shape = "x".join(str(d) for d in frames.shape[:3])
        decoded = f"{full_stats['frames_decoded']} / {seek_stats['frames_decoded']}"
        print(f"{name:<26} {shape:>13} {full_s:>8.3f} {seek_s:>8.3f} {full_s / seek_s:>7.1f}x {decoded:>22}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
