"""Synthetic video/image/text tasks with exact ground truth, for tests, the demo and CI.

``generate_synthetic`` writes ``media/<type>/<index>.mp4|png`` plus ``train.jsonl`` and
``val.jsonl`` (the last ``val_fraction`` of each type, held out). Every sample depends only
on (seed, type name, index) and the media size settings, so the same call always writes
the same rows and the same frames, and asking for fewer types does not change the others.
"""

from __future__ import annotations

import os
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from easyvideor1.console import Progress
from easyvideor1.data.loader import write_samples
from easyvideor1.data.schema import Sample, parse_row
from easyvideor1.data.synth_common import SynthConfig, TaskFn, TaskInstance
from easyvideor1.data.synth_demo_tasks import DEMO_TASKS
from easyvideor1.data.synth_render import make_long_video, save_image, save_video
from easyvideor1.data.synth_still_tasks import STILL_TASKS
from easyvideor1.data.synth_video_tasks import VIDEO_TASKS
from easyvideor1.errors import ConfigError, DataError
from easyvideor1.logging import event, get_logger

# SYNTH_TYPES cover every problem type; the demo tasks are opt-in (``types=[...]``).
SYNTH_TYPES: tuple[str, ...] = tuple({**VIDEO_TASKS, **STILL_TASKS})
TASKS: dict[str, TaskFn] = {**VIDEO_TASKS, **STILL_TASKS, **DEMO_TASKS}
# The task whose train rows carry offline trajectories by default: the longest structured
# answer, the one a small policy is least likely to get right on its own.
DEFAULT_OFFLINE_TYPE = "spatial_temporal_grounding"

__all__ = ["SYNTH_TYPES", "SynthConfig", "SynthReport", "generate_synthetic", "make_long_video"]

log = get_logger(__name__)


@dataclass
class SynthReport:
    out_dir: Path
    train_path: Path
    val_path: Path
    n_train: int
    n_val: int
    per_type: dict[str, int] = field(default_factory=dict)
    n_offline: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        types = ", ".join(f"{k}={v}" for k, v in self.per_type.items())
        return (f"wrote {self.n_train} train + {self.n_val} val rows ({self.n_offline} with offline "
                f"trajectories) to {self.out_dir} in {self.seconds:.1f} s\n  per type: {types}")


def generate_synthetic(
    out_dir: str | os.PathLike,
    n_per_type: int,
    seed: int = 0,
    types: Sequence[str] | None = None,
    *,
    size: int = 64,
    fps: float = 8.0,
    seconds: float = 2.0,
    val_fraction: float = 0.2,
    offline_type: str | Sequence[str] | None = DEFAULT_OFFLINE_TYPE,
    offline_fraction: float = 0.5,
    offline_reasoning: bool = True,
    progress: bool = True,
) -> SynthReport:
    """Generate ``n_per_type`` samples of every type in ``types`` (default: all of
    :data:`SYNTH_TYPES`).

    ``val_fraction`` of each type (at least one when ``n_per_type >= 2``) goes to
    ``val.jsonl``. The first ``offline_fraction`` of the train rows of ``offline_type`` (one
    type name or several) carry
    ``has_offline_trajectory`` and a correct ``<think>..</think><answer>..</answer>``
    response (``offline_reasoning=False``: the ``<answer>`` part only, for tiny models with a
    short response budget). Bad arguments raise :class:`ConfigError`.
    """
    started = time.monotonic()
    try:
        cfg = SynthConfig(size=size, fps=fps, seconds=seconds)
    except ValueError as exc:
        raise ConfigError(f"synthetic data: {exc}") from None
    types = list(SYNTH_TYPES if types is None else types)
    offline_types = _as_types(offline_type)
    _check_args(n_per_type, seed, types, val_fraction, offline_types, offline_fraction)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    n_val = min(n_per_type - 1, max(1, int(round(n_per_type * val_fraction)))) if val_fraction > 0 else 0
    n_offline = int(round((n_per_type - n_val) * offline_fraction))

    train: list[Sample] = []
    val: list[Sample] = []
    per_type: Counter = Counter()
    with Progress("synth", total=n_per_type * len(types), unit="sample", enabled=progress) as bar:
        for name in types:
            for index in range(n_per_type):
                is_val = index >= n_per_type - n_val
                offline = name in offline_types and not is_val and index < n_offline
                sample = _make_sample(out, cfg, seed, name, index, offline, offline_reasoning)
                (val if is_val else train).append(sample)
                per_type[name] += 1
                bar.update(1)
    train_path = write_samples(out / "train.jsonl", train)
    val_path = write_samples(out / "val.jsonl", val)
    report = SynthReport(out, train_path, val_path, len(train), len(val), dict(per_type),
                         sum(s.has_offline_trajectory for s in train), time.monotonic() - started)
    event(log, "synth.done", out=str(out), train=report.n_train, val=report.n_val, offline=report.n_offline,
          seconds=round(report.seconds, 2))
    return report


def _as_types(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _check_args(n_per_type: int, seed: int, types: list[str], val_fraction: float, offline_types: tuple[str, ...],
                offline_fraction: float) -> None:
    unknown = [t for t in types if t not in TASKS]
    if unknown:
        raise ConfigError(f"unknown synthetic type(s) {unknown}; known: {', '.join(TASKS)}")
    if len(set(types)) != len(types):
        raise ConfigError(f"synthetic types listed twice: {types}")
    if not isinstance(n_per_type, int) or n_per_type < 1:
        raise ConfigError(f"n_per_type must be a positive integer, got {n_per_type!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    if not 0 <= val_fraction < 1:
        raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction}")
    if not 0 <= offline_fraction <= 1:
        raise ConfigError(f"offline_fraction must be in [0, 1], got {offline_fraction}")
    for offline_type in offline_types:
        if offline_type not in TASKS:
            raise ConfigError(f"unknown offline_type {offline_type!r}; known: {', '.join(TASKS)}")


def task_rng(seed: int, name: str, index: int) -> np.random.Generator:
    """The generator of one sample: a function of (seed, type, index) only."""
    return np.random.default_rng([seed, zlib.crc32(name.encode()), index])


def make_task(name: str, index: int, seed: int, cfg: SynthConfig | None = None) -> TaskInstance:
    """Build one sample's media and ground truth in memory (no files written)."""
    return TASKS[name](task_rng(seed, name, index), cfg or SynthConfig())


def _make_sample(out: Path, cfg: SynthConfig, seed: int, name: str, index: int, offline: bool,
                 reasoning: bool = True) -> Sample:
    task = make_task(name, index, seed, cfg)
    row: dict = {"problem_id": f"synth-{name}-{index:04d}", "problem": task.problem, "answer": task.answer,
                 "problem_type": task.problem_type}
    if task.options is not None:
        row["options"] = list(task.options)
    if task.frames is not None:
        row["videos"] = [str(save_video(out / "media" / name / f"{index:04d}.mp4", task.frames, cfg.fps))]
    if task.image is not None:
        row["images"] = [str(save_image(out / "media" / name / f"{index:04d}.png", task.image))]
    if offline:
        row["has_offline_trajectory"] = True
        answer = f"<answer>{task.answer}</answer>"
        row["offline_output"] = f"<think>{task.reasoning}</think>\n{answer}" if reasoning else answer
    row["synth"] = {"task": name, "seed": seed, **task.info}
    # Going through the validator guarantees generated rows load cleanly (placeholders too).
    sample, problems = parse_row(row, path=f"<synth {name}>", line=index + 1, base_dir=str(out),
                                 default_id=row["problem_id"])
    if sample is None:
        raise DataError(problems)
    return sample
