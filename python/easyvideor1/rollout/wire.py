"""The wire format between the trainer (rollout/remote_stage.py) and rollout workers (worker.py).

A task is one question: the sample row (absolute media paths), the prompt text the trainer
rendered, n, the sampling and mix-policy settings, the prompt/response limits, the frame
parameters (so worker and trainer compute the same cache keys), the run's scoring settings
(``worker.reward``'s scoring fields: a pool shared by runs scores each run its own way), and
which weights to use:
the run's version board, its prefix in the weights store, and the minimum policy version.
A result is the scored group: prompt and response token ids, texts, offline flags, finish
reasons, reward dicts, the policy version and board that produced it, and per-task counters.

Both sides depend only on this module, so the format lives in one place; ``WIRE_VERSION``
changes with any incompatible edit and a worker refuses (dead-letters) tasks of another.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from easyvideor1.config.schema import MixPolicyConfig, RewardConfig
from easyvideor1.data import Sample
from easyvideor1.data.schema import parse_row
from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.rewards.types import RewardResult
from easyvideor1.rollout.base import SamplingConfig
from easyvideor1.video.metadata import ImageParams, VideoParams

WIRE_VERSION = 2


class TaskError(EasyVideoR1Error):
    """A rollout task cannot be used (malformed payload or sample): a poison task."""


def join_store(root: str, prefix: str) -> str:
    """``root`` (a path, file://, or s3://bucket/p?query) with ``prefix`` appended to its path."""
    parts = urlsplit(root)
    if parts.scheme in ("", "file"):
        path = parts.path if parts.scheme else root
        joined = f"{path.rstrip('/')}/{prefix.strip('/')}"
        return f"file://{joined}" if parts.scheme else joined
    path = f"{parts.path.rstrip('/')}/{prefix.strip('/')}"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


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

    def batch_key(self) -> str:
        """Tasks with equal keys can be generated (and scored) in one call."""
        return json.dumps([sampling_to_dict(self.sampling), self.mix.model_dump(), self.reward.scoring_fields(), self.n,
                           self.max_prompt_length, self.max_response_length, self.video_params.as_dict(),
                           self.image_params.as_dict(), dataclasses.asdict(self.weights)], sort_keys=True)


def task_payload(*, sample: Sample, uid: str, prompt_text: str, n: int, sampling: SamplingConfig,
                 mix: MixPolicyConfig, max_prompt_length: int, max_response_length: int,
                 video_params: VideoParams, image_params: ImageParams, weights: WeightsRef,
                 reward: RewardConfig) -> dict[str, Any]:
    return {"v": WIRE_VERSION, "uid": uid, "row": sample.to_row(), "prompt_text": prompt_text, "n": n,
            "sampling": sampling_to_dict(sampling), "mix": mix.model_dump(mode="json"),
            "reward": reward.scoring_fields(),
            "limits": {"max_prompt_length": max_prompt_length, "max_response_length": max_response_length},
            "frames": {"video": video_params.as_dict(), "image": image_params.as_dict()},
            "weights": dataclasses.asdict(weights)}


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
            weights=WeightsRef(str(weights["board"]), str(weights["store_prefix"]), int(weights["min_version"])))
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
    """The scored group of ``task`` (``group`` is a rollout.stage.Group)."""
    return {"v": WIRE_VERSION, "status": "ok", "uid": task.uid, "problem_id": task.sample.problem_id,
            "prompt_ids": [int(t) for t in group.prompt.prompt_ids],
            "responses": [[int(t) for t in r] for r in group.responses], "texts": list(group.texts),
            "is_offline": [bool(x) for x in group.is_offline], "finish_reasons": list(group.finish_reasons),
            "rewards": [reward_to_dict(r) for r in group.rewards], "policy_version": int(policy_version),
            "board": board, "mix_injected": bool(mix_injected), "worker": worker, "attempt": int(attempt),
            "counters": counters}


def filtered_payload(task: RolloutTask, reason: str, *, worker: str, attempt: int, policy_version: int,
                     board: str, counters: dict[str, float]) -> dict[str, Any]:
    """A task whose sample cannot be used (too long a prompt, unreadable media): not a failure."""
    return {"v": WIRE_VERSION, "status": "filtered", "uid": task.uid, "problem_id": task.sample.problem_id,
            "reason": reason, "policy_version": int(policy_version), "board": board, "worker": worker,
            "attempt": int(attempt), "counters": counters}
