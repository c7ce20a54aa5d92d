"""KL estimators, logits helpers, controllers, the reward penalty and the KL settings."""

from __future__ import annotations

import math

import pytest
import torch

from easyvideor1.algos import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    AlgoInputError,
    FixedKLController,
    apply_kl_penalty,
    compute_entropy_from_logits,
    compute_kl,
    compute_kl_loss,
    kl_controller,
    kl_full_from_logits,
)
from easyvideor1.config.schema import KLConfig
from easyvideor1.errors import ConfigError


def test_sampled_token_estimators_by_hand():
    log_probs = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    delta = [0.5, -1.0]
    expected = {
        "kl": delta,
        "abs": [0.5, 1.0],
        "mse": [0.125, 0.5],
        "low_var_kl": [math.exp(-d) + d - 1 for d in delta],
    }
    aliases = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
    for kind in ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"):
        values = compute_kl(kind, log_probs, ref)
        torch.testing.assert_close(values, torch.tensor([expected[aliases.get(kind, kind)]], dtype=torch.float64))


def test_k3_clamps_like_established_frameworks():
    log_probs = torch.tensor([[0.0, 0.0, 0.0]], dtype=torch.float64)
    ref = torch.tensor([[5.0, 30.0, -30.0]], dtype=torch.float64)
    values = compute_kl("k3", log_probs, ref)
    # exp(5) - 5 - 1 > 10 and exp(-20) + 20 - 1 (log-ratio clamped to -20) both end clamped at 10
    torch.testing.assert_close(values, torch.tensor([[10.0, 10.0, 10.0]], dtype=torch.float64))
    assert compute_kl("k3", torch.tensor([[0.0]]), torch.tensor([[-9.0]])).item() == pytest.approx(
        math.exp(-9.0) + 8.0
    )


def test_k3_gradient_is_one_minus_reference_ratio():
    log_probs = torch.tensor([[-1.0, -0.5, 0.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.2, -0.1, -9.0]], dtype=torch.float64)
    compute_kl("k3", log_probs, ref).sum().backward()
    expected = 1 - torch.exp(ref - log_probs.detach())  # all three values lie inside the clamps
    torch.testing.assert_close(log_probs.grad, expected)
    clamped = torch.tensor([[0.0]], dtype=torch.float64, requires_grad=True)
    compute_kl("k3", clamped, torch.tensor([[5.0]], dtype=torch.float64)).sum().backward()
    assert clamped.grad.item() == 0.0  # outside the [-10, 10] clamp no gradient flows


def test_full_kl_and_entropy_from_logits():
    logits = torch.tensor([[[1.0, 2.0, 0.5]]], dtype=torch.float64)
    ref_logits = torch.tensor([[[0.0, 0.0, 0.0]]], dtype=torch.float64)
    p = torch.softmax(logits, -1)[0, 0]
    expected_kl = sum(p[v] * (math.log(p[v]) - math.log(1 / 3)) for v in range(3))
    assert kl_full_from_logits(logits, ref_logits).item() == pytest.approx(float(expected_kl))
    assert compute_kl("full", logits, ref_logits).item() == pytest.approx(float(expected_kl))
    expected_entropy = -sum(p[v] * math.log(p[v]) for v in range(3))
    assert compute_entropy_from_logits(logits).item() == pytest.approx(float(expected_entropy))
    assert compute_entropy_from_logits(ref_logits).item() == pytest.approx(math.log(3))


def test_mask_blocks_junk_values_and_gradients():
    mask = torch.tensor([[1, 0]])
    for kind in KL_ESTIMATORS:
        shape = (1, 2, 3) if kind == "full" else (1, 2)
        log_probs = torch.full(shape, -0.5, dtype=torch.float64)
        log_probs[0, 1] = float("nan")
        log_probs.requires_grad_(True)
        ref = torch.full(shape, -0.7, dtype=torch.float64)
        ref[0, 1] = float("inf")
        values = compute_kl(kind, log_probs, ref, response_mask=mask)
        values.sum().backward()
        assert values[0, 1] == 0 and torch.isfinite(values).all()
        assert torch.isfinite(log_probs.grad).all() and (log_probs.grad[0, 1] == 0).all()


