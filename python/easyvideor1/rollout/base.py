"""The ``RolloutEngine`` interface and its request/result types.

Engines (vLLM, transformers) take the same requests and return the same results: per
sampled response its token ids, text, per-token log-probs and finish reason, stamped with
the policy version that produced it. Every engine builds prompts with the shared builder
(models/inputs.py), so rollout, reference and actor passes see identical tokens.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easyvideor1.errors import ConfigError, EasyVideoR1Error
from easyvideor1.models.families import IMAGE_PAD, VIDEO_PAD, VISION_END, VISION_START, ModelFamily
from easyvideor1.models.inputs import ImageInput, PromptBuilder, PromptInputs, VideoInput
from easyvideor1.models.trajectory import Trajectory

__all__ = [
    "Completion", "EngineAsleepError", "ImageInput", "RolloutEngine", "RolloutError", "RolloutRequest",
    "RolloutResult", "SamplingConfig", "VideoInput", "check_requests", "vision_token_ids",
]

# Placeholders only the processor may place; a generated one would break the next forward
# ("video features and video tokens do not match"), so sampling never produces them.
_FORBIDDEN = (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD, "<|vision_pad|>")


class RolloutError(EasyVideoR1Error):
    """A rollout request is malformed or the engine failed on it."""


class EngineAsleepError(RolloutError):
    """``generate`` was called between ``sleep()`` and ``wake_up()``."""


@dataclass(frozen=True)
class SamplingConfig:
    """How responses are sampled. ``top_k <= 0`` (kept as -1, ``worker.rollout.top_k``'s "off", so
    saved settings compare equal) and ``top_p == 1`` disable those filters.

    Log-probs are those of the raw model distribution (temperature 1, full vocabulary,
    before any bias), the quantity ``compute_log_probs`` returns for the trainer.

    ``stop``: strings that end a response where they appear in its decoded text (a tool
    call's closing tag); the stop text stays in the output, so the policy's own tokens hold it.
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    forbid_vision_tokens: bool = True
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A list (from JSON, e.g. rollout/wire.py) becomes a tuple: the config stays hashable.
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "top_k", self.top_k if self.top_k > 0 else -1)
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ConfigError(f"stop strings must be non-empty strings, got {list(self.stop)!r}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class RolloutRequest:
    """One prompt to sample ``n`` responses for.

    Give exactly one of ``messages`` (chat messages, or a data-format problem string with
    ``<video>``/``<image>`` placeholders) or ``prompt_token_ids`` (text only). Videos and
    images fill the placeholders in order.
    """

    request_id: str
    messages: str | Sequence[Mapping[str, Any]] | None = None
    prompt_token_ids: Sequence[int] | None = None
    videos: Sequence[VideoInput] = ()
    images: Sequence[ImageInput] = ()
    n: int = 1
    # Prompt inputs already built by the caller (e.g. to filter over-long prompts first);
    # engines use them instead of running the processor a second time.
    inputs: PromptInputs | None = field(default=None, repr=False)
    # Tool declarations for the chat template (multi-turn rollouts with tools on), and further
    # template variables (models/inputs.render_prompt).
    tools: Sequence[Mapping[str, Any]] | None = field(default=None, repr=False)
    template_kwargs: Mapping[str, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt_token_ids is None):
            raise RolloutError(f"request {self.request_id!r}: give exactly one of messages or prompt_token_ids")
        if self.prompt_token_ids is not None and len(self.prompt_token_ids) == 0:
            raise RolloutError(f"request {self.request_id!r}: prompt_token_ids is empty")
        if self.prompt_token_ids is not None and (self.videos or self.images):
            raise RolloutError(f"request {self.request_id!r}: prompt_token_ids are text-only; "
                               "give messages with videos/images")
        if self.n < 1:
            raise RolloutError(f"request {self.request_id!r}: n must be >= 1, got {self.n}")


@dataclass
class Completion:
    """One sampled response. ``logprobs[i]`` is the log-prob of ``token_ids[i]``.

    Offline (mix-policy) responses carry ``is_offline=True`` and no log-probs.
    """

    token_ids: list[int]
    text: str
    logprobs: list[float] | None
    finish_reason: str
    is_offline: bool = False
    # A multi-turn response (tools on): token_ids/logprobs then span the tool turns too
    # (log-prob 0.0 there) and the trajectory says which tokens are the policy's.
    trajectory: Trajectory | None = None


@dataclass
class RolloutResult:
    request_id: str
    prompt_token_ids: list[int]
    completions: list[Completion]
    policy_version: int
    num_visual_tokens: int = 0
    prompt: PromptInputs | None = field(default=None, repr=False)


def vision_token_ids(tokenizer: Any) -> list[int]:
    """Ids of the vision placeholder/marker tokens that sampling must never produce."""
    ids = []
    for token in _FORBIDDEN:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is not None and token_id != getattr(tokenizer, "unk_token_id", None):
            ids.append(int(token_id))
    return sorted(set(ids))


def check_requests(requests: Sequence[RolloutRequest], sampling: SamplingConfig) -> None:
    """Refuse what no engine can do sensibly, before any work starts."""
    ids = [r.request_id for r in requests]
    if len(set(ids)) != len(ids):
        raise RolloutError(f"duplicate request ids in one call: {sorted({i for i in ids if ids.count(i) > 1})}")
    for request in requests:
        if sampling.greedy and request.n > 1:
            raise RolloutError(f"request {request.request_id!r}: greedy sampling (temperature 0) would give "
                               f"{request.n} identical responses; use n=1 or temperature > 0")


class RolloutEngine(abc.ABC):
    """Samples responses for prompts with frames; reloads weights in place by version."""

    builder: PromptBuilder
    policy_version: int = 0

    @property
    def family(self) -> ModelFamily:
        return self.builder.family

    @property
    def tokenizer(self) -> Any:
        return self.builder.tokenizer

    def build_inputs(self, request: RolloutRequest) -> PromptInputs | None:
        """Shared builder for media/chat requests; ``None`` for a token-id request."""
        if request.messages is None:
            return None
        if request.inputs is not None:
            return request.inputs
        return self.builder.build(request.messages, request.videos, request.images, sample_id=request.request_id,
                                  tools=request.tools, template_kwargs=request.template_kwargs)

    @abc.abstractmethod
    def generate(self, requests: Sequence[RolloutRequest], sampling: SamplingConfig) -> list[RolloutResult]:
        """``n`` responses per request, results in request order."""

    @property
    def weight_dtype(self) -> Any:
        """The torch dtype pushed weights are kept in (None: as given)."""
        return None

    @abc.abstractmethod
    def update_weights(self, weights: Mapping[str, Any] | str | Path, version: int) -> None:
        """Load a new policy (state dict, or a .safetensors file/directory) and record ``version``."""

    @abc.abstractmethod
    def sleep(self, level: int = 1) -> bool:
        """Stop serving and release what memory the backend can; True if memory was released.
        ``level`` 1 keeps the weights (in host memory where the backend can), 2 drops them: the
        next wake-up must be followed by a full weight load."""

    @abc.abstractmethod
    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Serve again after :meth:`sleep`. ``tags`` (``["weights"]``, then ``["kv_cache"]``) wake
        one kind of memory at a time, so that new weights are loaded before the KV cache takes its
        share; ``None`` wakes everything. Generation is allowed once the KV cache is awake."""

    @abc.abstractmethod
    def close(self) -> None:
        """Free the engine's resources (idempotent)."""

    def __enter__(self) -> RolloutEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
