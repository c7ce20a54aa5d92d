"""Rollout engines (vLLM offline and streaming, transformers) behind one interface, and
mix-policy group assembly. Engine classes import their backends only when constructed."""

from easyvideor1.rollout.base import (
    Completion,
    EngineAsleepError,
    ImageInput,
    RolloutEngine,
    RolloutError,
    RolloutRequest,
    RolloutResult,
    SamplingConfig,
    VideoInput,
    vision_token_ids,
)
from easyvideor1.rollout.hf_engine import HFEngine
from easyvideor1.rollout.mix_policy import generate_groups
from easyvideor1.rollout.vllm_async import AsyncVLLMEngine
from easyvideor1.rollout.vllm_engine import VLLMEngine

__all__ = [
    "AsyncVLLMEngine", "Completion", "EngineAsleepError", "HFEngine", "ImageInput", "RolloutEngine", "RolloutError",
    "RolloutRequest", "RolloutResult", "SamplingConfig", "VLLMEngine", "VideoInput", "generate_groups",
    "vision_token_ids",
]
