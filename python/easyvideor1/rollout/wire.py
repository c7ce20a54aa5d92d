"""The wire format between the trainer (rollout/remote_stage.py) and rollout workers (worker.py).

A task is one question: the sample row (absolute media paths), the prompt text the trainer
rendered, n, the sampling and mix-policy settings, the prompt/response limits, the frame
parameters (so worker and trainer compute the same cache keys), the run's scoring settings
(``worker.reward``'s scoring fields: a pool shared by runs scores each run its own way), and
which weights to use:
the run's version board, its prefix in the weights store, and the minimum policy version.
A result is the scored group: prompt and response token ids, texts, offline flags, finish
reasons, reward dicts, the policy version and board that produced it, and per-task counters.

With tools on (``worker.rollout.tools``, sent with the task), a multi-turn response's
:class:`~easyvideor1.models.trajectory.Trajectory` travels too, without pixels
(:func:`trajectory_to_wire`): token ids, loss mask, M-RoPE positions, token types, grids,
the media refs of its tool turns, one record per tool medium (kind, metadata, blake3 of its
frames) and the counters. The trainer fetches the media again by their refs through a tool
frame source (:func:`trajectory_from_wire`), checks each against its record, and rebuilds the
pixel tensors with its own prompt builder.

Both sides depend only on this module, so the format lives in one place; ``WIRE_VERSION``
changes with any incompatible edit and a worker refuses (dead-letters) tasks of another.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from easyvideor1.cache.blob import frame_checksum
from easyvideor1.config.schema import MixPolicyConfig, RewardConfig, ToolsConfig
from easyvideor1.data import Sample
from easyvideor1.data.schema import parse_row
from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.models.inputs import ImageInput, PromptBuilder, VideoInput
from easyvideor1.models.trajectory import Trajectory
from easyvideor1.rewards.types import RewardResult
from easyvideor1.rollout.base import Completion, SamplingConfig
from easyvideor1.rollout.tools.window import CROP_TOOL, WINDOW_TOOL
from easyvideor1.video.metadata import ImageMetadata, ImageParams, VideoMetadata, VideoParams

WIRE_VERSION = 3  # 3: the task's tools settings, results' trajectories
# Fetches a tool medium again from its ref (``VideoToolKit.refetch``, or
# ``functools.partial(rollout.tools.window.refetch, source)``).
Refetch = Callable[[dict[str, Any]], VideoInput | ImageInput]


class TaskError(EasyVideoR1Error):
    """A rollout task cannot be used (malformed payload or sample): a poison task."""


def sampling_to_dict(sampling: SamplingConfig) -> dict[str, Any]:
    data = dataclasses.asdict(sampling)
    data["stop_token_ids"] = list(sampling.stop_token_ids)
    return data


def sampling_from_dict(data: dict[str, Any]) -> SamplingConfig:
    data = dict(data)
    data["stop_token_ids"] = tuple(data.get("stop_token_ids") or ())
    return SamplingConfig(**data)


def reward_to_dict(reward: RewardResult) -> dict[str, Any]:
    return {"overall": float(reward.overall), "accuracy": float(reward.accuracy), "format": float(reward.format),
            "details": reward.details or {}, "error": reward.error, "problem_type": reward.problem_type}


def reward_from_dict(data: dict[str, Any]) -> RewardResult:
    return RewardResult(float(data["overall"]), float(data["accuracy"]), float(data["format"]),
                        data.get("details") or {}, data.get("error"), data.get("problem_type"))


@dataclass(frozen=True)
class WeightsRef:
    """Which policy a task wants: board name, store prefix of the run, minimum version."""

    board: str
    store_prefix: str
    min_version: int


@dataclass
class RolloutTask:
    task_id: str
    uid: str
    sample: Sample
    prompt_text: str
    n: int
    sampling: SamplingConfig
    mix: MixPolicyConfig
    max_prompt_length: int
    max_response_length: int
    video_params: VideoParams
    image_params: ImageParams
    weights: WeightsRef
    reward: RewardConfig
    tools: ToolsConfig | None = None  # the run's worker.rollout.tools when enabled: multi-turn rollouts

    def batch_key(self) -> str:
        """Tasks with equal keys can be generated (and scored) in one call."""
        tools = self.tools.model_dump(mode="json") if self.tools is not None else None
        return json.dumps([sampling_to_dict(self.sampling), self.mix.model_dump(), self.reward.scoring_fields(), self.n,
                           self.max_prompt_length, self.max_response_length, self.video_params.as_dict(),
                           self.image_params.as_dict(), dataclasses.asdict(self.weights), tools], sort_keys=True)


def task_payload(*, sample: Sample, uid: str, prompt_text: str, n: int, sampling: SamplingConfig,
                 mix: MixPolicyConfig, max_prompt_length: int, max_response_length: int,
                 video_params: VideoParams, image_params: ImageParams, weights: WeightsRef,
                 reward: RewardConfig, tools: ToolsConfig | None = None) -> dict[str, Any]:
    """``tools``: sent when enabled, so a pool shared by runs rolls each out with its own tools."""
    payload = {"v": WIRE_VERSION, "uid": uid, "row": sample.to_row(), "prompt_text": prompt_text, "n": n,
               "sampling": sampling_to_dict(sampling), "mix": mix.model_dump(mode="json"),
               "reward": reward.scoring_fields(),
               "limits": {"max_prompt_length": max_prompt_length, "max_response_length": max_response_length},
               "frames": {"video": video_params.as_dict(), "image": image_params.as_dict()},
               "weights": dataclasses.asdict(weights)}
    if tools is not None and tools.enabled:
        payload["tools"] = tools.model_dump(mode="json")
    return payload


def parse_task(task_id: str, payload: Any) -> RolloutTask:
    """A :class:`RolloutTask`, or :class:`TaskError` naming everything wrong with the payload."""
    if not isinstance(payload, dict):
        raise TaskError(f"task {task_id!r}: payload must be an object, got {type(payload).__name__}")
    if payload.get("v") != WIRE_VERSION:
        raise TaskError(f"task {task_id!r}: wire version {payload.get('v')!r}, this worker speaks {WIRE_VERSION}")
    try:
        uid = str(payload["uid"])
        sample, problems = parse_row(payload["row"], path=f"task {task_id}", line=0, base_dir="/",
                                     default_id=uid)
        if sample is None:
            raise TaskError(f"task {task_id!r}: malformed sample: "
                            + "; ".join(p.describe() for p in problems))
        limits, frames, weights = payload["limits"], payload["frames"], payload["weights"]
        task = RolloutTask(
            task_id=task_id, uid=uid, sample=sample, prompt_text=str(payload["prompt_text"]), n=int(payload["n"]),
            sampling=sampling_from_dict(payload["sampling"]), mix=MixPolicyConfig.model_validate(payload["mix"]),
            reward=RewardConfig.model_validate(payload["reward"]),
            max_prompt_length=int(limits["max_prompt_length"]),
            max_response_length=int(limits["max_response_length"]),
            video_params=VideoParams(**frames["video"]), image_params=ImageParams(**frames["image"]),
            weights=WeightsRef(str(weights["board"]), str(weights["store_prefix"]), int(weights["min_version"])),
            tools=ToolsConfig.model_validate(payload["tools"]) if payload.get("tools") is not None else None)
    except TaskError:
        raise
    except (KeyError, TypeError, ValueError, EasyVideoR1Error) as exc:  # pydantic's errors are ValueErrors
        raise TaskError(f"task {task_id!r}: malformed payload: {type(exc).__name__}: {exc}") from None
    if task.n < 1 or task.weights.min_version < 0:
        raise TaskError(f"task {task_id!r}: n must be >= 1 and min_version >= 0")
    if not task.prompt_text:
        raise TaskError(f"task {task_id!r}: empty prompt text")
    return task


def result_payload(task: RolloutTask, group: Any, *, policy_version: int, board: str, mix_injected: bool,
                   worker: str, attempt: int, counters: dict[str, float]) -> dict[str, Any]:
    """The scored group of ``task`` (``group`` is a rollout.stage.Group); a multi-turn group's
    ``trajectories`` (one per response, None for a single-turn one) travel without pixels."""
    payload = {"v": WIRE_VERSION, "status": "ok", "uid": task.uid, "problem_id": task.sample.problem_id,
               "prompt_ids": [int(t) for t in group.prompt.prompt_ids],
               "responses": [[int(t) for t in r] for r in group.responses], "texts": list(group.texts),
               "is_offline": [bool(x) for x in group.is_offline], "finish_reasons": list(group.finish_reasons),
               "rewards": [reward_to_dict(r) for r in group.rewards], "policy_version": int(policy_version),
               "board": board, "mix_injected": bool(mix_injected), "worker": worker, "attempt": int(attempt),
               "counters": counters}
    trajectories = getattr(group, "trajectories", None) or []
    if any(t is not None for t in trajectories):
        payload["trajectories"] = [None if t is None else trajectory_to_wire(t) for t in trajectories]
    return payload


def filtered_payload(task: RolloutTask, reason: str, *, worker: str, attempt: int, policy_version: int,
                     board: str, counters: dict[str, float]) -> dict[str, Any]:
    """A task whose sample cannot be used (too long a prompt, unreadable media): not a failure."""
    return {"v": WIRE_VERSION, "status": "filtered", "uid": task.uid, "problem_id": task.sample.problem_id,
            "reason": reason, "policy_version": int(policy_version), "board": board, "worker": worker,
            "attempt": int(attempt), "counters": counters}


# ---- multi-turn trajectories --------------------------------------------------------------
def _media_kind(ref: dict[str, Any], where: str) -> str:
    tool = ref.get("tool") if isinstance(ref, dict) else None
    if tool == WINDOW_TOOL:
        return "video"
    if tool == CROP_TOOL:
        return "image"
    raise TaskError(f"{where}: media ref of unknown tool {tool!r} (known: {WINDOW_TOOL}, {CROP_TOOL})")


def _media_record(medium: VideoInput | ImageInput) -> dict[str, Any]:
    if isinstance(medium, VideoInput):
        return {"kind": "video", "metadata": medium.metadata.as_dict(), "checksum": frame_checksum(
            np.ascontiguousarray(medium.frames))}
    image = np.ascontiguousarray(medium.image)
    metadata = medium.metadata.as_dict() if medium.metadata is not None else None
    return {"kind": "image", "metadata": metadata, "checksum": frame_checksum(image)}


def trajectory_to_wire(traj: Trajectory, where: str = "trajectory") -> dict[str, Any]:
    """``traj`` without pixels: every tool medium is named by its ref (module docstring)."""
    refs = [dict(r) for r in traj.media_refs]
    videos, images = iter(traj.videos), iter(traj.images)
    if len(refs) != len(traj.videos) + len(traj.images):
        raise TaskError(f"{where}: {len(refs)} media refs for {len(traj.videos)} videos and {len(traj.images)} "
                        "images: its tool media cannot be fetched again")
    media = [_media_record(next(videos) if _media_kind(ref, where) == "video" else next(images)) for ref in refs]
    return {"token_ids": [int(t) for t in traj.token_ids], "loss_mask": [int(m) for m in traj.loss_mask],
            "position_ids": np.asarray(traj.position_ids).tolist(), "position_dtype": str(traj.position_ids.dtype),
            "mm_token_type_ids": [int(t) for t in traj.mm_token_type_ids], "next_position": int(traj.next_position),
            "video_grid_thw": [[int(x) for x in g] for g in traj.video_grid_thw],
            "image_grid_thw": [[int(x) for x in g] for g in traj.image_grid_thw],
            "second_per_grid_ts": None if traj.second_per_grid_ts is None else [float(x) for x in
                                                                                 traj.second_per_grid_ts],
            "media_refs": refs, "media": media,
            "counters": {"turns": int(traj.turns), "tool_calls": int(traj.tool_calls),
                         "tool_errors": int(traj.tool_errors), "frames_fetched": int(traj.frames_fetched)},
            "final_text": traj.final_text}


def _check_medium(medium: Any, record: dict[str, Any], where: str) -> None:
    """A re-fetched medium must be the rollout's: same kind, metadata and frame bytes."""
    kind = "video" if isinstance(medium, VideoInput) else "image" if isinstance(medium, ImageInput) else None
    if kind != record.get("kind"):
        raise TaskError(f"{where}: re-fetched a {kind or type(medium).__name__}, the rollout had a {record.get('kind')}")
    got = _media_record(medium)
    meta_cls = VideoMetadata if kind == "video" else ImageMetadata
    wanted = None if record.get("metadata") is None else meta_cls.from_dict(record["metadata"])
    have = getattr(medium, "metadata", None)
    if (wanted is not None and have != wanted) or got["checksum"] != record.get("checksum"):
        raise TaskError(f"{where}: the re-fetched frames differ from the rollout's (metadata or pixels): the "
                        "video, the frame parameters or the decoder changed between rollout and training")


