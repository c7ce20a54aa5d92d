"""Frames from the frame-cache service over loopback HTTP vs decoding them locally, side by side.

For a few synthetic H.264 videos, sampled at 2 fps up to 128 frames with the default pixel
budget, it starts ``evr1 serve frame-cache`` on a temporary local store (a child process on
127.0.0.1, stopped by its pid), has the service build the cache (``POST /v1/builds``), and
times in this process

* baseline: ``decode_video`` (decode + sample + resize + rotate), the on-the-fly path;
* service: ``FrameLoader.load_video`` over ``open_store("http://127.0.0.1:PORT")`` (cache key
  through the hash index, ``GET /v1/blobs/{key}`` streamed over loopback, header, parameter
  and blake3 checks of the frames);

checks that both give identical frames and metadata, and prints per-video times, the
ratio (decode time / service load time) and the HTTP throughput.

    .venv/bin/python benchmarks/frame_service.py [--workdir DIR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from easyvideor1.cache.loader import FrameLoader
from easyvideor1.cache.stores.base import open_store
from easyvideor1.video import VideoParams, decode_video

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# name, seconds, fps, width, height
import _media  # noqa: E402  (benchmarks/ is the script folder)
from _media import best_seconds  # noqa: E402

from services.frame_cache.launch import FrameCacheServer  # noqa: E402

CASES = [
    ("clip_30s_640x360_30fps", 30, 30, 640, 360),
    ("hd_8s_1280x720_30fps", 8, 30, 1280, 720),
    ("long_90s_320x240_25fps", 90, 25, 320, 240),
]


def make_videos(workdir: Path) -> list[tuple[str, Path]]:
    return _media.make_videos(workdir, CASES)


def build_through_service(url: str, videos: list[Path], params: VideoParams) -> dict:
    body = {"videos": [str(p) for p in videos], "fps": params.fps, "max_frames": params.max_frames}
    with httpx.Client(base_url=url, timeout=60) as http:
        build_id = http.post("/v1/builds", json=body).raise_for_status().json()["build_id"]
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            status = http.get(f"/v1/builds/{build_id}").json()
            if status["status"] in ("done", "failed"):
                if status["status"] != "done" or status["counts"]["failed"]:
                    raise RuntimeError(f"the service could not build the benchmark videos: {status}")
                return status
            time.sleep(0.2)
    raise RuntimeError("the service build did not finish within 600 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "evr1-bench-frame-service"))
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per video and path (the best counts)")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    params = VideoParams(fps=2.0, max_frames=128)
    videos = make_videos(workdir)
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=workdir))
    env = {**os.environ, "EVR1_HASH_INDEX_DIR": str(scratch / "server-index")}
    os.environ["EVR1_HASH_INDEX_DIR"] = str(scratch / "client-index")
    server = FrameCacheServer(str(scratch / "store"), ["--build-workers", "1", "--build-processes", "2",
                                                            "--data-roots", str(workdir)], env=env)
    try:
        server.start()
        started = time.perf_counter()
        status = build_through_service(server.url, [p for _, p in videos], params)
        print(f"service build: {status['counts']['built']} videos in {time.perf_counter() - started:.1f} s "
              f"({status['bytes_written'] / 2**20:.1f} MiB written)")
        with open_store(server.url) as store:
            return run(videos, FrameLoader(store, params), params, args.repeats)
    finally:
        server.close()
        shutil.rmtree(scratch, ignore_errors=True)


def run(videos: list[tuple[str, Path]], loader: FrameLoader, params: VideoParams, repeats: int) -> int:
    print(f"params: fps={params.fps} max_frames={params.max_frames} max_pixels={params.max_pixels}; "
          f"best of {repeats} runs each, both paths in this process")
    print(f"{'video':<26} {'frames':>14} {'frame MiB':>9} {'decode ms':>10} {'service ms':>11} {'ratio':>7} "
          f"{'MiB/s':>7}")
    ratios, total_decode, total_load = [], 0.0, 0.0
    for name, path in videos:
        frames, meta = decode_video(path, params)
        served, served_meta = loader.load_video(path)
        if not (np.array_equal(served, frames) and served_meta == meta):
            raise RuntimeError(f"{name}: the service returned different frames or metadata")
        decode_s = best_seconds(lambda p=path: decode_video(p, params), repeats)
        load_s = best_seconds(lambda p=path: loader.load_video(p), repeats)
        ratios.append(decode_s / load_s)
        total_decode += decode_s
        total_load += load_s
        blob_mib = frames.nbytes / 2**20
        shape = "x".join(str(d) for d in frames.shape[:3])
        print(f"{name:<26} {shape:>14} {blob_mib:>9.1f} {decode_s * 1e3:>10.1f} {load_s * 1e3:>11.1f} "
              f"{ratios[-1]:>6.1f}x {blob_mib / load_s:>7.0f}", flush=True)
    stats = loader.stats()
    if stats["misses"] or stats["fallbacks_store_error"]:
        raise RuntimeError(f"benchmark loads did not come from the service: {stats}")
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"ratio (local decode / service load): min {min(ratios):.1f}x, geometric mean {geo:.1f}x, "
          f"all videos {total_decode / total_load:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
