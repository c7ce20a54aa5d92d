"""The asynchronous evaluation pipeline: I/O, submission and collection stages overlapped.

    items ──> I/O workers (thread pool: FrameLoader cache hit, or decode on a miss;
              the benchmark's prompt) ──> bounded queue
          ──> submission: at most ``max_in_flight`` requests on the async engine
              (AsyncLLM: continuous batching, chunked prefill, shared prompt builder)
          ──> collection: score with the rewards library (thread pool), append the record

Every stage works on its own samples at the same time: decoding the next videos overlaps
prefill and decode of the current ones (the engine core runs in its own process), and no
request waits for a batch to fill or drain. Each failure (undecodable video,
prompt/placeholder error, timeout, engine error, scoring error) becomes a record that
counts as wrong; only a dead engine stops the run (``--resume`` continues it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easyvideor1.cache import FrameLoader
from easyvideor1.console import Progress
from easyvideor1.data.prepared import PREPARED_FIELD, family_keys
from easyvideor1.eval.benchmarks.base import Benchmark
from easyvideor1.eval.benchmarks.common import ScoringContext
from easyvideor1.eval.engine import EngineDead, seeded_sampling
from easyvideor1.eval.results import ResultsLog
from easyvideor1.eval.types import EvalItem, base_record, failure_record
from easyvideor1.logging import event, get_logger
from easyvideor1.models.inputs import ImageInput, MediaInputError, PlaceholderMismatchError, VideoInput
from easyvideor1.rollout.base import RolloutRequest, SamplingConfig
from easyvideor1.video.metadata import VideoMetadata

log = get_logger(__name__)


@dataclass
class BenchPlan:
    """One benchmark in a run: its adapter, items, frame loader and the settings used."""

    bench: Benchmark
    root: Path
    items: list[EvalItem]
    loader: FrameLoader


@dataclass
class Prepared:
    plan: BenchPlan
    item: EvalItem
    request: RolloutRequest | None = None
    metas: list[VideoMetadata] = field(default_factory=list)
    load_s: float = 0.0
    failure: dict[str, Any] | None = None


@dataclass
class StageOptions:
    max_in_flight: int = 16
    io_workers: int = 4
    queue_size: int = 0  # 0: 2 x max_in_flight
    score_workers: int = 2
    # False: submit each sample the moment it is ready (continuous batching). True: submit in
    # waves of up to max_in_flight samples, each once the engine is idle and a wave is loaded,
    # while the I/O stage loads the next. Where the engine and decoding share a few CPU
    # cores, a trickle of lone requests makes the engine run many near-empty steps that take
    # cores from decoding; waves keep every step full.
    waves: bool = False
    request_timeout_s: float = 600.0
    prompt_style: str = "direct"
    progress: bool = True


def load_item_media(loader: Any, item: EvalItem, keys: Any) -> tuple[list[VideoInput], list[ImageInput],
                                                                    list[VideoMetadata]]:
    """An item's videos and images through ``loader``: by prepared ``keys`` (``family_keys``; the raw
    path only as the fallback), else from the raw paths. Returns the inputs and the videos' metadata."""
    videos, images, metas = [], [], []
    for i, path in enumerate(item.videos):
        if keys is not None:
            frames, meta = loader.load_video_key(keys[0][i], sample_id=item.id, path=path)
        else:
            frames, meta = loader.load_video(path, clip=item.clip)
        videos.append(VideoInput(frames, meta))
        metas.append(meta)
    for i, path in enumerate(item.images):
        if keys is not None:
            array, image_meta = loader.load_image_key(keys[1][i], sample_id=item.id, path=path)
        else:
            array, image_meta = loader.load_image(path)
        images.append(ImageInput(array, image_meta))
    return videos, images, metas


