"""Policy losses: hand-computed values, clip metrics, stop-gradient rules, junk under the mask."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from easyvideor1.algos import (
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    AlgoInputError,
    compute_policy_loss,
    policy_loss_per_token,
)
from easyvideor1.errors import ConfigError

FAST = settings(max_examples=50, deadline=None)


def leaf(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype).requires_grad_(True)


def test_ppo_clip_higher_and_dual_clip_by_hand():
    ratios = [1.5, 0.5, 4.0, 1.1]
    advantages = torch.tensor([[1.0, -1.0, -1.0, 2.0]], dtype=torch.float64)
    new = leaf([[math.log(r) for r in ratios]])
    old = torch.zeros(1, 4, dtype=torch.float64)
    mask = torch.ones(1, 4)
    loss, metrics = compute_policy_loss("ppo", old, new, advantages, mask)
    # token losses: clipped at 1.28 -> -1.28; clipped at 0.8 -> 0.8; dual clip bounds 4.0 to 3.0; -2.2
    assert loss.item() == pytest.approx((-1.28 + 0.8 + 3.0 - 2.2) / 4)
    assert metrics["pg_clipfrac"].item() == pytest.approx(0.5)
    assert metrics["pg_clipfrac_lower"].item() == pytest.approx(0.25)
    assert metrics["ppo_kl"].item() == pytest.approx(-sum(math.log(r) for r in ratios) / 4)
    loss.backward()
    # gradient only where neither clip is active: d(-A rho)/dlog pi = -A rho
    torch.testing.assert_close(new.grad, torch.tensor([[0.0, 0.0, 0.0, -2.0 * 1.1 / 4]], dtype=torch.float64))


def test_ppo_dual_clip_can_be_disabled():
    new = leaf([[math.log(4.0)]])
    loss, metrics = compute_policy_loss(
        "ppo", torch.zeros(1, 1, dtype=torch.float64), new, -torch.ones(1, 1, dtype=torch.float64),
        torch.ones(1, 1), clip_ratio_dual=None,
    )
    assert loss.item() == pytest.approx(4.0)
    assert metrics["pg_clipfrac_lower"].item() == 0.0


def test_gspo_sequence_ratio_is_geometric_mean():
    new = leaf([[math.log(1.21), 0.0, 123.0]])  # third token masked
    old = torch.zeros(1, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    adv = torch.ones(1, 3, dtype=torch.float64)
    for name in ("gspo", "gspo_token"):
        loss, metrics = compute_policy_loss(name, old, new, adv, mask, loss_agg_mode="seq-mean-token-mean")
        assert loss.item() == pytest.approx(-1.1)  # s = sqrt(1.21)
        assert metrics["pg_clipfrac"].item() == 0.0
        narrow, metrics = compute_policy_loss(
            name, old, new, adv, mask, loss_agg_mode="seq-mean-token-mean", clip_ratio_high=0.05
        )
        assert narrow.item() == pytest.approx(-1.05)
        assert metrics["pg_clipfrac"].item() == 1.0
        assert metrics["pg_clipfrac_lower"].item() == 0.0


def test_gspo_token_gradient_is_sg_ratio_times_token_advantage():
    new = leaf([[0.3, -0.1, 0.2]])
    old = torch.tensor([[0.1, 0.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
    loss, _ = compute_policy_loss("gspo_token", old, new, adv, torch.ones(1, 3), clip_ratio_low=1.0,
                                  clip_ratio_high=10.0)
    loss.backward()
    seq_ratio = math.exp((0.2 - 0.1 + 0.2) / 3)
    torch.testing.assert_close(new.grad, -adv * seq_ratio / 3)


def test_gspo_sequence_gradient_flows_through_the_mean():
    new = leaf([[0.3, -0.1, 0.2]])
    old = torch.tensor([[0.1, 0.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
    loss, _ = compute_policy_loss("gspo", old, new, adv, torch.ones(1, 3), clip_ratio_low=1.0, clip_ratio_high=10.0)
    loss.backward()
    seq_ratio = math.exp((0.2 - 0.1 + 0.2) / 3)
    # loss = mean_t(-A_t s); ds/dlogpi_u = s/3 -> every token gets -(mean A) s / 3
    expected = torch.full((1, 3), -adv.mean().item() * seq_ratio / 3, dtype=torch.float64)
    torch.testing.assert_close(new.grad, expected)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_gspo_forms_agree_for_sequence_level_advantages(mode):
    generator = torch.Generator().manual_seed(3)
    old = torch.randn(4, 5, generator=generator, dtype=torch.float64) * 0.1
    start = old + torch.randn(4, 5, generator=generator, dtype=torch.float64) * 0.1
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]])
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5], dtype=torch.float64)[:, None].expand(4, 5)
    results = []
    for name in ("gspo", "gspo_token"):
        new = start.clone().requires_grad_(True)
        loss, metrics = compute_policy_loss(name, old, new, adv, mask, loss_agg_mode=mode, clip_ratio_high=0.05)
        loss.backward()
        results.append((loss.detach(), new.grad, metrics["pg_clipfrac"]))
    for first, second in zip(*results):
        torch.testing.assert_close(first, second)


def test_cispo_gradient_keeps_clipped_tokens_without_ratio_gradient():
    ratios = [2.0, 0.5, 1.1]
    new = leaf([[math.log(r) for r in ratios]])
    old = torch.zeros(1, 3, dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0, 0.5]], dtype=torch.float64)
    loss, metrics = compute_policy_loss("cispo", old, new, adv, torch.ones(1, 3))
    weights = torch.tensor([[1.28, 0.8, 1.1]], dtype=torch.float64)
    assert loss.item() == pytest.approx((-adv * weights * new.detach()).mean().item())
    loss.backward()
    torch.testing.assert_close(new.grad, -adv * weights / 3)
    assert metrics["pg_clipfrac"].item() == pytest.approx(2 / 3)
    assert metrics["pg_clipfrac_lower"].item() == 0.0


def test_gradient_reaches_only_log_probs():
    old = leaf([[0.1, 0.2]])
    adv = leaf([[1.0, -1.0]])
    new = leaf([[0.0, 0.3]])
    for name in POLICY_LOSSES:
        loss, _ = compute_policy_loss(name, old, new, adv, torch.ones(1, 2))
        loss.backward()
        assert old.grad is None and adv.grad is None
        assert new.grad is not None
        new.grad = None


def test_entropy_metric_and_float32_dtype():
    new = torch.zeros(2, 2, requires_grad=True)
    entropies = torch.tensor([[1.0, 3.0], [5.0, float("nan")]])
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, metrics = compute_policy_loss("ppo", torch.zeros(2, 2), new, torch.ones(2, 2), mask, entropies=entropies)
    assert loss.dtype == torch.float32
    assert metrics["entropy"].item() == pytest.approx(3.0)
    assert set(metrics) == {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl", "entropy"}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"name": "vanilla"}, ConfigError, "known: ppo, gspo, gspo_token, cispo"),
        ({"loss_agg_mode": "sum"}, ConfigError, "known: token-mean"),
        ({"clip_ratio_dual": 0.9}, AlgoInputError, "clip_ratio_dual must be > 1"),
        ({"clip_ratio_low": -0.1}, AlgoInputError, "clip_ratio_low"),
        ({"advantages": torch.zeros(2, 3)}, AlgoInputError, r"advantages has shape \(2, 3\)"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    call = {"name": "ppo", "advantages": torch.zeros(2, 2)} | kwargs
    name, adv = call.pop("name"), call.pop("advantages")
    with pytest.raises(error, match=message):
        compute_policy_loss(name, torch.zeros(2, 2), torch.zeros(2, 2), adv, torch.ones(2, 2), **call)


@st.composite
def loss_inputs(draw):
    size, length = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    count = size * length
    floats = st.floats(-2, 2, allow_nan=False)
    old = torch.tensor(draw(st.lists(floats, min_size=count, max_size=count)), dtype=torch.float64)
    delta = torch.tensor(draw(st.lists(floats, min_size=count, max_size=count)), dtype=torch.float64)
    adv = torch.tensor(draw(st.lists(floats, min_size=count, max_size=count)), dtype=torch.float64)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=count, max_size=count)))
    shape = (size, length)
    return old.view(shape) - 1.0, (old - 1.0 + 0.3 * delta).view(shape), adv.view(shape), mask.view(shape)


@FAST
@given(loss_inputs(), st.sampled_from(POLICY_LOSSES), st.sampled_from(LOSS_AGG_MODES))
def test_junk_under_the_mask_never_leaks(inputs, name, mode):
    old, new, adv, mask = inputs
    junk = torch.full_like(new, float("nan"))
    results = []
    for filler in (torch.zeros_like(new), junk):
        leaf_new = torch.where(mask, new, filler).requires_grad_(True)
        per_token, metrics = policy_loss_per_token(
            name, torch.where(mask, old, filler), leaf_new, torch.where(mask, adv, filler), mask
        )
        loss, _ = compute_policy_loss(
            name, torch.where(mask, old, filler), leaf_new, torch.where(mask, adv, filler), mask, loss_agg_mode=mode
        )
        loss.backward()
        results.append((loss.detach(), per_token.detach(), leaf_new.grad, *metrics.values()))
        assert torch.isfinite(leaf_new.grad).all() and (leaf_new.grad[~mask] == 0).all()
        assert (per_token[~mask] == 0).all()
    for clean, dirty in zip(*results):
        torch.testing.assert_close(dirty, clean)


@pytest.mark.parametrize("name", POLICY_LOSSES)
def test_weighted_nll_trains_offline_rows_without_ratio_or_clip(name):
    """Row 0 online, row 1 offline, both with ratios far outside the clip: under weighted_nll the
    offline row's loss is -A log pi and its gradient -A per token (what supervised learning
    weighted by the advantage gives), while the online row keeps the policy loss."""
    new = leaf([[math.log(3.0), math.log(0.2)], [math.log(3.0), math.log(0.2)]])
    old = torch.zeros(2, 2, dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0], [2.0, 2.0]], dtype=torch.float64)
    mask = torch.ones(2, 2)
    offline = torch.tensor([False, True])
    plain, _ = policy_loss_per_token(name, old, new, adv, mask)
    per_token, metrics = policy_loss_per_token(name, old, new, adv, mask, offline=offline, offline_loss="weighted_nll")
    torch.testing.assert_close(per_token[0], plain[0])
    torch.testing.assert_close(per_token[1], -adv[1] * new[1])
    per_token[1].sum().backward()
    torch.testing.assert_close(new.grad[1], -adv[1])
    # The offline row's tokens never count as clipped.
    _, online_only = policy_loss_per_token(name, old[:1], new[:1], adv[:1], mask[:1])
    assert metrics["pg_clipfrac"].item() == pytest.approx(online_only["pg_clipfrac"].item() / 2)


def test_policy_offline_loss_leaves_offline_rows_as_they_were():
    new = leaf([[math.log(3.0), 0.1]])
    args = (torch.zeros(1, 2, dtype=torch.float64), new, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2))
    loss, _ = compute_policy_loss("ppo", *args, offline=torch.tensor([True]), offline_loss="policy")
    assert loss.item() == compute_policy_loss("ppo", *args)[0].item()
    weighted, _ = compute_policy_loss("ppo", *args, offline=torch.tensor([True]), offline_loss="weighted_nll")
    assert weighted.item() == pytest.approx(-(math.log(3.0) + 0.1) / 2)


def test_offline_flags_and_mode_are_checked():
    args = (torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(AlgoInputError, match=r"offline must be a \(2,\) tensor"):
        compute_policy_loss("ppo", *args, offline=torch.tensor([True]), offline_loss="weighted_nll")
    with pytest.raises(ConfigError, match="unknown offline loss 'sft'"):
        compute_policy_loss("ppo", *args, offline_loss="sft")


def test_offline_losses_are_the_configs_choices():
    import typing

    from easyvideor1.algos import OFFLINE_LOSSES
    from easyvideor1.config.schema import MixPolicyConfig

    annotation = MixPolicyConfig.model_fields["offline_loss"].annotation
    assert typing.get_args(annotation) == OFFLINE_LOSSES
    assert MixPolicyConfig().offline_loss == "policy"


def test_config_offers_exactly_the_names_the_algorithms_take():
    """The config's choices are Literals (pure algos/ cannot import config/): they must name what
    algos/ implements, no more and no less, or a valid config would fail at the first step."""
    from typing import get_args

    from easyvideor1.algos import ADVANTAGE_ESTIMATORS, OFFLINE_LOSSES
    from easyvideor1.config.schema import AlgorithmConfig, MixPolicyConfig

    def choices(section, field):
        return set(get_args(section.model_fields[field].annotation))

    assert choices(AlgorithmConfig, "policy_loss") == set(POLICY_LOSSES)
    assert choices(AlgorithmConfig, "loss_agg_mode") == set(LOSS_AGG_MODES)
    assert choices(AlgorithmConfig, "adv_estimator") == set(ADVANTAGE_ESTIMATORS)
    assert choices(MixPolicyConfig, "offline_loss") == set(OFFLINE_LOSSES)
