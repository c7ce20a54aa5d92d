"""easyvideor1's reward functions in TRL 1.16's GRPOTrainer: 2 training steps of a tiny random
Qwen2 on CPU (real TRL, installed by `make interop`; trl_run.py runs in a child process)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def trl_result(run_interop, tmp_path_factory):
    return run_interop("trl_run.py", tmp_path_factory.mktemp("trl"), timeout=240)


def test_grpo_trains_two_steps_in_time(trl_result):
    assert trl_result["global_step"] == 2
    assert trl_result["train_s"] < 120


def test_trl_logs_each_component_and_the_errors(trl_result):
    steps = [h for h in trl_result["log_history"] if "rewards/evr1_accuracy/mean" in h]
    assert len(steps) == 2
    for h in steps:
        assert h["completions/mean_length"] == 4  # <answer> B </answer> <|im_end|>: the steered completion
        # rows: multiple choice right (1, 1), numerical wrong but tagged (0, 0.5), unknown type (error: 0, 0)
        assert h["rewards/evr1_accuracy/mean"] == pytest.approx(1 / 3)
        assert h["rewards/evr1_format/mean"] == pytest.approx(0.5)
        assert h["rewards/evr1_reward/mean"] == pytest.approx((2 * 1.0 + 2 * 0.05) / 6)
        assert h["reward/errors"] == pytest.approx(1 / 3)
        # reward_weights = [accuracy_weight, format_weight]: TRL's total is the overall reward
        assert h["reward"] == pytest.approx(h["rewards/evr1_reward/mean"])
    assert trl_result["reward_weights"] == [0.9, 0.1]
