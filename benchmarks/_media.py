"""Shared by the benchmarks: benchmark videos and a noise-resistant timer."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from easyvideor1.cache.key import RACY_WINDOW_NS


def make_videos(workdir: Path, cases: Sequence[tuple[str, float, float, int, int]]) -> list[tuple[str, Path]]:
    """H.264 videos ``(name, seconds, fps, width, height)`` under ``workdir`` (kept between runs)."""
    from easyvideor1.data.synth import make_long_video

    videos = []
    for seed, (name, seconds, fps, width, height) in enumerate(cases):
        path = workdir / f"{name}.mp4"
        if not path.exists():
            print(f"encoding {path.name} ...", flush=True)
            make_long_video(path, seconds=seconds, fps=fps, width=width, height=height, seed=seed)
        videos.append((name, path))
    wait_out_racy_window([path for _, path in videos])
    return videos


def wait_out_racy_window(paths: Sequence[Path]) -> None:
    """A file modified within the racy window is re-hashed on every load; real data is older."""
    newest = max(os.stat(path).st_mtime_ns for path in paths)
    wait = (newest + RACY_WINDOW_NS - time.time_ns()) / 1e9
    if wait > 0:
        time.sleep(wait + 0.1)


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` runs: the least disturbed by other work on the machine."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
