"""Frame cache vs decoding: load time and bytes, side by side in one process.

For a few synthetic H.264 videos (a 60 s, 30 fps, 640x360 one among them), sampled at
2 fps up to 128 frames with the default pixel budget, it times

* baseline: ``decode_video`` (decode + sample + resize + rotate), the on-the-fly path;
* cache: ``FrameLoader.load_video`` on a local store holding the blob (cache key through
  the hash index, mmap, header and parameter checks, full blake3 checksum of the frames);

interleaved (one decode, four loads, repeated) so both see the same background load on a
shared machine, and prints the ratio of the best times, plus the blob size against the
float32 layout of the same frames (T*H*W*3*4 bytes, what a float32 tensor cache would
hold). ``--with-pt`` adds the
reference layout, a pickled float32 tensor written by ``torch.save``, loaded by
``torch.load``. Loads run with the blob in the page cache (as in training, where each
video is read many times); dropping the cache needs root and would disturb other users.

    .venv/bin/python benchmarks/cache_load.py [--workdir DIR] [--repeats 5] [--with-pt]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

# name, seconds, fps, width, height
import _media  # noqa: E402  (benchmarks/ is the script folder)
import numpy as np
from _media import best_seconds  # noqa: E402

from easyvideor1.cache.blob import encode_blob
from easyvideor1.cache.loader import FrameLoader
from easyvideor1.cache.stores.local import LocalStore
from easyvideor1.video import VideoParams, decode_video

CASES = [
    ("long_60s_640x360_30fps", 60, 30, 640, 360),
    ("hd_10s_1280x720_30fps", 10, 30, 1280, 720),
    ("long_120s_320x240_25fps", 120, 25, 320, 240),
]
TARGET_SPEEDUP = 50.0
TARGET_BYTES = 0.25


def make_videos(workdir: Path) -> list[tuple[str, Path]]:
    return _media.make_videos(workdir, CASES)


def pt_load_seconds(frames: np.ndarray, workdir: Path, repeats: int) -> tuple[float, int]:
    import torch

    path = workdir / "reference_layout.pt"
    torch.save(torch.from_numpy(frames.astype(np.float32)), path)
    seconds = best_seconds(lambda: torch.load(path, weights_only=True), repeats)
    size = path.stat().st_size
    path.unlink()
    return seconds, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "evr1-bench-cache"))
    parser.add_argument("--repeats", type=int, default=5,
                        help="rounds per video, each one decode then four loads (the best of each path counts); "
                             "loads are ~50x shorter, so more easily hit by other work, hence more of them")
    parser.add_argument("--with-pt", action="store_true", help="also time the pickled float32 reference layout")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    params = VideoParams(fps=2.0, max_frames=128)
    videos = make_videos(workdir)
    store_dir = Path(tempfile.mkdtemp(prefix="store-", dir=workdir))
    try:
        return run(videos, LocalStore(store_dir), params, args)
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)


def run(videos: list[tuple[str, Path]], store: LocalStore, params: VideoParams, args: argparse.Namespace) -> int:
    loader = FrameLoader(store, params)
    workdir = Path(args.workdir)

    header = (f"{'video':<26} {'frames':>15} {'decode ms':>10} {'load ms':>8} {'speedup':>8} "
              f"{'blob MiB':>9} {'f32 MiB':>8} {'bytes':>7}")
    if args.with_pt:
        header += f" {'pt load ms':>10} {'pt MiB':>7}"
    print(f"params: fps={params.fps} max_frames={params.max_frames} max_pixels={params.max_pixels} "
          f"factor={params.factor}; {args.repeats} interleaved rounds of 1 decode + 4 loads, best of each")
    print(header)
    speedups, byte_ratios, headers = [], [], []
    for name, path in videos:
        frames, meta = decode_video(path, params)
        key = loader.key_for(path, params)
        blob = encode_blob(frames, meta, key)
        store.put(key.key, blob)
        loaded, loaded_meta = loader.load_video(path)
        if not (np.array_equal(loaded, frames) and loaded_meta == meta):
            raise RuntimeError(f"{name}: the cache returned different frames or metadata")
        # Interleaved rounds, so both paths see the same background load on a shared machine.
        decode_times, load_times = [], []
        for _ in range(args.repeats):
            decode_times.append(best_seconds(lambda p=path: decode_video(p, params), 1))
            load_times.append(best_seconds(lambda p=path: loader.load_video(p), 4))
        decode_s, load_s = min(decode_times), min(load_times)
        float32_bytes = frames.size * 4
        speedups.append(decode_s / load_s)
        byte_ratios.append(len(blob) / float32_bytes)
        headers.append(len(blob) - frames.nbytes)
        shape = "x".join(str(d) for d in frames.shape[:3])
        line = (f"{name:<26} {shape:>15} {decode_s * 1e3:>10.1f} {load_s * 1e3:>8.2f} {speedups[-1]:>7.1f}x "
                f"{len(blob) / 2**20:>9.1f} {float32_bytes / 2**20:>8.1f} {byte_ratios[-1]:>7.2%}")
        if args.with_pt:
            pt_s, pt_size = pt_load_seconds(frames, workdir, args.repeats * 2)
            line += f" {pt_s * 1e3:>10.1f} {pt_size / 2**20:>7.1f}"
        print(line, flush=True)
    stats = loader.stats()
    if stats["misses"]:
        raise RuntimeError(f"benchmark loads missed the cache: {stats}")
    geo = float(np.exp(np.mean(np.log(speedups))))
    print(f"speedup (decode / cache load): min {min(speedups):.1f}x, geometric mean {geo:.1f}x "
          f"(target >= {TARGET_SPEEDUP:.0f}x: {'met' if min(speedups) >= TARGET_SPEEDUP else 'NOT met'})")
    print(f"cache bytes / float32 bytes: frame payload 25.000% (uint8 vs float32; target <= {TARGET_BYTES:.0%}: met); "
          f"whole blob with its {min(headers)}-{max(headers)} byte header: max {max(byte_ratios):.3%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
