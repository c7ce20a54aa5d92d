"""Evaluation throughput: the async pipeline vs synchronous batched generation, side by side.

One process, one engine (the same ``AsyncEvalEngine``: vLLM ``AsyncLLM`` on CPU, tiny
Qwen2.5-VL), the same samples, frame settings, greedy sampling and concurrency (the
synchronous batch size = the pipeline's ``max_in_flight``). Variants:

* synchronous, decoding (what reference evaluation scripts do): for each batch, decode its
  videos one after another, submit the batch, wait for all of it, score it;
* the same reading a frame cache;
* the async pipeline decoding on a miss (I/O workers overlapped with generation);
* the async pipeline on its first run with ``write_back`` (decodes each video once and
  stores it on the way: this run builds the cache);
* the async pipeline over the frame cache (every evaluation after the first: each
  checkpoint of an RL run, before/after comparisons).

The headline ratio is the shipped pipeline over the cache against the synchronous decoding
baseline; the other rows split it into what decoding once (the cache) and what overlapping
(the pipeline) contribute, and the write-back row is what a first evaluation costs.

    .venv/bin/python benchmarks/eval_pipeline.py [--samples 48] [--seconds 20] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("EVR1_LOG_LEVEL", "WARNING")
# The engine core's OpenMP threads sleep while waiting (the eval engine sets this anyway).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from easyvideor1.cache import FrameLoader, open_store  # noqa: E402
from easyvideor1.data.synth_render import make_long_video  # noqa: E402
from easyvideor1.eval import EvalConfig, ScoringContext, get_benchmark, run_eval  # noqa: E402
from easyvideor1.eval.engine import AsyncEvalEngine  # noqa: E402
from easyvideor1.eval.pipeline import scored_record  # noqa: E402
from easyvideor1.eval.results import read_results  # noqa: E402
from easyvideor1.eval.runner import video_params  # noqa: E402
from easyvideor1.models.inputs import VideoInput  # noqa: E402
from easyvideor1.models.tiny import build_tiny_model  # noqa: E402
from easyvideor1.rollout.base import RolloutRequest, SamplingConfig  # noqa: E402

COLOURS = ["red", "green", "blue", "yellow"]
FRAMES = {"fps": 1.0, "min_frames": 4, "max_frames": 8, "min_pixels": 56 * 56, "max_pixels": 112 * 112}


def make_dataset(folder: Path, samples: int, seconds: float, width: int = 480, height: int = 272) -> Path:
    """``samples`` distinct H.264 clips (30 fps) and a training-format JSONL of MC questions."""
    rows = []
    for i in range(samples):
        video = folder / "media" / f"{i:03d}.mp4"
        make_long_video(video, seconds=seconds, fps=30, width=width, height=height, seed=i)
        rows.append({"problem_id": f"s{i}", "problem": "<video>\nWhich colour dominates the scene?",
                     "problem_type": "multiple choice", "options": [f"{c}" for c in COLOURS],
                     "answer": "ABCD"[i % 4], "videos": [f"media/{i:03d}.mp4"]})
    data = folder / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def synchronous(
    engine: AsyncEvalEngine, data: Path, params, sampling: SamplingConfig, batch: int, store: str | None = None
) -> tuple[float, dict]:
    """Batch by batch: load the batch's frames one video after another (decode, or read the
    cache), submit the whole batch, wait for every answer, score. Returns (seconds, responses)."""
    bench = get_benchmark("jsonl")
    ctx = ScoringContext()
    started = time.perf_counter()
    items = bench.load(data)
    loader = FrameLoader(open_store(store) if store else None, params)
    responses = {}

    async def generate(requests: list[RolloutRequest]) -> list:
        return await asyncio.gather(*(engine.generate(r, sampling) for r in requests))

    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        loaded = [[loader.load_video(p) for p in item.videos] for item in chunk]
        requests = [
            RolloutRequest(
                request_id=item.key,
                messages=bench.prompt(item, [m for _, m in media], "direct"),
                videos=[VideoInput(f, m) for f, m in media],
            )
            for item, media in zip(chunk, loaded)
        ]
        results = engine.run(generate(requests))
        for item, result, media in zip(chunk, results, loaded):
            text = result.completions[0].text
            scored_record(bench, item, text, ctx, [m for _, m in media])
            responses[item.id] = text
    return time.perf_counter() - started, responses


def pipeline(
    engine: AsyncEvalEngine,
    model: str,
    data: Path,
    out: Path,
    sampling: SamplingConfig,
    concurrency: int,
    io_workers: int,
    store: str | None,
    write_back: bool = False,
) -> tuple[float, dict]:
    shutil.rmtree(out, ignore_errors=True)
    config = EvalConfig(
        model=model,
        benchmarks={"jsonl": data},
        out_dir=out,
        store=store,
        write_back=write_back,
        video=dict(FRAMES),
        sampling=sampling,
        max_in_flight=concurrency,
        io_workers=io_workers,
        progress=False,
    )
    result = run_eval(config, engine)
    if result["summaries"]["jsonl"]["n_failed"]:
        raise RuntimeError(f"pipeline failures: {result['summaries']['jsonl']['failures'][:3]}")
    # The pipeline's own wall time (load, generate, score, append); writing the reports after
    # it (JSON, markdown, the plot) has no counterpart in the baseline.
    return result["run"]["wall_s"], {r["id"]: r["response"] for r in read_results(out / "results.jsonl")}


def agreement(a: dict, b: dict) -> str:
    same = sum(a[k] == b.get(k) for k in a)
    return f"{same}/{len(a)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each 480x272 30 fps clip")
    parser.add_argument(
        "--concurrency", type=int, default=16, help="synchronous batch size = pipeline max_in_flight"
    )
    parser.add_argument("--io-workers", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2, help="alternating rounds; medians are reported")
    parser.add_argument("--model", help="model directory (default: a tiny Qwen2.5-VL built here)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="evr1-evalbench-"))
    try:
        model = args.model or str(build_tiny_model("qwen2_5_vl", work / "model", seed=0))
        t = time.perf_counter()
        data = make_dataset(work / "data", args.samples, args.seconds)
        print(
            f"dataset: {args.samples} clips of {args.seconds:g} s (480x272, 30 fps) "
            f"in {time.perf_counter() - t:.1f} s",
            flush=True,
        )
        sampling = SamplingConfig(max_tokens=args.max_tokens, temperature=0.0, seed=0)
        # No prefix or multimodal-input caching: every round must do the same work, as a
        # first evaluation of each sample does.
        engine = AsyncEvalEngine(
            model, max_in_flight=args.concurrency, max_model_len=4096,
            enable_prefix_caching=False, mm_processor_cache_gb=0,
        )
        params = video_params(FRAMES, {}, engine.family.factor)
        # Warm the engine (first-request overheads are not what is measured).
        warm = make_dataset(work / "warm", 2, 1.0)
        synchronous(engine, warm, params, sampling, args.concurrency)
        pipeline(engine, model, warm, work / "warm-out", sampling, args.concurrency, args.io_workers, None)

        load_before = os.getloadavg()[0]
        c, io = args.concurrency, args.io_workers
        cache = work / "cache"
        # Each first run writes a fresh store; the first one's becomes the cache the others read.
        first_runs = itertools.count(1)

        def first_run() -> tuple[float, dict]:
            store = f"file://{work / f'first-{next(first_runs)}'}"
            return pipeline(engine, model, data, work / "w", sampling, c, io, store, write_back=True)

        def cached_run() -> tuple[float, dict]:
            if not cache.exists():  # the first write-back run's store becomes the cache
                shutil.copytree(work / "first-1", cache)
            return pipeline(engine, model, data, work / "b", sampling, c, io, f"file://{cache}")

        variants = {  # name: (label, frame source, runner)
            "sync_decode": ("synchronous batches, decoding", "decode",
                            lambda: synchronous(engine, data, params, sampling, c)),
            "async_decode": ("async pipeline, decoding on the fly", "decode",
                             lambda: pipeline(engine, model, data, work / "a", sampling, c, io, None)),
            "async_first": ("async pipeline, first run (write-back)", "decode", first_run),
            "sync_cache": ("synchronous batches over the cache", "cache",
                           lambda: synchronous(engine, data, params, sampling, c, f"file://{cache}")),
            "async_cache": ("async pipeline over the cache", "cache", cached_run),
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        outputs: dict[str, dict] = {}
        for _ in range(args.repeats):  # alternate, so drifting machine load hits every variant
            for name in ("sync_decode", "async_decode", "async_first", "async_cache", "sync_cache"):
                seconds, outputs[name] = variants[name][2]()
                times[name].append(seconds)
        engine.close()

        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"{'pipeline':<42} {'seconds':>8} {'samples/s':>10} {'vs sync, same frames':>21} "
              f"{'vs sync decoding':>17} {'same answers':>13}")
        for name, (label, source, _) in variants.items():
            same_source = median["sync_decode" if source == "decode" else "sync_cache"]
            print(f"{label:<42} {median[name]:8.2f} {args.samples / median[name]:10.2f} "
                  f"{same_source / median[name]:20.2f}x {median['sync_decode'] / median[name]:16.2f}x "
                  f"{agreement(outputs['sync_decode'], outputs[name]):>13}")
        print(
            f"\nheadline: async pipeline over the frame cache vs synchronous decoding batches: "
            f"{median['sync_decode'] / median['async_cache']:.2f}x "
            f"(first run, building the cache on the way: {median['sync_decode'] / median['async_first']:.2f}x)"
        )
        print(
            f"settings: {args.samples} samples, concurrency {c} (synchronous batch = max_in_flight), "
            f"io workers {io}, max_tokens {args.max_tokens}, greedy, frames {FRAMES}, one AsyncEvalEngine "
            f"for all, cores {os.cpu_count()}, repeats {args.repeats} (median); load average "
            f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after (other work on the machine skews "
            "every number)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
