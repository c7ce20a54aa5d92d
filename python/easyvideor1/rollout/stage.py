"""One rollout round: frames (cache) -> prompts -> n responses (mix-policy) -> rewards.

:class:`RolloutStage` is the interface the trainer drives; :class:`EngineRolloutStage` runs a
round on an engine in this process (the embedded trainer, and each rollout worker of the pool),
:class:`~easyvideor1.rollout.remote_stage.RemoteRolloutStage` sends it to the rollout pool over
the work queue. ``make_rollout_stage`` (train/parts.py) picks one from the config.

Samples whose prompt would exceed ``max_prompt_length`` (vision tokens included) are
filtered with the reason reported: a prompt is never truncated through vision tokens.
Media that cannot be loaded filter the sample the same way, so one bad video never stops a run.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from easyvideor1.cache import FrameLoader
from easyvideor1.cache.refs import media_refs
from easyvideor1.config.schema import MixPolicyConfig
from easyvideor1.data import Sample
from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.logging import event, get_logger
from easyvideor1.models.inputs import ImageInput, PromptInputs, VideoInput
from easyvideor1.prompts.fields import sample_fields
from easyvideor1.prompts.renderer import PromptRenderer
from easyvideor1.rewards.client import RewardClient, ScoreItem
from easyvideor1.rewards.types import RewardResult
from easyvideor1.rollout.base import RolloutEngine, RolloutRequest, SamplingConfig
from easyvideor1.rollout.mix_policy import generate_groups

log = get_logger(__name__)


@dataclass
class Group:
    """The n scored responses of one question."""

    sample: Sample
    uid: str
    prompt: PromptInputs
    responses: list[list[int]]
    texts: list[str]
    is_offline: list[bool]
    finish_reasons: list[str]
    rewards: list[RewardResult] = field(default_factory=list)
    # The engine's per-token log-probs of each response (None for offline ones, or when the
    # group came over the wire without them).
    logprobs: list[list[float] | None] = field(default_factory=list)
    policy_version: int = 0

    def values(self, key: str) -> list[float]:
        return [float(getattr(r, key)) for r in self.rewards]


@dataclass
class RoundResult:
    groups: list[Group]
    filtered: list[tuple[str, str]]  # (problem_id, reason)
    timings: dict[str, float]
    mix_groups: int = 0


class RolloutStage(ABC):
    """Where a round of scored groups comes from."""

    @abstractmethod
    def run(self, samples: Sequence[Sample], *, n: int, sampling: SamplingConfig, mix: MixPolicyConfig,
            uid_prefix: str) -> RoundResult:
        """n scored responses per sample (``uid_prefix-k-problem_id`` group uids); samples that
        cannot be used are in ``filtered`` with the reason, never raised."""

    def close(self) -> None:
        """Release what the stage holds (queues, connections)."""
        return None


class EngineRolloutStage(RolloutStage):
    """A round on an engine in this process: frames, prompts, generation, scoring."""

    def __init__(self, engine: RolloutEngine, loader: FrameLoader, renderer: PromptRenderer,
                 rewards: RewardClient, *, max_prompt_length: int, max_response_length: int):
        self.engine, self.loader, self.renderer, self.rewards = engine, loader, renderer, rewards
        self.max_prompt_length = max_prompt_length
        self.max_response_length = max_response_length
        self._prompt_cache: dict[str, str] = {}

    def _request(self, sample: Sample, uid: str, n: int) -> RolloutRequest:
        # By cache key for a prepared sample (no raw file needed), else by path.
        videos, images = [], []
        for ref in media_refs(sample, self.engine.family.name):
            array, metadata = ref.load(self.loader, sample_id=sample.problem_id)
            if ref.kind == "video":
                videos.append(VideoInput(array, metadata))
            else:
                images.append(ImageInput(array, metadata))
        text = self._prompt_cache.get(sample.problem_id)
        if text is None:
            text = self.renderer.render(sample_fields(sample))
            self._prompt_cache[sample.problem_id] = text
        return RolloutRequest(request_id=uid, messages=text, videos=videos, images=images, n=n)

    def run(self, samples: Sequence[Sample], *, n: int, sampling: SamplingConfig, mix: MixPolicyConfig,
            uid_prefix: str) -> RoundResult:
        timings = {"frames_s": 0.0, "rollout_s": 0.0, "reward_s": 0.0}
        filtered: list[tuple[str, str]] = []
        requests: list[RolloutRequest] = []
        kept: list[Sample] = []
        started = time.perf_counter()
        for k, sample in enumerate(samples):
            uid = f"{uid_prefix}-{k}-{sample.problem_id}"
            try:
                request = self._request(sample, uid, n)
                inputs = self.engine.build_inputs(request)
            except EasyVideoR1Error as exc:
                filtered.append((sample.problem_id, f"{type(exc).__name__}: {exc}"))
                continue
            length = len(inputs.prompt_ids) if inputs is not None else len(request.prompt_token_ids or [])
            if length > self.max_prompt_length:
                filtered.append((sample.problem_id, f"prompt has {length} tokens (vision included), more than "
                                 f"the limit of {self.max_prompt_length} (data.max_prompt_length, at most the "
                                 "engine's max model length minus the response length)"))
                continue
            request.inputs = inputs
            requests.append(request)
            kept.append(sample)
        timings["frames_s"] = time.perf_counter() - started
        for problem_id, reason in filtered:
            event(log, "sample_filtered", problem_id=problem_id, reason=reason)
        if not requests:
            return RoundResult([], filtered, timings)

        started = time.perf_counter()
        offline = [s.offline_output if s.has_offline_trajectory else None for s in kept]
        by_uid = {r.request_id: s for r, s in zip(requests, kept)}

        def online_accuracies(request: RolloutRequest, completions: list) -> list[float]:
            probe = Group(sample=by_uid[request.request_id], uid=request.request_id, prompt=None,
                          responses=[], texts=[c.text for c in completions], is_offline=[], finish_reasons=[])
            self._score([probe])
            return probe.values("accuracy")

        results = generate_groups(self.engine, requests, offline, sampling, mix,
                                  max_response_length=self.max_response_length,
                                  scorer=online_accuracies if mix.conditional else None)
        timings["rollout_s"] = time.perf_counter() - started

        groups = []
        for sample, request, result in zip(kept, requests, results):
            completions = result.completions
            groups.append(Group(
                sample=sample, uid=request.request_id, prompt=result.prompt,
                responses=[list(c.token_ids) for c in completions], texts=[c.text for c in completions],
                is_offline=[c.is_offline for c in completions], finish_reasons=[c.finish_reason for c in completions],
                logprobs=[c.logprobs for c in completions],
                policy_version=result.policy_version))
        started = time.perf_counter()
        self._score(groups)
        timings["reward_s"] = time.perf_counter() - started
        mix_groups = sum(1 for g in groups if any(g.is_offline))
        return RoundResult(groups, filtered, timings, mix_groups)

    def _score(self, groups: Sequence[Group]) -> None:
        items, slots = [], []
        for g, group in enumerate(groups):
            for r, text in enumerate(group.texts):
                s = group.sample
                items.append(ScoreItem(id=f"{group.uid}/{r}", problem_type=s.problem_type, response=text,
                                       ground_truth=s.answer, options=list(s.options) if s.options else None,
                                       problem=s.problem, data_type=s.data_type))
                slots.append((g, r))
        if not items:
            return
        results = self.rewards.score(items)
        for group in groups:
            group.rewards = []
        for (g, _), result in zip(slots, results):
            groups[g].rewards.append(result)