def trajectory_from_wire(data: Any, *, refetch: Refetch | None, builder: PromptBuilder | None = None,
                         where: str = "trajectory") -> Trajectory:
    """The :class:`Trajectory` of :func:`trajectory_to_wire`'s dict, its media fetched again by
    ``refetch`` and checked; with ``builder``, its pixel tensors too (else ``tensors == {}``).
    TaskError names what is malformed or differs; the source's own errors pass through."""
    if not isinstance(data, dict):
        raise TaskError(f"{where}: must be an object, got {type(data).__name__}")
    try:
        refs, records = list(data["media_refs"]), list(data["media"])
        if len(refs) != len(records):
            raise TaskError(f"{where}: {len(refs)} media refs for {len(records)} media records")
        if refs and refetch is None:
            raise TaskError(f"{where}: has tool media; re-fetching them needs a tool frame source")
        videos: list[VideoInput] = []
        images: list[ImageInput] = []
        for i, (ref, record) in enumerate(zip(refs, records)):
            _media_kind(ref, f"{where} medium {i}")
            assert refetch is not None
            medium = refetch(ref)
            _check_medium(medium, record, f"{where} medium {i}")
            (videos if isinstance(medium, VideoInput) else images).append(medium)
        counters = data["counters"]
        seconds = data.get("second_per_grid_ts")
        traj = Trajectory(
            token_ids=[int(t) for t in data["token_ids"]], loss_mask=[int(m) for m in data["loss_mask"]],
            position_ids=np.asarray(data["position_ids"], dtype=np.dtype(data.get("position_dtype", "int64")))
            .reshape(3, -1), mm_token_type_ids=[int(t) for t in data["mm_token_type_ids"]],
            next_position=int(data["next_position"]), videos=tuple(videos), images=tuple(images),
            video_grid_thw=tuple(tuple(int(x) for x in g) for g in data["video_grid_thw"]),
            image_grid_thw=tuple(tuple(int(x) for x in g) for g in data["image_grid_thw"]),
            second_per_grid_ts=None if seconds is None else tuple(float(x) for x in seconds),
            media_refs=tuple(dict(r) for r in refs), turns=int(counters["turns"]),
            tool_calls=int(counters["tool_calls"]), tool_errors=int(counters["tool_errors"]),
            frames_fetched=int(counters["frames_fetched"]), final_text=str(data["final_text"]))
    except TaskError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise TaskError(f"{where}: malformed: {type(exc).__name__}: {exc}") from None
    if builder is not None and (videos or images):
        traj.tensors = builder.pixel_tensors(videos, images, sample_id=where)
    return traj


