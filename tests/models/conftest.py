"""Fixtures for model-layer tests: one tiny model of every family, built once per session."""

from __future__ import annotations

import pytest

from easyvideor1.models import build_tiny_model

FAMILY_NAMES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """family name -> directory of a tiny model (seed 0)."""
    root = tmp_path_factory.mktemp("tiny_models")
    return {name: build_tiny_model(name, root / name, seed=0) for name in FAMILY_NAMES}


@pytest.fixture(scope="session")
def processors(tiny_dirs):
    from transformers import AutoProcessor

    return {name: AutoProcessor.from_pretrained(path) for name, path in tiny_dirs.items()}


@pytest.fixture(scope="session")
def hf_models(tiny_dirs):
    """family name -> the tiny model in float32 with perturbed (non-flat) weights, eval mode."""
    from transformers import AutoModelForImageTextToText

    from easyvideor1.models import perturb_weights

    models = {}
    for name, path in tiny_dirs.items():
        model = AutoModelForImageTextToText.from_pretrained(path)
        perturb_weights(model, seed=1)
        models[name] = model.eval()
    return models
