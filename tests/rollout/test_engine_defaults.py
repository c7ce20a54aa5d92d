"""Engine defaults that differ between CPU and GPU, checked without a GPU: the dtype (bfloat16 on
CUDA, float32 only when asked), the engine-core start method (spawn on CUDA),
and what the run config hands to every engine made by the factory (trainer, rollout worker)."""

from __future__ import annotations

import pytest

from easyvideor1.config.schema import RunConfig
from easyvideor1.models import FAMILIES, build_tiny_model
from easyvideor1.rollout import vllm_common
from easyvideor1.rollout.factory import vllm_engine_kwargs
from easyvideor1.rollout.vllm_common import default_dtype, engine_args, worker_start_method


@pytest.mark.parametrize("name", tuple(FAMILIES))
def test_dtype_defaults(name):
    family = FAMILIES[name]
    assert default_dtype(family, device_type="cuda") == "bfloat16"
    assert default_dtype(family, device_type="cpu") == ("bfloat16" if name == "qwen3_5" else "float32")


def test_start_method_decision():
    # Spawn on CUDA: a fork is unsafe with other threads running and after any CUDA query
    # (torch.cuda.is_available() before an engine broke an H200 run).
    assert worker_start_method(on_cpu=False, current=None) == "spawn"
    assert worker_start_method(on_cpu=True, current=None) is None  # vLLM spawns on CPU anyway
    assert worker_start_method(on_cpu=False, current="fork") is None  # the user's choice stays


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model("qwen2_5_vl", tmp_path_factory.mktemp("defaults") / "m", seed=0)


def test_engine_args_on_a_gpu(model_dir, monkeypatch):
    """Every engine (evr1 eval, the eval benchmark, the trainer, the rollout worker) gets its
    arguments from engine_args: on a GPU it serves bfloat16 unless float32 is asked for."""
    monkeypatch.setattr(vllm_common, "_on_cpu", lambda: False)
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    assert engine_args(model_dir)["dtype"] == "bfloat16"
    assert engine_args(model_dir, dtype="auto")["dtype"] == "bfloat16"
    assert engine_args(model_dir, dtype="float32")["dtype"] == "float32"
    assert engine_args(model_dir)["enforce_eager"] is False
    import os

    assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"


def test_engine_args_on_cpu_stay_float32(model_dir, monkeypatch):
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    args = engine_args(model_dir)
    assert args["dtype"] == "float32" and args["enforce_eager"] is True
    import os

    assert "VLLM_WORKER_MULTIPROC_METHOD" not in os.environ


def test_factory_passes_dtype_and_sleep_mode(model_dir):
    cfg = RunConfig.model_validate({"worker": {"actor": {"model_path": str(model_dir)}}})
    gpu = vllm_engine_kwargs(cfg, on_cpu=False)
    assert gpu["dtype"] == "auto" and gpu["enable_sleep_mode"] is False
    cfg = RunConfig.model_validate({"worker": {"actor": {"model_path": str(model_dir)},
                                               "rollout": {"dtype": "float32", "colocate": True}}})
    gpu = vllm_engine_kwargs(cfg, on_cpu=False)
    assert gpu["dtype"] == "float32" and gpu["enable_sleep_mode"] is True
