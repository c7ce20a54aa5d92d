"""``AsyncVLLMEngine``: streaming rollouts on vLLM's ``AsyncLLM`` (used by evaluation).

Same requests, results, prompt builder and weight payloads as :class:`VLLMEngine`, with
async methods: ``generate_stream`` yields each request's result as soon as it finishes,
so I/O, prefill and decode of different requests overlap. ``AsyncLLM`` always runs its
engine core in a child process (spawned on CPU, and on a GPU when other threads run, see
``vllm_common.worker_start_method``: the calling script needs a
``if __name__ == "__main__":`` guard). With ``n > 1`` requests use
``RequestOutputKind.FINAL_ONLY``; otherwise only one of the n completions comes back.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from easyvideor1.logging import event, get_logger
from easyvideor1.models.inputs import PromptBuilder
from easyvideor1.rollout.base import (
    EngineAsleepError,
    RolloutError,
    RolloutRequest,
    RolloutResult,
    SamplingConfig,
    check_requests,
    vision_token_ids,
)
from easyvideor1.rollout.vllm_common import (
    WeightTransfer,
    engine_args,
    quiet_cpu_thread_guard,
    request_seed,
    result_of,
    sampling_params,
    sleep_supported,
    vllm_prompt,
)
from easyvideor1.weight_sync.host import tied_head_names, weight_payloads

log = get_logger(__name__)


class AsyncVLLMEngine:
    """Create inside a running event loop (``AsyncLLM`` binds to it)."""

    def __init__(self, model_dir: str | Path, *, dtype: str | None = None, max_model_len: int = 4096,
                 seed: int = 0, verify_prompts: bool = True, **engine_kwargs: Any):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.model_dir = str(model_dir)
        self.builder = PromptBuilder.from_pretrained(self.model_dir)
        self.verify_prompts = verify_prompts
        self._args = engine_args(model_dir, dtype=dtype, max_model_len=max_model_len, seed=seed, **engine_kwargs)
        started = time.perf_counter()
        with quiet_cpu_thread_guard():
            self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**self._args))
        self._forbidden = self.builder.tokenizer.convert_ids_to_tokens(vision_token_ids(self.builder.tokenizer))
        self._ids = itertools.count()
        self._asleep = False
        self.policy_version = 0
        event(log, "async_vllm_engine_started", model=self.model_dir, family=self.builder.family.name,
              seconds=round(time.perf_counter() - started, 2))

    @property
    def family(self):
        return self.builder.family

    async def _one(self, request: RolloutRequest, sampling: SamplingConfig, index: int) -> RolloutResult:
        inputs = request.inputs
        if inputs is None and request.messages is not None:
            # The processor takes tens of ms per video: off the loop, so other requests'
            # outputs keep flowing meanwhile.
            inputs = await asyncio.to_thread(
                self.builder.build, request.messages, request.videos, request.images, sample_id=request.request_id,
                tools=request.tools, template_kwargs=request.template_kwargs,
            )
        params = sampling_params(sampling, n=request.n, forbidden_tokens=self._forbidden,
                                 seed=request_seed(sampling, index), final_only=True)
        final = None
        # vLLM request ids must be unique among live requests; ours may repeat across calls.
        vllm_id = f"{request.request_id}#{next(self._ids)}"
        try:
            async for output in self.engine.generate(vllm_prompt(request, inputs), params, request_id=vllm_id):
                final = output
        except (ValueError, RuntimeError) as exc:
            raise RolloutError(f"vLLM failed on request {request.request_id!r}: {exc}") from exc
        if final is None or not final.finished:
            raise RolloutError(f"vLLM returned no final output for request {request.request_id!r}")
        # Read at completion: a request queued during an update runs on the new weights.
        return result_of(request, inputs, final, self.policy_version, tokenizer=self.builder.tokenizer,
                         verify=self.verify_prompts)

    async def generate_stream(self, requests: Sequence[RolloutRequest],
                              sampling: SamplingConfig) -> AsyncIterator[RolloutResult]:
        """Results in completion order (match them by ``request_id``)."""
        if self._asleep:
            raise EngineAsleepError("the vLLM engine is asleep: call wake_up() before generating")
        check_requests(requests, sampling)
        tasks = [asyncio.ensure_future(self._one(r, sampling, k)) for k, r in enumerate(requests)]
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:
            for task in tasks:
                task.cancel()

    async def generate(self, requests: Sequence[RolloutRequest], sampling: SamplingConfig) -> list[RolloutResult]:
        """All results, in request order."""
        if self._asleep:
            raise EngineAsleepError("the vLLM engine is asleep: call wake_up() before generating")
        check_requests(requests, sampling)
        return list(await asyncio.gather(*(self._one(r, sampling, k) for k, r in enumerate(requests))))

    async def update_weights(self, weights: Mapping[str, Any] | str | Path, version: int, *,
                             transport: str | None = None) -> None:
        """Pause, reload in place part by part (with the tied-head fix after the last), reset
        caches, resume: no request runs on half an update."""
        started = time.perf_counter()
        stats = WeightTransfer()
        # In-flight requests finish on the old weights; new ones wait for the new version.
        await self.engine.pause_generation(mode="wait")
        try:
            for part in weight_payloads(weights, dtype=self._args["dtype"], transport=transport,
                                    skip=tied_head_names(self.model_dir)):
                sent = time.perf_counter()
                replies = await self.engine.collective_rpc(
                    "evr1_reload_weights", args=(part.payload, True, part.last, part.count > 1))
                stats.add(part, replies[0], time.perf_counter() - sent)
            await self.engine.reset_prefix_cache()
            await self.engine.reset_encoder_cache()
            self.policy_version = int(version)
        finally:
            await self.engine.resume_generation()
        event(log, "async_vllm_weights_updated", version=self.policy_version,
              **stats.summary(time.perf_counter() - started))

    async def sleep(self, level: int = 1) -> bool:
        """See :meth:`VLLMEngine.sleep`: memory is released on CUDA only."""
        released = False
        if sleep_supported() and self._args.get("enable_sleep_mode"):
            await self.engine.sleep(level=level)
            released = True
        else:
            await self.engine.reset_prefix_cache()
        self._asleep = True
        return released

    async def wake_up(self, tags: Sequence[str] | None = None) -> None:
        if self._asleep and sleep_supported() and self._args.get("enable_sleep_mode"):
            await self.engine.wake_up(tags=list(tags) if tags is not None else None)
        if tags is None or "kv_cache" in tags:
            self._asleep = False

    def close(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()
            self.engine = None