class Pipeline:
    """Runs pending items of several benchmarks through one engine; records go to ``results``."""

    def __init__(self, engine: Any, results: ResultsLog, sampling: SamplingConfig, ctx: ScoringContext,
                 options: StageOptions, renderer: Any = None,
                 on_record: Callable[[dict[str, Any]], None] | None = None):
        self.engine, self.results, self.sampling, self.ctx = engine, results, sampling, ctx
        self.options, self.renderer, self.on_record = options, renderer, on_record
        self.stats = {"submitted": 0, "failed": 0, "queue_wait_s": 0.0, "load_s": 0.0, "generate_s": 0.0}

    # ---- I/O stage (worker threads) ----------------------------------------------------------

    def prepare(self, plan: BenchPlan, item: EvalItem) -> Prepared:
        prepared = Prepared(plan, item)
        started = time.perf_counter()
        videos, images = [], []
        try:
            keys = family_keys(item.meta.get(PREPARED_FIELD), self.engine.family.name, n_videos=len(item.videos),
                               n_images=len(item.images), where=item.source or item.id)
            videos, images, metas = load_item_media(plan.loader, item, keys)
            prepared.metas.extend(metas)
        except Exception as exc:  # any unreadable medium costs this item only
            prepared.failure = {"kind": "media", "message": f"{type(exc).__name__}: {exc}"}
            return prepared
        finally:
            prepared.load_s = time.perf_counter() - started
        try:
            text = plan.bench.prompt(item, prepared.metas, self.options.prompt_style, self.renderer)
            request = RolloutRequest(request_id=item.key, messages=text, videos=videos, images=images)
            # Processor work (templating, patchifying frames) happens here, in the I/O
            # workers, instead of on the event loop that feeds the engine.
            prepared.request = dataclasses.replace(request, inputs=self.engine.build_inputs(request))
        except Exception as exc:  # template error, malformed request: this item only
            prepared.failure = {"kind": "prompt", "message": f"{type(exc).__name__}: {exc}"}
        return prepared

    # ---- submission and collection -----------------------------------------------------------

    async def run(self, pending: list[tuple[BenchPlan, EvalItem]]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        options = self.options
        io_pool = ThreadPoolExecutor(options.io_workers, thread_name_prefix="evr1-eval-io")
        score_pool = ThreadPoolExecutor(options.score_workers, thread_name_prefix="evr1-eval-score")
        ready: asyncio.Queue = asyncio.Queue(maxsize=options.queue_size or 2 * options.max_in_flight)
        work = iter(pending)
        # A bar on a terminal, whole lines (a tenth of the way or a minute apart) anywhere else.
        bar = Progress("eval", total=len(pending), unit="sample", enabled=options.progress)
        in_flight: set[asyncio.Task] = set()
        slots = asyncio.Semaphore(options.max_in_flight)
        started = time.perf_counter()

        async def io_worker() -> None:
            for plan, item in work:  # one shared iterator: each worker takes the next item
                await ready.put(await loop.run_in_executor(io_pool, self.prepare, plan, item))

        fed = asyncio.Event()

        async def feed() -> None:
            await asyncio.gather(*(io_worker() for _ in range(options.io_workers)))
            fed.set()
            await ready.put(None)

        wave_left = 0

        async def next_ready() -> Prepared | None:
            nonlocal wave_left
            if options.waves and wave_left == 0:
                wanted = min(options.max_in_flight, ready.maxsize)
                while in_flight or (ready.qsize() < wanted and not fed.is_set()):
                    await asyncio.sleep(0.005)
                wave_left = max(1, min(ready.qsize(), options.max_in_flight))
            wave_left = max(0, wave_left - 1)
            return await ready.get()

        feeder = asyncio.create_task(feed())
        # A task that raises (dead engine, a failing record hook) stops the run at once.
        fatal: asyncio.Future = loop.create_future()

        def settle(task: asyncio.Task) -> None:
            in_flight.discard(task)
            slots.release()
            if not task.cancelled() and task.exception() is not None and not fatal.done():
                fatal.set_exception(task.exception())

        async def unless_fatal(awaitable: Any) -> Any:
            step = asyncio.ensure_future(awaitable)
            await asyncio.wait({step, fatal}, return_when=asyncio.FIRST_COMPLETED)
            if fatal.done():
                step.cancel()
                fatal.result()  # raises the task's exception
            return step.result()

        try:
            while True:
                waited = time.perf_counter()
                prepared = await unless_fatal(next_ready())
                self.stats["queue_wait_s"] += time.perf_counter() - waited
                if prepared is None:
                    break
                self.stats["load_s"] += prepared.load_s
                if prepared.failure:
                    self._finish(
                        failure_record(
                            prepared.item,
                            prepared.failure["kind"],
                            prepared.failure["message"],
                            **self._zeros(prepared),
                        ),
                        bar,
                    )
                    continue
                await unless_fatal(slots.acquire())
                task = asyncio.create_task(self._infer_and_score(prepared, score_pool, bar))
                in_flight.add(task)
                task.add_done_callback(settle)
                self.stats["submitted"] += 1
            while in_flight:
                await unless_fatal(asyncio.wait(set(in_flight)))
            if fatal.done():
                fatal.result()
            await feeder
        finally:
            feeder.cancel()
            for task in list(in_flight):
                task.cancel()  # a stopped run aborts its vLLM requests
            await asyncio.gather(feeder, *in_flight, return_exceptions=True)
            if fatal.done() and not fatal.cancelled():
                fatal.exception()  # retrieved: no "exception never retrieved" warning
            io_pool.shutdown(wait=True, cancel_futures=True)
            score_pool.shutdown(wait=True, cancel_futures=True)
            bar.close()
        self.stats["wall_s"] = time.perf_counter() - started
        self.stats["samples"] = len(pending)
        self.stats["samples_per_s"] = len(pending) / self.stats["wall_s"] if self.stats["wall_s"] > 0 else 0.0
        event(
            log,
            "eval_pipeline_done",
            **{k: round(v, 3) if isinstance(v, float) else v for k, v in self.stats.items()},
        )
        return self.stats

    async def _infer_and_score(self, prepared: Prepared, score_pool: ThreadPoolExecutor, bar: Progress) -> None:
        item, plan = prepared.item, prepared.plan
        started = time.perf_counter()
        sampling = item_sampling(self.sampling, item.key)
        try:
            result = await asyncio.wait_for(
                self.engine.generate(prepared.request, sampling), self.options.request_timeout_s
            )
        except EngineDead:
            raise
        except TimeoutError:
            self._finish(
                failure_record(
                    item,
                    "timeout",
                    f"no response within {self.options.request_timeout_s:g}s",
                    **self._zeros(prepared),
                ),
                bar,
            )
            return
        except Exception as exc:  # an error on one request costs that request only
            # The shared builder rejects frames/placeholders that disagree before vLLM sees them.
            kind = "prompt" if isinstance(exc, PlaceholderMismatchError | MediaInputError) else "engine"
            self._finish(
                failure_record(item, kind, f"{type(exc).__name__}: {exc}", **self._zeros(prepared)), bar
            )
            return
        generate_s = time.perf_counter() - started
        self.stats["generate_s"] += generate_s
        completion = result.completions[0]
        loop = asyncio.get_running_loop()
        try:
            record = await loop.run_in_executor(
                score_pool, scored_record, plan.bench, item, completion.text, self.ctx, prepared.metas
            )
        except Exception as exc:  # ScoringFailure (judge down) or a scorer bug: counted as wrong
            self._finish(
                failure_record(
                    item,
                    "scoring",
                    f"{type(exc).__name__}: {exc}",
                    response=completion.text,
                    **self._zeros(prepared),
                ),
                bar,
            )
            return
        record.update(
            prompt=prepared.request.messages,
            finish_reason=completion.finish_reason,
            prompt_tokens=len(result.prompt_token_ids),
            output_tokens=len(completion.token_ids),
            visual_tokens=result.num_visual_tokens,
            frames=[m.num_frames for m in prepared.metas],
            load_s=round(prepared.load_s, 4),
            generate_s=round(generate_s, 4),
            seed=sampling.seed if seeded_sampling(sampling) else None,  # greedy draws nothing
        )
        self._finish(record, bar)

    def _zeros(self, prepared: Prepared) -> dict[str, Any]:
        """A failed item's zero values, and its prompt when it got that far."""
        prompt = prepared.request.messages if prepared.request is not None else None
        return {**zero_values(prepared.plan.bench, prepared.item, self.ctx), "prompt": prompt}

    def _finish(self, record: dict[str, Any], bar: Progress) -> None:
        if record["status"] != "ok":
            self.stats["failed"] += 1
            event(
                log,
                "eval_sample_failed",
                key=f"{record['benchmark']}/{record['id']}",
                kind=record["failure"]["kind"],
                message=record["failure"]["message"][:300],
            )
        self.results.append(record)
        bar.update(1)
        if self.on_record is not None:
            self.on_record(record)


def item_sampling(sampling: SamplingConfig, key: str) -> SamplingConfig:
    """Sampling for one item: a seeded run gives each item its own seed, derived from the
    run's seed and the item's key, so a response does not depend on which items share the
    engine with it, their order, the concurrency or a resume."""
    if not seeded_sampling(sampling):
        return sampling
    digest = hashlib.blake2b(f"{sampling.seed}:{key}".encode(), digest_size=4).digest()
    return dataclasses.replace(sampling, seed=int.from_bytes(digest, "big"))


def zero_values(bench: Benchmark, item: EvalItem, ctx: ScoringContext) -> dict[str, Any]:
    """A failed item's values: 0 for every metric it would have had."""
    kinds = bench.metrics_for(item, ctx)
    # No response: what the official rule makes of an empty one.
    official = bench.official_item(item, "", ctx).as_record()
    return {"values": {name: 0.0 for name in kinds}, "kinds": kinds, "official": official}


def scored_record(
    bench: Benchmark,
    item: EvalItem,
    response: str,
    ctx: ScoringContext,
    metas: list[VideoMetadata] | tuple = (),
) -> dict[str, Any]:
    """The record of a scored response (raises when scoring fails)."""
    scored = bench.score(item, response, ctx, metas)
    official = bench.official_item(item, response, ctx, metas)
    kinds = bench.metrics_for(item, ctx)
    record = base_record(item)
    record.update(
        status="ok",
        response=response,
        prediction=_jsonable(scored.prediction),
        values=scored.values,
        kinds={name: kinds.get(name, "accuracy") for name in scored.values},
        scoring=scored.scoring,
        details=_jsonable({k: v for k, v in scored.details.items() if k != "reply"}),
        official=_jsonable(official.as_record()),
    )
    return record


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
