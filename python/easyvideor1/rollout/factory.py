"""The one place a rollout engine is made from the run config (trainer, rollout worker, pool).

The engine's limits are derived here: its model length is the run's longest prompt plus its
longest response (``data.max_prompt_length + data.max_response_length``), so a prompt the
embedded trainer accepts is never dropped by a distributed worker, and vLLM on CPU gets the
KV-cache size of ``worker.rollout.kv_cache_gib`` instead of a share of the host's RAM.
"""

from __future__ import annotations

from typing import Any

from easyvideor1.config.schema import RunConfig
from easyvideor1.rollout.base import RolloutEngine


def max_model_len(cfg: RunConfig) -> int:
    """Tokens one sequence may hold: the longest prompt (vision included) plus the longest response."""
    return cfg.data.max_prompt_length + cfg.data.max_response_length


def vllm_engine_kwargs(cfg: RunConfig, *, on_cpu: bool) -> dict[str, Any]:
    """Keyword arguments of :class:`~easyvideor1.rollout.vllm_engine.VLLMEngine` for this run."""
    rollout = cfg.worker.rollout
    kwargs: dict[str, Any] = {"max_model_len": max_model_len(cfg), "seed": rollout.seed,
                              "max_num_seqs": rollout.max_num_seqs}
    if on_cpu:
        from easyvideor1.rollout.vllm_memory import cpu_kv_cache_args

        kwargs.update(cpu_kv_cache_args(rollout.kv_cache_gib))
    else:
        kwargs.update(gpu_memory_utilization=rollout.gpu_memory_utilization,
                      tensor_parallel_size=rollout.tensor_parallel_size, enforce_eager=rollout.enforce_eager)
    return kwargs


def make_engine(cfg: RunConfig, model_path: str | None = None) -> RolloutEngine:
    """``worker.rollout.engine`` on ``model_path`` (default ``worker.actor.model_path``)."""
    model = model_path or cfg.worker.actor.model_path
    if cfg.worker.rollout.engine == "hf":
        from easyvideor1.rollout.hf_engine import HFEngine

        return HFEngine(model)
    from vllm.platforms import current_platform

    from easyvideor1.rollout.vllm_engine import VLLMEngine

    return VLLMEngine(model, **vllm_engine_kwargs(cfg, on_cpu=current_platform.is_cpu()))
