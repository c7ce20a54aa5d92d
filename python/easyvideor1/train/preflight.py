"""A training run's inputs, checked before any engine or actor starts.

The model folder (``worker.actor.model_path``, ``models/paths.py``) and every row of the
training and validation data, by the check ``evr1 data validate`` runs (schema, problem type,
ground truth; ``rewards/gt_check.py``) as the run's reward config scores them (an unknown
type is an error unless ``worker.reward.default_problem_type`` routes it). A typo in a row's
``problem_type`` would otherwise train with every response of that row scoring 0, silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from easyvideor1.config.schema import RunConfig
from easyvideor1.data import Sample, load_samples
from easyvideor1.models.paths import check_model_dir
from easyvideor1.rewards.gt_check import run_sample_check


@dataclass
class RunData:
    train: list[Sample]
    val: list[Sample]


def load_run_data(cfg: RunConfig) -> RunData:
    """The train and val rows, each checked; :class:`DataError` names every bad row's
    file:line: field."""
    check = run_sample_check(cfg.worker.reward)
    train = load_samples(cfg.data.train_files, media_root=cfg.data.media_root, check_ground_truth=check)
    val = (load_samples(cfg.data.val_files, media_root=cfg.data.media_root, check_ground_truth=check)
           if cfg.data.val_files else [])
    return RunData(train, val)


def check_run_inputs(cfg: RunConfig) -> RunData:
    """The model folder, then the data: what a run refuses before it starts anything."""
    check_model_dir(cfg.worker.actor.model_path, "worker.actor.model_path")
    return load_run_data(cfg)
