r"""KL estimators between the policy and a reference policy, KL controllers and the KL penalty.

Per-token estimators of :math:`\mathrm{KL}(\pi \| \pi_{ref})` from sampled-token log-probs,
with :math:`\delta = \log\pi - \log\pi_{ref}` (Schulman, "Approximating KL divergence"):

=================  ==============================================================
``kl`` / ``k1``    :math:`\delta`
``abs``            :math:`|\delta|`
``mse`` / ``k2``   :math:`\tfrac12 \delta^2`
``low_var_kl`` /   :math:`e^{-\delta'} + \delta' - 1`, :math:`\delta' = \mathrm{clamp}(\delta, -20, 20)`,
``k3``             result clamped to [-10, 10] (veRL's clamps)
``full``           :math:`\sum_v \pi(v)(\log\pi(v) - \log\pi_{ref}(v))` from full logits (B, T, V)
=================  ==============================================================

KL is used in exactly one of three ways, chosen by the run config's ``algorithm.kl``
(:class:`~easyvideor1.config.schema.KLConfig`): off (no reference policy is needed at all),
``use_as: reward`` (penalty subtracted from token rewards with a fixed or adaptive coefficient,
:func:`apply_kl_penalty`, which also updates the controller once per batch) or ``use_as: loss``
(a term added to the actor loss, :func:`compute_kl_loss`).
"""

from __future__ import annotations

import torch

from easyvideor1.config.schema import KLConfig

from ._checks import (
    AlgoInputError,
    check_float_tensor,
    check_mask,
    check_same_shape,
    choose,
    masked_mean,
    zero_masked,
)
from .aggregation import aggregate_loss

KL_ESTIMATORS: tuple[str, ...] = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")


def compute_entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    r"""Categorical entropy over the last axis: :math:`H = \log\sum_v e^{z_v} - \sum_v p_v z_v`."""
    check_float_tensor("logits", logits)
    probabilities = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probabilities * logits).sum(dim=-1)