def trajectories_from_wire(data: Any, *, refetch: Refetch | None, builder: PromptBuilder | None = None,
                           where: str = "result") -> list[Trajectory | None]:
    """A result's ``trajectories`` (one per response, None for a single-turn one), re-fetched."""
    if not isinstance(data, list):
        raise TaskError(f"{where}: trajectories must be a list, got {type(data).__name__}")
    return [None if item is None else trajectory_from_wire(item, refetch=refetch, builder=builder,
                                                            where=f"{where} response {i}")
            for i, item in enumerate(data)]


def completion_to_wire(completion: Completion) -> dict[str, Any]:
    """One response, its trajectory (if multi-turn) without pixels."""
    logprobs = None if completion.logprobs is None else [float(x) for x in completion.logprobs]
    trajectory = None if completion.trajectory is None else trajectory_to_wire(completion.trajectory)
    return {"token_ids": [int(t) for t in completion.token_ids], "text": completion.text, "logprobs": logprobs,
            "finish_reason": completion.finish_reason, "is_offline": bool(completion.is_offline),
            "trajectory": trajectory}


def completion_from_wire(data: Any, *, refetch: Refetch | None = None, builder: PromptBuilder | None = None,
                         where: str = "completion") -> Completion:
    if not isinstance(data, dict):
        raise TaskError(f"{where}: must be an object, got {type(data).__name__}")
    try:
        trajectory = data.get("trajectory")
        logprobs = data.get("logprobs")
        return Completion(
            token_ids=[int(t) for t in data["token_ids"]], text=str(data["text"]),
            logprobs=None if logprobs is None else [float(x) for x in logprobs],
            finish_reason=str(data["finish_reason"]), is_offline=bool(data.get("is_offline", False)),
            trajectory=None if trajectory is None else trajectory_from_wire(
                trajectory, refetch=refetch, builder=builder, where=f"{where} trajectory"))
    except (KeyError, TypeError, ValueError) as exc:
        raise TaskError(f"{where}: malformed: {type(exc).__name__}: {exc}") from None
