"""Rollout throughput: vLLM vs the transformers engine, and cached frames vs decoding.

Side by side in one process, on a tiny random model of a real architecture (CPU):

1. engines: the same video prompts (frames from the frame cache), ``n`` samples each,
   through ``VLLMEngine`` and ``HFEngine``; generated tokens per second and their ratio.
2. frame source: the same vLLM engine fed by ``FrameLoader`` over a warm local store vs by
   ``decode_video`` on the fly; load time, end-to-end time (load + generate) and ratios.
   Rounds are interleaved so both see the same background load on a shared machine.

    .venv/bin/python benchmarks/rollout_throughput.py [--family qwen2_vl] [--videos 8] [--n 4]
        [--max-tokens 32] [--rounds 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

# Source videos: seconds, fps, width, height.
SOURCE = (12, 24, 320, 240)


from _media import wait_out_racy_window  # noqa: E402  (benchmarks/ is the script folder)


def make_videos(workdir: Path, count: int) -> list[Path]:
    """Synthetic clips (a moving square on a gradient), compressible like real footage."""
    from easyvideor1.video.encode import write_video

    seconds, fps, width, height = SOURCE
    paths = []
    for index in range(count):
        path = workdir / f"clip_{index}.mp4"
        if not path.exists():
            frames = np.zeros((seconds * fps, height, width, 3), dtype=np.uint8)
            frames[..., 0] = np.linspace(0, 255, width, dtype=np.uint8)[None, None, :]
            frames[..., 2] = (40 * index) % 256
            for t in range(len(frames)):
                x = (t * 4 + 17 * index) % (width - 40)
                frames[t, 100:140, x:x + 40] = (255, 255, 0)
            write_video(path, frames, fps)
        paths.append(path)
    return paths


def requests_for(videos, n: int):
    from easyvideor1.rollout import RolloutRequest, VideoInput

    return [RolloutRequest(f"clip-{i}", messages="<video>Which object moves first? Answer A or B.",
                           videos=[VideoInput(frames, meta)], n=n) for i, (frames, meta) in enumerate(videos)]


def generated_tokens(results) -> int:
    return sum(len(c.token_ids) for r in results for c in r.completions)


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="qwen2_vl")
    parser.add_argument("--videos", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir")
    args = parser.parse_args()

    from transformers import AutoModelForImageTextToText

    from easyvideor1.cache.loader import FrameLoader
    from easyvideor1.cache.stores.local import LocalStore
    from easyvideor1.models import build_tiny_model, get_family, perturb_weights
    from easyvideor1.rollout import HFEngine, SamplingConfig, VLLMEngine
    from easyvideor1.video import VideoParams, decode_video

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="evr1_rollout_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)
    family = get_family(args.family)
    model_dir = build_tiny_model(family, workdir / f"model_{family.name}", seed=0)
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    perturb_weights(model, seed=1)
    model.save_pretrained(model_dir)

    f = family.factor
    params = VideoParams(fps=1.0, min_frames=4, max_frames=8, min_pixels=4 * f * f, max_pixels=12 * f * f, factor=f)
    paths = make_videos(workdir, args.videos)
    wait_out_racy_window(paths)
    store = LocalStore(workdir / "store")
    warm = FrameLoader(store, params, write_back=True)
    for path in paths:
        warm.load_video(path)
    loader = FrameLoader(store, params)

    sampling = SamplingConfig(max_tokens=args.max_tokens, temperature=1.0, seed=0)
    vllm = VLLMEngine(model_dir, max_model_len=2048, max_num_seqs=64)
    hf = HFEngine(model_dir)
    cached = [loader.load_video(p) for p in paths]
    frames0, meta0 = cached[0]
    print(f"family={family.name} videos={len(paths)} frames/video={meta0.num_frames} "
          f"frame={meta0.height}x{meta0.width} n={args.n} max_tokens={args.max_tokens} rounds={args.rounds}")

    # 1. Engines on identical requests (one warm-up call each first).
    requests = requests_for(cached, args.n)
    for engine in (vllm, hf):
        engine.generate(requests[:1], sampling)
    rates = {"hf": [], "vllm": []}
    for _ in range(args.rounds):
        for name, engine in (("hf", hf), ("vllm", vllm)):
            results, seconds = timed(lambda e=engine: e.generate(requests, sampling))
            rates[name].append(generated_tokens(results) / seconds)
    hf_rate, vllm_rate = statistics.median(rates["hf"]), statistics.median(rates["vllm"])
    print("\n[engines] generated tokens/s (median of rounds)")
    print(f"  transformers HFEngine (baseline): {hf_rate:10.1f}")
    print(f"  vLLM VLLMEngine                 : {vllm_rate:10.1f}")
    print(f"  ratio vLLM / HF                 : {vllm_rate / hf_rate:10.2f}x")

    # 2. Frame source feeding the same vLLM engine.
    loads = {"decode": [], "cache": []}
    totals = {"decode": [], "cache": []}
    for _ in range(args.rounds):
        for name, load in (("decode", lambda p: decode_video(p, params)), ("cache", loader.load_video)):
            videos, load_seconds = timed(lambda ld=load: [ld(p) for p in paths])
            _, gen_seconds = timed(lambda v=videos: vllm.generate(requests_for(v, args.n), sampling))
            loads[name].append(load_seconds)
            totals[name].append(load_seconds + gen_seconds)
    decode_load, cache_load = min(loads["decode"]), min(loads["cache"])
    decode_total, cache_total = min(totals["decode"]), min(totals["cache"])
    print("\n[frames -> vLLM] best of rounds, seconds for all videos")
    print(f"  on-the-fly decode_video (baseline): load {decode_load:8.3f}   load+generate {decode_total:8.3f}")
    print(f"  FrameLoader, warm local store     : load {cache_load:8.3f}   load+generate {cache_total:8.3f}")
    print(f"  ratio decode / cache              : load {decode_load / cache_load:8.1f}x  "
          f"load+generate {decode_total / cache_total:8.2f}x")
    print(f"  loader counters: {loader.stats()}")
    vllm.close()


if __name__ == "__main__":
    main()