def kl_full_from_logits(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    r"""Exact :math:`\mathrm{KL}(\pi\|\pi_{ref}) = \sum_v \pi(v)(\log\pi(v) - \log\pi_{ref}(v))`
    over the last (vocabulary) axis; (..., V) -> (...)."""
    check_float_tensor("logits", logits)
    check_float_tensor("ref_logits", ref_logits)
    check_same_shape("logits", logits, ref_logits=ref_logits)
    log_p = torch.log_softmax(logits, dim=-1)
    log_ref = torch.log_softmax(ref_logits, dim=-1)
    return (log_p.exp() * (log_p - log_ref)).sum(dim=-1)


def _sampled_token_kl(kind: str, log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    delta = log_probs - ref_log_probs
    if kind in ("kl", "k1"):
        return delta
    if kind == "abs":
        return delta.abs()
    if kind in ("mse", "k2"):
        return 0.5 * delta.square()
    reverse = torch.clamp(-delta, min=-20.0, max=20.0)  # log(pi_ref / pi), clamped before exp
    return torch.clamp(reverse.exp() - reverse - 1.0, min=-10.0, max=10.0)


def compute_kl(
    kind: str,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    *,
    response_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL estimate, (B, T).

    For ``full`` the two inputs are *logits* of shape (B, T, V) (policy first, reference second).
    With ``response_mask`` (B, T) the result is 0 at masked positions and junk there cannot leak
    into values or gradients.
    """
    choose("KL estimator", kind, KL_ESTIMATORS)
    check_float_tensor("log_probs", log_probs)
    check_float_tensor("ref_log_probs", ref_log_probs)
    check_same_shape("log_probs", log_probs, ref_log_probs=ref_log_probs)
    if kind == "full":
        if log_probs.dim() != 3:
            raise AlgoInputError(
                f"KL estimator 'full' needs logits of shape (B, T, V), got shape {tuple(log_probs.shape)}"
            )
        if response_mask is None:
            return kl_full_from_logits(log_probs, ref_log_probs)
        mask = check_mask(response_mask, log_probs.shape[:2])
        token_mask = mask.unsqueeze(-1)
        kld = kl_full_from_logits(zero_masked(log_probs, token_mask), zero_masked(ref_log_probs, token_mask))
        return zero_masked(kld, mask)
    if log_probs.dim() != 2:
        raise AlgoInputError(
            f"KL estimator {kind!r} needs per-token log-probs of shape (B, T), got {tuple(log_probs.shape)}"
        )
    if response_mask is None:
        return _sampled_token_kl(kind, log_probs, ref_log_probs)
    mask = check_mask(response_mask, log_probs.shape)
    kld = _sampled_token_kl(kind, zero_masked(log_probs, mask), zero_masked(ref_log_probs, mask))
    return zero_masked(kld, mask)


class FixedKLController:
    """Constant KL coefficient ``value``."""

    def __init__(self, kl_coef: float):
        if not kl_coef >= 0:
            raise AlgoInputError(f"kl_coef must be >= 0, got {kl_coef}")
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt: the coefficient stays fixed."""


class AdaptiveKLController:
    r"""Adaptive coefficient of Ziegler et al. (2019):

    .. math:: e = \mathrm{clip}(\mathrm{KL}/\mathrm{target} - 1, -0.2, 0.2),\qquad
              \beta \leftarrow \beta\,(1 + e \cdot n_{steps} / \mathrm{horizon})
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if not init_kl_coef >= 0:
            raise AlgoInputError(f"init_kl_coef must be >= 0, got {init_kl_coef}")
        if not target_kl > 0:
            raise AlgoInputError(f"target_kl must be > 0, got {target_kl}")
        if not horizon > 0:
            raise AlgoInputError(f"horizon must be > 0, got {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


KLController = FixedKLController | AdaptiveKLController


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: KLController,
    kind: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    r"""KL as a reward penalty: :math:`R_{i,t} = m_{i,t}(S_{i,t} - \beta\,\mathrm{kl}_{i,t})`.

    :math:`\beta` is ``kl_ctrl.value`` *before* this call; then the controller is updated with the
    batch KL (mean over sequences of each sequence's masked token mean) and ``n_steps`` = B, as veRL
    does. Returns (token_level_rewards, {"reward_kl_penalty", "reward_kl_penalty_coeff"}).
    """
    if kind == "full":
        raise AlgoInputError("KL estimator 'full' needs logits; use a per-token estimator for the reward penalty")
    scores = check_float_tensor("token_level_scores", token_level_scores, ndim=2)
    check_same_shape("token_level_scores", scores, old_log_probs=old_log_probs, ref_log_probs=ref_log_probs)
    mask = check_mask(response_mask, scores.shape)
    with torch.no_grad():
        kld = compute_kl(kind, old_log_probs.detach(), ref_log_probs.detach(), response_mask=mask)
        beta = kl_ctrl.value
        rewards = zero_masked(zero_masked(scores.detach(), mask) - beta * kld, mask)
        current_kl = float(masked_mean(kld, mask, dim=-1).mean())
    kl_ctrl.update(current_kl=current_kl, n_steps=scores.shape[0])
    return rewards, {"reward_kl_penalty": current_kl, "reward_kl_penalty_coeff": beta}


def compute_kl_loss(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    kind: str = "low_var_kl",
    loss_agg_mode: str = "token-mean",
    **aggregation: object,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL as a loss term: ``aggregate_loss(compute_kl(kind, ...), mask, loss_agg_mode)``.

    The caller multiplies by its coefficient. ``aggregation`` passes ``global_tokens``,
    ``global_seqs``, ``loss_scale_factor`` and ``dp_size`` on to :func:`aggregate_loss`.
    """
    kld = compute_kl(kind, log_probs, ref_log_probs, response_mask=response_mask)
    loss = aggregate_loss(kld, response_mask, loss_agg_mode, **aggregation)
    return loss, {"kl_loss": loss.detach()}


def kl_controller(kl: KLConfig) -> KLController:
    """The coefficient controller of ``algorithm.kl``: adaptive (reward penalty only) or fixed."""
    if kl.adaptive:
        return AdaptiveKLController(kl.coef, kl.target, kl.horizon)
    return FixedKLController(kl.coef)
