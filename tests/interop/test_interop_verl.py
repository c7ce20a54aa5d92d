"""easyvideor1's reward adapter under veRL 0.9.1's own loader and reward managers (real veRL,
installed by `make interop`; see verl_run.py for what runs in the child process)."""

from __future__ import annotations

import os

import httpx
import pytest

from services.reward.launch import reward_server

# data sources in batch order (verl_run.FILES): mc, gsm8k, MATH, unknown, span, box, count
EXPECTED_SCORES = [1.0, 1.0, 0.9, 0.0, 1.0, 1.0, 1.0]
EXPECTED_ERRORS = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]


@pytest.fixture(scope="module")
def verl_results(run_interop, tmp_path_factory):
    # A real reward service too: veRL hands reward_kwargs.url to compute_score.
    env = {k: v for k, v in os.environ.items() if k not in ("EVR1_REWARD_URL", "EVR1_REWARD_TOKEN")}
    with reward_server(["--workers", "1"], env=env) as server:
        results = run_interop("verl_run.py", tmp_path_factory.mktemp("verl"), server.url)
        metrics = httpx.get(f"{server.url}/metrics", timeout=30).text
    # One request per item: the reward loop calls compute_score item by item.
    results["service_requests"] = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("evr1_reward_requests_total{") and 'status="200"' in line and "score" in line
    )
    return results


def test_parquet_gives_nested_numpy_ground_truths(verl_results):
    # The shapes that used to fail the whole batch (ndarray is not JSON serializable).
    assert verl_results["shapes"] == {
        "ground_truth_types": ["dict", "int", "ndarray", "str"],
        "struct_value_type": "ndarray",
    }


@pytest.mark.parametrize("manager", ["reward_loop", "legacy_naive", "batch"])
def test_reward_managers_score_every_item(verl_results, manager):
    result = verl_results[manager]
    assert result["scores"] == pytest.approx(EXPECTED_SCORES)
    extra = result["extra"]
    assert set(extra) == {"score", "accuracy", "format", "reward/errors"}
    assert extra["reward/errors"] == EXPECTED_ERRORS
    assert extra["accuracy"] == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert extra["format"] == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]


def test_reward_service_gives_the_same_results(verl_results):
    assert verl_results["reward_loop_http"] == verl_results["reward_loop"]
    assert verl_results["service_requests"] == len(EXPECTED_SCORES)


def test_reward_tensor_holds_the_score_on_the_last_response_token(verl_results):
    assert verl_results["reward_loop"]["rm_scores_sum"] == pytest.approx(EXPECTED_SCORES)


def test_errors_reach_veRL_validation_metrics(verl_results):
    metrics = verl_results["val_metrics"]
    assert metrics["my-lab/videos/reward/errors/mean@1"] == 1.0
    assert metrics["openai/gsm8k/reward/errors/mean@1"] == 0.0
    assert metrics["openai/gsm8k/score/mean@1"] == 1.0