def test_kl_errors_name_the_problem():
    with pytest.raises(ConfigError, match="known: kl, k1, abs"):
        compute_kl("k4", torch.zeros(1, 2), torch.zeros(1, 2))
    with pytest.raises(AlgoInputError, match=r"needs logits of shape \(B, T, V\)"):
        compute_kl("full", torch.zeros(1, 2), torch.zeros(1, 2))
    with pytest.raises(AlgoInputError, match=r"ref_log_probs has shape \(1, 3\)"):
        compute_kl("kl", torch.zeros(1, 2), torch.zeros(1, 3))


def test_adaptive_controller_follows_the_classic_rule():
    controller = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.05, horizon=100)
    controller.update(current_kl=0.06, n_steps=10)  # error = 0.2 (exactly the clip) -> x1.02
    assert controller.value == pytest.approx(0.102)
    controller.update(current_kl=1.0, n_steps=10)  # error clipped to 0.2
    assert controller.value == pytest.approx(0.102 * 1.02)
    controller.update(current_kl=0.0, n_steps=50)  # error -0.2 -> x0.9
    assert controller.value == pytest.approx(0.102 * 1.02 * 0.9)
    fixed = FixedKLController(0.3)
    fixed.update(current_kl=5.0, n_steps=100)
    assert fixed.value == 0.3
    with pytest.raises(AlgoInputError, match="horizon must be > 0"):
        AdaptiveKLController(0.1, 0.05, 0)


def test_apply_kl_penalty_subtracts_and_updates():
    scores = torch.tensor([[0.0, 1.0, float("nan")], [0.0, 0.0, 2.0]])
    old = torch.tensor([[-1.0, -1.0, 0.0], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.0, 0.0], [-2.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    controller = AdaptiveKLController(init_kl_coef=0.5, target_kl=1.0, horizon=10)
    rewards, metrics = apply_kl_penalty(scores, old, ref, mask, controller, kind="kl")
    torch.testing.assert_close(rewards, torch.tensor([[-0.25, 1.0, 0.0], [-0.5, 0.0, 2.0]]))
    expected_kl = (0.5 / 2 + 1.0 / 3) / 2  # mean over sequences of each sequence's token mean
    assert metrics == {"reward_kl_penalty": pytest.approx(expected_kl), "reward_kl_penalty_coeff": 0.5}
    error = max(expected_kl / 1.0 - 1, -0.2)
    assert controller.value == pytest.approx(0.5 * (1 + error * 2 / 10))


def test_kl_loss_uses_aggregation():
    log_probs = torch.tensor([[-1.0, -2.0], [-1.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -1.0], [-2.0, 5.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, metrics = compute_kl_loss(log_probs, ref, mask, kind="mse", loss_agg_mode="token-mean")
    assert loss.item() == pytest.approx((0 + 0.5 + 0.5) / 3)
    assert metrics["kl_loss"].item() == pytest.approx(loss.item())
    loss.backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([[0.0, -1 / 3], [1 / 3, 0.0]]))


def test_kl_config_validates_and_builds_its_controller():
    controller = kl_controller(KLConfig(enable=True, use_as="reward", adaptive=True, target=0.1, horizon=1000))
    assert isinstance(controller, AdaptiveKLController) and controller.target == 0.1
    assert isinstance(kl_controller(KLConfig(enable=True, use_as="reward", coef=0.2)), FixedKLController)
    with pytest.raises(ValueError, match="use_as"):
        KLConfig(enable=True, use_as="both")
    with pytest.raises(ValueError, match="target"):
        KLConfig(enable=True, use_as="reward", adaptive=True, target=0.0)
    with pytest.raises(ValueError, match="adaptive applies to use_as=reward only"):
        KLConfig(enable=True, use_as="loss", adaptive=True)
    with pytest.raises(ValueError, match="cannot be used as a reward penalty"):
        KLConfig(enable=True, use_as="reward", kind="full")
