"""Session fixtures for the eval tests: benchmark fixtures, a tiny model, one shared engine."""

from __future__ import annotations

import pytest
from eval_fixtures import write_all


@pytest.fixture(scope="session")
def bench_fixtures(tmp_path_factory):
    """``(root, {benchmark: item count})`` with every adapter's fixture under ``root/<name>``."""
    root = tmp_path_factory.mktemp("benchmarks")
    return root, write_all(root)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from easyvideor1.models.tiny import build_tiny_model

    return str(build_tiny_model("qwen2_5_vl", tmp_path_factory.mktemp("tiny") / "qwen2_5_vl", seed=0))


@pytest.fixture(scope="session")
def eval_engine(tiny_model):
    """One AsyncLLM for the whole session (its start-up is most of the eval tests' time)."""
    from easyvideor1.eval.engine import AsyncEvalEngine

    engine = AsyncEvalEngine(tiny_model, max_in_flight=8, max_model_len=2048)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def sampling_engine(tiny_model):
    """An engine for seeded sampling (temperature > 0): on CPU, chunked prefill off."""
    from easyvideor1.eval.engine import AsyncEvalEngine, kwargs_for_sampling
    from easyvideor1.rollout.base import SamplingConfig

    kwargs = kwargs_for_sampling(SamplingConfig(temperature=1.0, seed=0), {"max_model_len": 2048})
    engine = AsyncEvalEngine(tiny_model, max_in_flight=8, **kwargs)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def judge_server():
    from eval_judge_server import JudgeServer

    with JudgeServer() as server:
        yield server
