"""The run config as every command's vocabulary: flags are overrides of fields of the same
name, derived values are computed once, and the shared sections validate what they hold."""

from __future__ import annotations

import argparse
import json

import pytest

from easyvideor1.config import load_config
from easyvideor1.config.cli import add_config_arguments, config_from_args, field_info
from easyvideor1.config.schema import RewardConfig, RunConfig
from easyvideor1.errors import ConfigError
from easyvideor1.rollout.factory import max_model_len, max_prompt_length


def _parser(*fields: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t")
    add_config_arguments(parser, fields)
    return parser


def test_flags_are_overrides_of_the_fields_they_name(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("serve:\n  reward: {port: 9000, max_batch: 10}\nworker:\n  reward: {timeout_s: 5}\n")
    parser = _parser("serve.reward.port", "serve.reward.max_batch", "worker.reward.timeout_s",
                     "serve.frame_cache.read_only")
    cfg = config_from_args(parser.parse_args(["--config", str(run), "--port", "9100", "--read-only",
                                              "worker.reward.accuracy_weight=1.0"]))
    assert cfg.serve.reward.port == 9100  # the flag wins over the file
    assert cfg.serve.reward.max_batch == 10 and cfg.worker.reward.timeout_s == 5  # the file wins over defaults
    assert cfg.serve.frame_cache.read_only is True and cfg.worker.reward.accuracy_weight == 1.0
    assert config_from_args(parser.parse_args([])) == RunConfig()  # nothing given: the config's defaults


def test_flag_help_shows_the_fields_own_default():
    text = " ".join(_parser("serve.reward.max_batch", "worker.reward.timeout_s").format_help().split())
    assert "[config serve.reward.max_batch, default 4096]" in text
    assert f"[config worker.reward.timeout_s, default {RewardConfig().timeout_s!r}]" in text
    info, default = field_info("serve.rollout.visibility_timeout_s")
    assert default == 300.0 and info.description


def test_bad_flag_values_name_the_field(tmp_path):
    parser = _parser("serve.reward.port")
    with pytest.raises(ConfigError, match="serve.reward.port"):
        config_from_args(parser.parse_args(["--port", "many"]))
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        config_from_args(parser.parse_args(["serve.reward.port"]))


def test_reward_section_resolves_problem_types_once():
    reward = RewardConfig(default_problem_type="multiple-choice", scorer_options={"Numerical": {"rel_tol": 0.1}})
    assert reward.default_problem_type == "multiple choice"
    assert reward.scorer_options == {"numerical": {"rel_tol": 0.1}}
    assert set(reward.scoring_fields()) >= {"accuracy_weight", "scorer_options", "timeout_s"}
    assert "url" not in reward.scoring_fields() and "workers" not in reward.scoring_fields()
    with pytest.raises(ValueError, match="unknown problem_type 'no-such-type'"):
        RewardConfig(scorer_options={"no-such-type": {}})
    with pytest.raises(ValueError, match="extra_scorer_modules: cannot import"):
        RewardConfig(extra_scorer_modules=["easyvideor1_no_such_module"])


def test_pool_must_give_each_engine_its_gpus():
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        load_config(None, ["serve.rollout.num_gpus=1", "worker.rollout.tensor_parallel_size=2"])
    assert load_config(None, ["serve.rollout.num_gpus=2", "worker.rollout.tensor_parallel_size=2"])


def test_model_length_is_derived_once_and_capped_by_the_model(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 4096}}))
    cfg = load_config(None, [f"worker.actor.model_path={model}", "data.max_prompt_length=8000",
                             "data.max_response_length=100"])
    assert max_model_len(cfg) == 4096 and max_prompt_length(cfg) == 3996
    roomy = load_config(None, [f"worker.actor.model_path={model}", "data.max_prompt_length=1000",
                               "data.max_response_length=100"])
    assert max_model_len(roomy) == 1100 and max_prompt_length(roomy) == 1000
    unknown = load_config(None, [f"worker.actor.model_path={tmp_path / 'none'}"])
    assert max_model_len(unknown) == unknown.data.max_prompt_length + unknown.data.max_response_length
