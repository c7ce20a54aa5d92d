"""The one place a rollout engine is made from the run config (trainer, rollout worker, pool).

The engine's limits are derived here: its model length is the run's longest prompt plus its
longest response (``data.max_prompt_length + data.max_response_length``), capped at the
positions the model was built for, so a prompt the embedded trainer accepts is never dropped
by a distributed worker, and vLLM on CPU gets the KV-cache size of
``worker.rollout.kv_cache_gib`` instead of a share of the host's RAM.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from easyvideor1.config.schema import RunConfig
from easyvideor1.rollout.base import RolloutEngine


def model_positions(model_path: str | Path) -> int | None:
    """``max_position_embeddings`` of the model's (text) config, when it names one."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for section in (config.get("text_config") or {}, config):
        value = section.get("max_position_embeddings")
        if isinstance(value, int | float) and value > 0:
            return int(value)
    return None


def max_model_len(cfg: RunConfig, model_path: str | Path | None = None) -> int:
    """Tokens one sequence may hold: the longest prompt (vision included) plus the longest
    response, at most the model's positions (longer prompts are then filtered with the reason)."""
    wanted = cfg.data.max_prompt_length + cfg.data.max_response_length
    positions = model_positions(model_path or cfg.worker.actor.model_path)
    return wanted if positions is None else min(wanted, positions)


def max_prompt_length(cfg: RunConfig, model_path: str | Path | None = None) -> int:
    """The longest prompt a round may send: ``data.max_prompt_length``, or less when the model is shorter."""
    return min(cfg.data.max_prompt_length, max_model_len(cfg, model_path) - cfg.data.max_response_length)


def vllm_engine_kwargs(cfg: RunConfig, *, on_cpu: bool, model_path: str | Path | None = None) -> dict[str, Any]:
    """Keyword arguments of :class:`~easyvideor1.rollout.vllm_engine.VLLMEngine` for this run."""
    rollout = cfg.worker.rollout
    length = max_model_len(cfg, model_path)
    # vLLM sizes its encoder cache from the batched-token budget; a video whose vision tokens
    # exceed it is refused. A prompt may be one video up to the model length, so the budget is that.
    kwargs: dict[str, Any] = {"max_model_len": length, "max_num_batched_tokens": length, "seed": rollout.seed,
                              "max_num_seqs": rollout.max_num_seqs, "dtype": rollout.dtype,
                              # A colocated engine sleeps while the actor works (weight_sync/policy.py).
                              "enable_sleep_mode": rollout.colocate,
                              # engine_args turns these into the memory settings (rollout/vllm_memory.py).
                              "kv_cache_gib": rollout.kv_cache_gib,
                              "gpu_memory_utilization": rollout.gpu_memory_utilization}
    if rollout.tools.enabled:
        # Every tool turn may add a clip (get_frames) or a crop (zoom) to the sequence.
        kwargs.update(max_videos=2 + rollout.tools.max_turns, max_images=4 + rollout.tools.max_turns)
    if not on_cpu:
        kwargs.update(tensor_parallel_size=rollout.tensor_parallel_size, enforce_eager=rollout.enforce_eager)
    return kwargs


def make_engine(cfg: RunConfig, model_path: str | None = None) -> RolloutEngine:
    """``worker.rollout.engine`` on ``model_path`` (default ``worker.actor.model_path``)."""
    model = model_path or cfg.worker.actor.model_path
    if cfg.worker.rollout.engine == "hf":
        from easyvideor1.rollout.hf_engine import HFEngine

        return HFEngine(model)
    from vllm.platforms import current_platform

    from easyvideor1.rollout.vllm_engine import VLLMEngine

    return VLLMEngine(model, **vllm_engine_kwargs(cfg, on_cpu=current_platform.is_cpu(), model_path=model))
