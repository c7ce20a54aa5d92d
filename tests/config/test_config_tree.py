import subprocess
import sys

import pytest

from easyvideor1.config import RunConfig, config_reference, dump_config, load_config, validate_config
from easyvideor1.errors import ConfigError


def test_defaults_follow_the_paper_recipe():
    cfg = RunConfig()
    assert (cfg.algorithm.clip_ratio_low, cfg.algorithm.clip_ratio_high) == (0.2, 0.28)
    assert cfg.algorithm.kl.enable is False
    assert cfg.worker.rollout.n == 8
    assert cfg.data.video_fps == 2.0 and cfg.data.video_max_frames == 128
    assert cfg.data.video_max_pixels == 262144 and cfg.data.image_max_pixels == 1048576
    assert cfg.worker.actor.optim.lr == 1e-6


def test_yaml_and_dotted_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("algorithm:\n  adv_estimator: rloo\nworker:\n  rollout:\n    n: 4\n")
    cfg = load_config(path, ["algorithm.adv_estimator=grpo", "worker.rollout.n=8", "data.val_files=null",
                             "trainer.loggers=[console]"])
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.worker.rollout.n == 8
    assert cfg.data.val_files is None
    assert cfg.trainer.loggers == ["console"]


def test_unknown_keys_are_errors_with_a_hint(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("worker:\n  rollout:\n    nn: 4\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and "worker.rollout.nn" in message and "did you mean 'n'" in message


def test_every_bad_field_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        validate_config({"algorithm": {"adv_estimator": "nope", "clip_ratio_low": "x"}, "bogus": 1})
    message = str(info.value)
    assert "algorithm.adv_estimator" in message and "algorithm.clip_ratio_low" in message and "bogus" in message


@pytest.mark.parametrize("override", ["noequals", "=3", "data.train_files.x=1"])
def test_malformed_overrides(override):
    with pytest.raises(ConfigError):
        load_config(None, ["data.train_files=a.jsonl", override])


def test_cross_field_budget_check():
    with pytest.raises(ConfigError, match="video_min_frames"):
        validate_config({"data": {"video_min_frames": 10, "video_max_frames": 4}})


def test_dump_round_trips(tmp_path):
    cfg = load_config(None, ["worker.rollout.n=3", "algorithm.kl.enable=true"])
    path = tmp_path / "dumped.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(path) == cfg


def test_reference_documents_every_leaf():
    text = config_reference()
    for dotted in ("data.video_fps", "algorithm.kl.kind", "worker.rollout.n", "worker.actor.optim.lr",
                   "trainer.total_steps", "distributed.staleness"):
        assert f"`{dotted}`" in text


def test_cli_reports_errors_cleanly(tmp_path):
    result = subprocess.run([sys.executable, "-m", "easyvideor1.cli.main", "config", "show", "/nonexistent.yaml"],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert "cannot read config" in result.stderr and "Traceback" not in result.stderr


def test_committed_reference_is_current():
    from pathlib import Path

    committed = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    assert committed == config_reference(), "docs/config.md is stale: run `evr1 config docs > docs/config.md`"
