"""Reward settings for ``evr1 serve reward --config FILE``: YAML/JSON, checked strictly."""

from __future__ import annotations

import json
import math
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from easyvideor1.errors import ConfigError
from easyvideor1.rewards.client import json_type_name
from easyvideor1.rewards.extract import POLICIES
from easyvideor1.rewards.registry import UnknownProblemType, canonical_problem_type
from easyvideor1.rewards.types import RewardConfig

_CONFIG_FIELDS = {f.name for f in fields(RewardConfig)}


def reward_config_from_mapping(data: Any, source: str = "reward config") -> RewardConfig:
    """Build and check a :class:`RewardConfig`; a ``rewards:`` section is used when present.

    Unknown keys, wrong types and unknown problem types are :class:`ConfigError`; scorer
    option keys are canonicalised (``multiple-choice`` -> ``multiple choice``).
    """
    if isinstance(data, dict) and set(data) == {"rewards"}:
        data = data["rewards"]
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of reward settings, got {json_type_name(data)}")
    unknown = sorted(set(data) - _CONFIG_FIELDS)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_CONFIG_FIELDS))}")
    values = dict(data)
    for key in ("accuracy_weight", "format_weight", "timeout_s"):
        if key in values:
            v = values[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ConfigError(f"{source}: '{key}' must be a finite number, got {v!r}")
            values[key] = float(v)
    if values.get("timeout_s", 1.0) <= 0:
        raise ConfigError(f"{source}: 'timeout_s' must be > 0")
    if values.get("answer_tag_policy", "last") not in POLICIES:
        raise ConfigError(f"{source}: 'answer_tag_policy' must be one of {', '.join(POLICIES)}")
    try:
        if values.get("default_problem_type") is not None:
            values["default_problem_type"] = canonical_problem_type(str(values["default_problem_type"]))
        options = values.get("scorer_options") or {}
        if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
            raise ConfigError(f"{source}: 'scorer_options' must map problem types to mappings")
        values["scorer_options"] = {canonical_problem_type(k): dict(v) for k, v in options.items()}
    except UnknownProblemType as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return RewardConfig(**values)


def load_reward_config(path: str | os.PathLike) -> RewardConfig:
    """Read a YAML or JSON file of reward settings (see :func:`reward_config_from_mapping`)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read reward config {path}: {exc}") from None
    import yaml

    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"reward config {path} is not valid JSON/YAML: {exc}") from None
    return reward_config_from_mapping(data, str(path))
