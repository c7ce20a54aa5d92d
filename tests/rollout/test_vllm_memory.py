"""vLLM on CPU gets the configured KV-cache size, with no VLLM_CPU_KVCACHE_SPACE in the environment.

The engine runs in a child process with a clean environment (this test process has the
variable from tests/conftest.py) and with vLLM's default layout: a spawned engine-core
process and a worker process, as in a Ray Serve replica.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from easyvideor1.errors import ConfigError
from easyvideor1.rollout.vllm_memory import GIB, LEGACY_ENV, cpu_kv_cache_args

PROBE = r"""
import json, sys

def main():
    from easyvideor1.rollout.vllm_engine import VLLMEngine
    from easyvideor1.rollout.vllm_memory import cpu_kv_cache_args

    engine = VLLMEngine(sys.argv[1], max_model_len=512, max_num_seqs=4, **cpu_kv_cache_args(float(sys.argv[2])))
    config = engine.llm.llm_engine.vllm_config
    model, parallel = config.model_config, config.parallel_config
    print("PROBE", json.dumps({
        "blocks": config.cache_config.num_gpu_blocks, "block_size": config.cache_config.block_size,
        "kv_bytes": config.cache_config.kv_cache_memory_bytes, "layers": model.get_num_layers(parallel),
        "kv_heads": model.get_num_kv_heads(parallel), "head_size": model.get_head_size(),
        "dtype_bytes": model.dtype.itemsize}), flush=True)
    engine.close()

if __name__ == "__main__":  # vLLM spawns its engine core, which re-imports this module
    main()
"""


def test_args_are_the_explicit_size():
    assert cpu_kv_cache_args(1.0) == {"kv_cache_memory_bytes": GIB}
    assert cpu_kv_cache_args(0.25) == {"kv_cache_memory_bytes": GIB // 4}
    with pytest.raises(ConfigError, match="kv_cache_gib"):
        cpu_kv_cache_args(0)


def test_a_different_legacy_variable_is_reported(monkeypatch, caplog):
    monkeypatch.setenv(LEGACY_ENV, "1")
    with caplog.at_level(logging.WARNING):
        cpu_kv_cache_args(1.0)
    assert "vllm_kv_cache_env_override" not in caplog.text  # the same size: nothing to say
    cpu_kv_cache_args(0.5)
    assert "vllm_kv_cache_env_override" in caplog.text and f"{LEGACY_ENV}=1" in caplog.text


def test_engine_gets_the_configured_kv_cache(tmp_path, tiny_model_dir):
    env = {k: v for k, v in os.environ.items()
           if k not in (LEGACY_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    gib = 0.25  # neither vLLM's default nor the Makefile's 1 GiB
    done = subprocess.run([sys.executable, str(script), str(tiny_model_dir), str(gib)], capture_output=True,
                          text=True, env=env, timeout=400)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    probe = json.loads(output.split("PROBE ", 1)[1].splitlines()[0])
    assert probe["kv_bytes"] == int(gib * GIB)
    # K and V of every layer for each token of a block.
    block_bytes = 2 * probe["layers"] * probe["kv_heads"] * probe["head_size"] * probe["dtype_bytes"] * probe["block_size"]
    assert probe["blocks"] == int(gib * GIB) // block_bytes
    assert "Explicitly set (0.25/" in output  # the CPU worker's own line: no share of the host's RAM


def test_every_engine_gets_its_memory_from_engine_args(tiny_model_dir, monkeypatch):
    """engine_args (VLLMEngine and AsyncVLLMEngine both call it: train, demo, the pool, the pass-rate
    filter, evr1 eval) gives the KV cache even when the caller names none; the factory passes the
    config's size, and an explicit kv_cache_memory_bytes (--engine-arg) wins."""
    from easyvideor1.config.schema import RunConfig
    from easyvideor1.rollout import vllm_common
    from easyvideor1.rollout.factory import vllm_engine_kwargs
    from easyvideor1.rollout.vllm_common import engine_args

    monkeypatch.delenv(LEGACY_ENV, raising=False)
    assert engine_args(tiny_model_dir)["kv_cache_memory_bytes"] == GIB
    assert engine_args(tiny_model_dir, kv_cache_gib=0.25)["kv_cache_memory_bytes"] == GIB // 4
    assert engine_args(tiny_model_dir, kv_cache_memory_bytes=123)["kv_cache_memory_bytes"] == 123
    cfg = RunConfig.model_validate({"worker": {"actor": {"model_path": str(tiny_model_dir)},
                                               "rollout": {"kv_cache_gib": 0.5, "gpu_memory_utilization": 0.3}}})
    kwargs = vllm_engine_kwargs(cfg, on_cpu=True)
    assert engine_args(tiny_model_dir, **kwargs)["kv_cache_memory_bytes"] == GIB // 2
    monkeypatch.setattr(vllm_common, "_on_cpu", lambda: False)
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    gpu = engine_args(tiny_model_dir, **vllm_engine_kwargs(cfg, on_cpu=False))
    assert gpu["gpu_memory_utilization"] == 0.3 and "kv_cache_memory_bytes" not in gpu


def test_engines_are_built_only_through_engine_args():
    """The one home of engine arguments: vllm.LLM and AsyncLLM are constructed in two modules,
    each from engine_args; any other construction would skip the memory settings."""
    import ast
    from pathlib import Path

    def builds(path: Path) -> bool:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name in ("LLM", "AsyncLLM", "from_engine_args", "EngineArgs", "AsyncEngineArgs", "LLMEngine"):
                    return True
        return False

    repo = Path(__file__).resolve().parents[2]
    where = {str(path.relative_to(repo)) for top in ("python", "services", "benchmarks")
             for path in (repo / top).rglob("*.py") if builds(path)}
    assert where == {"python/easyvideor1/rollout/vllm_engine.py", "python/easyvideor1/rollout/vllm_async.py"}
    for name in where:
        assert "engine_args(model_dir" in (repo / name).read_text()
