"""One rollout round: frames (cache) -> prompts -> n responses (mix-policy) -> rewards.

:class:`RolloutStage` is the interface the trainer drives; :class:`EngineRolloutStage` runs a
round on an engine in this process (the embedded trainer, and each rollout worker of the pool),
:class:`~easyvideor1.rollout.remote_stage.RemoteRolloutStage` sends it to the rollout pool over
the work queue. ``train/parts.build_parts`` picks one from the config.

Samples whose prompt would exceed ``max_prompt_length`` (vision tokens included) are
filtered with the reason reported: a prompt is never truncated through vision tokens.
Media that cannot be loaded filter the sample the same way, so one bad video never stops a run.

With ``worker.rollout.tools.enabled`` the round is multi-turn (rollout/multi_turn.py): prompts
are rendered with the kit's tool declarations, each response is a trajectory (``Group.
trajectories``), an offline response may be a tool-using trajectory (its calls run again by the
kit, rollout/tool_trajectory.py), and the scorers see each trajectory's final turn
(``Completion.text``). The per-call cost is taken off the overall reward here, right after
scoring (:func:`apply_call_cost`): this stage also runs inside every rollout worker, so the
embedded trainer and the pool give the same rewards.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from easyvideor1.cache import FrameLoader
from easyvideor1.cache.refs import media_refs
from easyvideor1.config.schema import MixPolicyConfig, ToolsConfig
from easyvideor1.data import Sample
from easyvideor1.errors import ConfigError, EasyVideoR1Error
from easyvideor1.logging import event, get_logger
from easyvideor1.models.inputs import ImageInput, PromptInputs, VideoInput
from easyvideor1.models.trajectory import Trajectory
from easyvideor1.prompts.fields import sample_fields
from easyvideor1.prompts.renderer import PromptRenderer
from easyvideor1.rewards.client import RewardClient, ScoreItem
from easyvideor1.rewards.types import RewardResult
from easyvideor1.rollout.base import RolloutEngine, RolloutRequest, SamplingConfig
from easyvideor1.rollout.mix_policy import generate_groups
from easyvideor1.rollout.tool_trajectory import offline_tool_trajectory

if TYPE_CHECKING:
    from easyvideor1.rollout.tools.base import ToolKit, ToolVideo

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
    # Per response its multi-turn trajectory (tools on), else None; empty: a single-turn group.
    trajectories: list[Trajectory | None] = field(default_factory=list)

    def values(self, key: str) -> list[float]:
        return [float(getattr(r, key)) for r in self.rewards]

    def trajectory(self, r: int) -> Trajectory | None:
        return self.trajectories[r] if r < len(self.trajectories) else None


def apply_call_cost(groups: Sequence[Group], call_cost: float) -> None:
    """``call_cost`` x the trajectory's tool calls (refused ones included) off each overall reward."""
    if call_cost <= 0:
        return
    for group in groups:
        for r, reward in enumerate(group.rewards):
            trajectory = group.trajectory(r)
            if trajectory is not None and trajectory.tool_calls:
                group.rewards[r] = dataclasses.replace(reward, overall=reward.overall
                                                       - call_cost * trajectory.tool_calls)


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
                 rewards: RewardClient, *, max_prompt_length: int, max_response_length: int,
                 tools: ToolsConfig | None = None, kit: ToolKit | None = None):
        """``tools`` (``worker.rollout.tools``) with ``enabled`` makes rounds multi-turn over ``kit``
        (``rollout.tools.make_tool_kit(cfg, engine.family)``)."""
        self.engine, self.loader, self.renderer, self.rewards = engine, loader, renderer, rewards
        self.max_prompt_length = max_prompt_length
        self.max_response_length = max_response_length
        self.tools = tools if tools is not None and tools.enabled else None
        if self.tools is not None and kit is None:
            raise ConfigError("worker.rollout.tools.enabled needs a tool kit for the rollout stage")
        self.kit = kit
        self._prompt_cache: dict[str, str] = {}
        self._tool_videos: dict[str, ToolVideo] = {}  # request id -> the video its tools see

    def _request(self, sample: Sample, uid: str, n: int) -> RolloutRequest:
        # By cache key for a prepared sample (no raw file needed), else by path.
        videos, images = [], []
        refs = media_refs(sample, self.engine.family.name)
        for ref in refs:
            array, metadata = ref.load(self.loader, sample_id=sample.problem_id)
            if ref.kind == "video":
                videos.append(VideoInput(array, metadata))
            else:
                images.append(ImageInput(array, metadata))
        text = self._prompt_cache.get(sample.problem_id)
        if text is None:
            text = self.renderer.render(sample_fields(sample))
            self._prompt_cache[sample.problem_id] = text
        if self.kit is None:
            return RolloutRequest(request_id=uid, messages=text, videos=videos, images=images, n=n)
        self._tool_videos[uid] = _tool_video(refs, videos)
        return RolloutRequest(request_id=uid, messages=text, videos=videos, images=images, n=n,
                              **self.kit.request_fields())

    def run(self, samples: Sequence[Sample], *, n: int, sampling: SamplingConfig, mix: MixPolicyConfig,
            uid_prefix: str) -> RoundResult:
        timings = {"frames_s": 0.0, "rollout_s": 0.0, "reward_s": 0.0}
        filtered: list[tuple[str, str]] = []
        requests: list[RolloutRequest] = []
        kept: list[Sample] = []
        offline: list[str | Trajectory | None] = []
        self._tool_videos.clear()  # the previous round's
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
            try:
                offline_response = self._offline(sample, request, mix)
            except EasyVideoR1Error as exc:
                filtered.append((sample.problem_id, f"{type(exc).__name__}: {exc}"))
                continue
            requests.append(request)
            kept.append(sample)
            offline.append(offline_response)
        timings["frames_s"] = time.perf_counter() - started
        for problem_id, reason in filtered:
            event(log, "sample_filtered", problem_id=problem_id, reason=reason)
        if not requests:
            return RoundResult([], filtered, timings)

        started = time.perf_counter()
        by_uid = {r.request_id: s for r, s in zip(requests, kept)}

        def online_accuracies(request: RolloutRequest, completions: list) -> list[float]:
            probe = Group(sample=by_uid[request.request_id], uid=request.request_id, prompt=None,
                          responses=[], texts=[c.text for c in completions], is_offline=[], finish_reasons=[])
            self._score([probe])
            return probe.values("accuracy")

        results = generate_groups(self.engine, requests, offline, sampling, mix,
                                  max_response_length=self.max_response_length,
                                  scorer=online_accuracies if mix.conditional else None,
                                  generate=self._multi_turn if self.tools is not None else None)
        timings["rollout_s"] = time.perf_counter() - started

        groups = []
        for sample, request, result in zip(kept, requests, results):
            completions = result.completions
            groups.append(Group(
                sample=sample, uid=request.request_id, prompt=result.prompt,
                responses=[list(c.token_ids) for c in completions], texts=[c.text for c in completions],
                is_offline=[c.is_offline for c in completions], finish_reasons=[c.finish_reason for c in completions],
                logprobs=[c.logprobs for c in completions],
                policy_version=result.policy_version,
                trajectories=[c.trajectory for c in completions] if self.tools is not None else []))
        started = time.perf_counter()
        self._score(groups)
        if self.tools is not None:
            apply_call_cost(groups, self.tools.call_cost)
        timings["reward_s"] = time.perf_counter() - started
        mix_groups = sum(1 for g in groups if any(g.is_offline))
        return RoundResult(groups, filtered, timings, mix_groups)

    def _offline(self, sample: Sample, request: RolloutRequest, mix: MixPolicyConfig) -> str | Trajectory | None:
        """The sample's offline response: its text, or with tools and mix-policy on and calls in it,
        the trajectory the kit makes of it (a bad one filters the sample, with the reason)."""
        if not sample.has_offline_trajectory:
            return None
        text = sample.offline_output
        if self.kit is None or not mix.enable or text is None or request.inputs is None:
            return text
        eos = int(self.engine.tokenizer.eos_token_id)
        trajectory = offline_tool_trajectory(text, request.inputs, self.engine.builder, self.kit,
                                             self._tool_videos[request.request_id], eos_token_id=eos,
                                             max_response_length=self.max_response_length)
        return text if trajectory is None else trajectory

    def _multi_turn(self, requests: Sequence[RolloutRequest], sampling: SamplingConfig) -> list:
        from easyvideor1.rollout.multi_turn import generate_multi_turn

        assert self.kit is not None and self.tools is not None
        return generate_multi_turn(self.engine, requests, self.kit,
                                   [self._tool_videos[r.request_id] for r in requests], sampling, self.tools,
                                   max_response_length=self.max_response_length)

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


def _tool_video(refs: Sequence, videos: Sequence[VideoInput]) -> ToolVideo:
    """What a sample's tool calls refer to: its first video (none: every call is refused, as
    out of range of a video of no length)."""
    from easyvideor1.rollout.tools.base import ToolVideo

    for ref in refs:
        if ref.kind == "video" and videos:
            return ToolVideo(path=ref.path, key=ref.key, duration_s=float(videos[0].metadata.duration))
    return ToolVideo(path=None, key=None, duration_s=0.0)
