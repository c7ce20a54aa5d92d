"""Evaluation throughput: the async pipeline vs synchronous batched generation, side by side.

Same process, same tiny model, same samples, same frame settings, same greedy sampling and
the same concurrency (baseline batch size = pipeline ``max_in_flight``), four variants:

* baseline, decoding (what reference pipelines do): decode every video, then
  ``LLM.generate`` in fixed batches (the rollout package's ``VLLMEngine``), then score;
* async pipeline, decoding on the fly in its I/O workers, overlapped with generation on
  ``AsyncLLM``;
* baseline and async pipeline reading a frame cache built beforehand (the build is timed
  apart: it is paid once per dataset and frame setting, not per evaluation).

Each variant's ratio is given against the baseline with the same frame source and against
the decoding baseline, with how many responses agree with it (greedy: all should).

    .venv/bin/python benchmarks/eval_pipeline.py [--samples 32] [--seconds 20] [--concurrency 16]
"""

from __future__ import annotations

import argparse
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
# Both engines' OpenMP threads sleep while waiting (the eval engine sets this for its engine
# core anyway; set before torch loads so the in-process baseline engine gets it too).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from easyvideor1.cache import FrameLoader, open_store  # noqa: E402
from easyvideor1.cache.builder import build_cache  # noqa: E402
from easyvideor1.data.synth_render import make_long_video  # noqa: E402
from easyvideor1.eval import EvalConfig, ScoringContext, get_benchmark, run_eval  # noqa: E402
from easyvideor1.eval.engine import AsyncEvalEngine  # noqa: E402
from easyvideor1.eval.pipeline import scored_record  # noqa: E402
from easyvideor1.eval.results import read_results  # noqa: E402
from easyvideor1.eval.runner import video_params  # noqa: E402
from easyvideor1.models.inputs import VideoInput  # noqa: E402
from easyvideor1.models.tiny import build_tiny_model  # noqa: E402
from easyvideor1.rollout.base import RolloutRequest, SamplingConfig  # noqa: E402
from easyvideor1.rollout.vllm_engine import VLLMEngine  # noqa: E402

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


def baseline(
    engine: VLLMEngine, data: Path, params, sampling: SamplingConfig, batch: int, store: str | None = None
) -> tuple[float, dict]:
    """Load all frames (decode, or read the cache), then generate in fixed batches, then score.
    Returns (seconds, responses by id)."""
    bench = get_benchmark("jsonl")
    ctx = ScoringContext()
    started = time.perf_counter()
    items = bench.load(data)
    loader = FrameLoader(open_store(store) if store else None, params)
    loaded = [[loader.load_video(p) for p in item.videos] for item in items]
    requests = [
        RolloutRequest(
            request_id=item.key,
            messages=bench.prompt(item, [m for _, m in media], "direct"),
            videos=[VideoInput(f, m) for f, m in media],
        )
        for item, media in zip(items, loaded)
    ]
    results = []
    for start in range(0, len(requests), batch):
        results += engine.generate(requests[start : start + batch], sampling)
    responses = {}
    for item, result, media in zip(items, results, loaded):
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
    waves: bool = False,
) -> tuple[float, dict]:
    shutil.rmtree(out, ignore_errors=True)
    config = EvalConfig(
        model=model,
        benchmarks={"jsonl": data},
        out_dir=out,
        store=store,
        video=dict(FRAMES),
        sampling=sampling,
        max_in_flight=concurrency,
        io_workers=io_workers,
        waves=waves,
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
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each 480x272 30 fps clip")
    parser.add_argument(
        "--concurrency", type=int, default=16, help="baseline batch size = pipeline max_in_flight"
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
        no_reuse = {"enable_prefix_caching": False, "mm_processor_cache_gb": 0}
        sync_engine = VLLMEngine(
            model, max_model_len=4096, max_num_seqs=args.concurrency, enable_chunked_prefill=True, **no_reuse
        )
        async_engine = AsyncEvalEngine(model, max_in_flight=args.concurrency, max_model_len=4096, **no_reuse)
        params = video_params(FRAMES, {}, async_engine.family.factor)
        # Warm both engines (first-request overheads are not what is measured).
        warm = make_dataset(work / "warm", 2, 1.0)
        baseline(sync_engine, warm, params, sampling, args.concurrency)
        pipeline(
            async_engine, model, warm, work / "warm-out", sampling, args.concurrency, args.io_workers, None
        )

        load_before = os.getloadavg()[0]
        store = f"file://{work / 'cache'}"
        t = time.perf_counter()
        summary = build_cache(data, store, video_params=params, workers=args.io_workers, progress=False)
        build_s = time.perf_counter() - t
        if summary.failed:
            raise RuntimeError(f"cache build failures: {summary.failed[:3]}")
        c, io = args.concurrency, args.io_workers
        variants = {  # name: (label, frame source, runner)
            "sync_cold": ("baseline: decode all, then LLM.generate", "decode",
                          lambda: baseline(sync_engine, data, params, sampling, c)),
            "async_cold": ("async pipeline, decode on the fly", "decode",
                           lambda: pipeline(async_engine, model, data, work / "a", sampling, c, io, None)),
            "async_cold_waves": ("  the same, --waves", "decode",
                                 lambda: pipeline(async_engine, model, data, work / "c", sampling, c, io,
                                                  None, True)),
            "sync_warm": ("baseline: read cache, then LLM.generate", "cache",
                          lambda: baseline(sync_engine, data, params, sampling, c, store)),
            "async_warm": ("async pipeline over the frame cache", "cache",
                           lambda: pipeline(async_engine, model, data, work / "b", sampling, c, io, store)),
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        outputs: dict[str, dict] = {}
        for _ in range(args.repeats):  # alternate, so drifting machine load hits every variant
            for name, (_, _, run) in variants.items():
                seconds, outputs[name] = run()
                times[name].append(seconds)
        sync_engine.close()
        async_engine.close()

        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"\nframe cache build (one-off, {io} workers): {build_s:.2f} s for {args.samples} videos")
        print(f"{'pipeline':<42} {'seconds':>8} {'samples/s':>10} {'vs baseline, same frames':>25} "
              f"{'vs decoding baseline':>21} {'same answers':>13}")
        for name, (label, source, _) in variants.items():
            same_source = median["sync_cold" if source == "decode" else "sync_warm"]
            print(f"{label:<42} {median[name]:8.2f} {args.samples / median[name]:10.2f} "
                  f"{same_source / median[name]:24.2f}x {median['sync_cold'] / median[name]:20.2f}x "
                  f"{agreement(outputs['sync_cold'], outputs[name]):>13}")
        print(
            f"\nsettings: {args.samples} samples, concurrency {c} (baseline batch = max_in_flight), "
            f"io workers {io}, "
            f"max_tokens {args.max_tokens}, greedy, frames {FRAMES}, cores {os.cpu_count()}, "
            f"repeats {args.repeats} (median); load average {load_before:.1f} before, "
            f"{os.getloadavg()[0]:.1f} after (other work on the machine skews every number)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
