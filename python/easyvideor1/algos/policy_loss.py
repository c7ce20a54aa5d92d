r"""Policy-gradient losses (to minimise) and their clip statistics.

Notation: :math:`\rho_{i,t} = \exp(\log\pi_\theta - \log\pi_{old})` the token ratio,
:math:`A_{i,t}` the advantage, :math:`\epsilon_l, \epsilon_h` = ``clip_ratio_low/high``,
:math:`c` = ``clip_ratio_dual``, sg = stop-gradient. Each loss yields a per-token matrix
:math:`\ell_{i,t}` that :func:`~easyvideor1.algos.aggregation.aggregate_loss` reduces.

Metrics (0-dim detached tensors, masked token means):

* ``pg_clipfrac``: tokens where the :math:`\epsilon` clip is active, i.e. the clipped surrogate is
  the larger loss (ratio above :math:`1+\epsilon_h` with A > 0, or below :math:`1-\epsilon_l` with
  A < 0). For CISPO: tokens whose IS weight was clipped.
* ``pg_clipfrac_lower``: tokens where the dual clip bounds the loss (A < 0 and
  :math:`\rho > c`); always 0 for the GSPO and CISPO losses, which have no dual clip.
* ``ppo_kl``: :math:`\mathrm{mean}(\log\pi_{old} - \log\pi_\theta)`, the k1 estimate of
  KL(old || new) over the batch.
* ``entropy``: masked mean of ``entropies`` when they are given.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._checks import AlgoInputError, check_float_tensor, check_mask, check_same_shape, choose, masked_mean
from ._checks import zero_masked as _zero_masked
from .aggregation import LOSS_AGG_MODES, Denominator, aggregate_loss

LOG_RATIO_LIMIT = 20.0  # token log-ratio clamp before exp (ppo, cispo), as veRL
SEQ_LOG_RATIO_MAX = 10.0  # upper clamp of GSPO's sequence log-ratio, as veRL

# (per-token loss, eps-clip active, dual-clip active, log pi_old - log pi) of one loss function
_LossParts = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def ppo_clip(old: torch.Tensor, new: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
             low: float, high: float, dual: float | None) -> _LossParts:
    r"""PPO clip with asymmetric bounds (DAPO clip-higher) and dual clip for negative advantages:

    .. math:: \ell^{clip} = \max(-A\rho,\; -A\,\mathrm{clip}(\rho, 1-\epsilon_l, 1+\epsilon_h)),\qquad
              \ell = \begin{cases} \min(\ell^{clip}, -cA) & A < 0 \\ \ell^{clip} & A \ge 0\end{cases}

    :math:`\log\rho` is clamped to [-20, 20] before exp. ``dual=None`` disables the dual clip.
    """
    log_ratio = torch.clamp(new - old, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    clip_loss = torch.maximum(unclipped, clipped)
    clip_active = clipped > unclipped
    if dual is None:
        return clip_loss, clip_active, torch.zeros_like(clip_active), -log_ratio
    dual_bound = -adv * dual
    negative = adv < 0
    loss = torch.where(negative, torch.minimum(clip_loss, dual_bound), clip_loss)
    return loss, clip_active, (clip_loss > dual_bound) & negative, -log_ratio


def _gspo_surrogate(seq_log_ratio: torch.Tensor, adv: torch.Tensor, low: float, high: float) -> _LossParts:
    ratio = torch.exp(torch.clamp(seq_log_ratio, max=SEQ_LOG_RATIO_MAX))
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    never = torch.zeros_like(adv, dtype=torch.bool)
    return torch.maximum(unclipped, clipped), clipped > unclipped, never, never


def _sequence_log_ratio(old: torch.Tensor, new: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    lengths = mask.sum(dim=-1, keepdim=True).clamp(min=1).to(new.dtype)
    return (new - old).sum(dim=-1, keepdim=True) / lengths  # inputs are already zero where masked


def gspo(old: torch.Tensor, new: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
         low: float, high: float, dual: float | None) -> _LossParts:
    r"""GSPO with the sequence-level ratio
    :math:`s_i = \exp\big(\frac{1}{|y_i|}\sum_t m_{i,t}(\log\pi_\theta - \log\pi_{old})\big)`
    (log clamped above at 10), gradient flowing through the masked mean:

    .. math:: \ell_{i,t} = \max(-A_{i,t}\, s_i,\; -A_{i,t}\,\mathrm{clip}(s_i, 1-\epsilon_l, 1+\epsilon_h))

    :math:`\nabla s_i = s_i \frac{1}{|y_i|}\sum_t \nabla\log\pi_{i,t}`. With sequence-level
    advantages (every outcome estimator) value *and* gradient equal those of the token-level
    stop-gradient form :func:`gspo_token` under every aggregation mode; with per-token advantages
    the credit is spread evenly over the sequence.
    """
    seq_log_ratio = _sequence_log_ratio(old, new, mask)
    loss, clip_active, lower, _ = _gspo_surrogate(seq_log_ratio, adv, low, high)
    return loss, clip_active, lower, old - new


def gspo_token(old: torch.Tensor, new: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
               low: float, high: float, dual: float | None) -> _LossParts:
    r"""GSPO-token: :math:`s_{i,t} = \mathrm{sg}(s_i)\,\pi_\theta(y_{i,t})/\mathrm{sg}(\pi_\theta(y_{i,t}))`,
    i.e. :math:`\log s_{i,t} = \mathrm{sg}(\log s_i) + \log\pi - \mathrm{sg}(\log\pi)`; value
    :math:`s_i`, gradient :math:`s_i \nabla\log\pi_{i,t}` per token, so token-level advantages
    apply. Same surrogate and clamp as :func:`gspo`; this is veRL's ``gspo`` loss."""
    seq_log_ratio = _sequence_log_ratio(old, new, mask).detach()
    token_log_ratio = new - new.detach() + seq_log_ratio
    loss, clip_active, lower, _ = _gspo_surrogate(token_log_ratio, adv, low, high)
    return loss, clip_active, lower, old - new


def cispo(old: torch.Tensor, new: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
          low: float, high: float, dual: float | None) -> _LossParts:
    r"""CISPO (MiniMax-M1): :math:`\ell = -A\,\mathrm{sg}(\mathrm{clip}(\rho, 1-\epsilon_l, 1+\epsilon_h))\,\log\pi_\theta`.

    Gradient :math:`-A\,\mathrm{clip}(\rho)\,\nabla\log\pi_\theta`: no token is dropped by the
    clip, and no gradient flows through the ratio. :math:`\log\rho` clamped to [-20, 20].
    """
    log_ratio = torch.clamp(new - old, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    weight = torch.clamp(ratio, 1.0 - low, 1.0 + high)
    loss = -adv * weight.detach() * new
    return loss, weight != ratio, torch.zeros_like(mask), -log_ratio


_LOSSES: dict[str, Callable[..., _LossParts]] = {
    "ppo": ppo_clip,
    "gspo": gspo,
    "gspo_token": gspo_token,
    "cispo": cispo,
}
POLICY_LOSSES: tuple[str, ...] = tuple(_LOSSES)
# How a mix-policy group's offline response is trained (algorithm.mix_policy.offline_loss).
OFFLINE_LOSSES: tuple[str, ...] = ("policy", "weighted_nll")


def _offline_rows(offline: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """``offline`` (B,) 0/1 or bool as a (B, 1) bool tensor on ``like``'s device, checked."""
    if offline is None:
        return None
    if not isinstance(offline, torch.Tensor) or offline.dim() != 1 or offline.shape[0] != like.shape[0]:
        shape = tuple(offline.shape) if isinstance(offline, torch.Tensor) else type(offline).__name__
        raise AlgoInputError(f"offline must be a ({like.shape[0]},) tensor, one flag per row, got {shape}")
    return offline.to(device=like.device, dtype=torch.bool).unsqueeze(-1)


def _check_clip(low: float, high: float, dual: float | None) -> None:
    for label, value in (("clip_ratio_low", low), ("clip_ratio_high", high)):
        if not (isinstance(value, (int, float)) and 0.0 <= value < float("inf")):
            raise AlgoInputError(f"{label} must be a finite number >= 0, got {value!r}")
    if dual is not None and not (isinstance(dual, (int, float)) and dual > 1.0):
        raise AlgoInputError(f"clip_ratio_dual must be > 1 (or None to disable), got {dual!r}")


def policy_loss_per_token(
    name: str,
    old_log_probs: torch.Tensor,
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.28,
    clip_ratio_dual: float | None = 3.0,
    entropies: torch.Tensor | None = None,
    offline: torch.Tensor | None = None,
    offline_loss: str = "policy",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss matrix (B, T), zero where masked, and the metrics; see compute_policy_loss."""
    loss_fn = _LOSSES[choose("policy loss", name, _LOSSES)]
    choose("offline loss", offline_loss, OFFLINE_LOSSES)
    new = check_float_tensor("log_probs", log_probs, ndim=2)
    check_float_tensor("old_log_probs", old_log_probs, ndim=2)
    check_float_tensor("advantages", advantages, ndim=2)
    check_same_shape("log_probs", new, old_log_probs=old_log_probs, advantages=advantages)
    if entropies is not None:
        check_float_tensor("entropies", entropies, ndim=2)
        check_same_shape("log_probs", new, entropies=entropies)
    mask = check_mask(response_mask, new.shape)
    _check_clip(clip_ratio_low, clip_ratio_high, clip_ratio_dual)

    # The old policy and the advantages are constants of the objective.
    old = _zero_masked(old_log_probs.detach(), mask)
    adv = _zero_masked(advantages.detach(), mask)
    loss, clip_active, dual_active, neg_log_ratio = loss_fn(
        old, _zero_masked(new, mask), adv, mask, clip_ratio_low, clip_ratio_high, clip_ratio_dual
    )
    rows = _offline_rows(offline, new)
    if rows is not None and offline_loss == "weighted_nll":
        # An offline row's tokens: -A log pi, no ratio, so no clip is ever active there.
        loss = torch.where(rows, -adv * _zero_masked(new, mask), loss)
        clip_active = clip_active & ~rows
        dual_active = dual_active & ~rows
    as_float = new.dtype
    metrics = {
        "pg_clipfrac": masked_mean(clip_active.to(as_float), mask).detach(),
        "pg_clipfrac_lower": masked_mean(dual_active.to(as_float), mask).detach(),
        "ppo_kl": masked_mean(neg_log_ratio.detach(), mask),
    }
    if entropies is not None:
        metrics["entropy"] = masked_mean(entropies.detach(), mask)
    return _zero_masked(loss, mask), metrics


def compute_policy_loss(
    name: str,
    old_log_probs: torch.Tensor,
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "token-mean",
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.28,
    clip_ratio_dual: float | None = 3.0,
    entropies: torch.Tensor | None = None,
    global_tokens: Denominator | None = None,
    global_seqs: Denominator | None = None,
    loss_scale_factor: Denominator | None = None,
    dp_size: int = 1,
    offline: torch.Tensor | None = None,
    offline_loss: str = "policy",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Scalar policy loss and metrics (``pg_clipfrac``, ``pg_clipfrac_lower``, ``ppo_kl``, ``entropy``).

    Args:
        name: one of :data:`POLICY_LOSSES` (``ppo``, ``gspo``, ``gspo_token``, ``cispo``).
        old_log_probs, log_probs, advantages: (B, T); gradient flows only into ``log_probs``.
        response_mask: (B, T) 0/1; masked positions of every input may hold junk.
        loss_agg_mode: one of LOSS_AGG_MODES, honoured by every loss (GSPO included, as veRL 0.9;
            the GSPO paper uses ``seq-mean-token-mean``: set it in the config).
        clip_ratio_low / clip_ratio_high: ratio bounds 1 - low and 1 + high.
        clip_ratio_dual: dual-clip constant c > 1 (``ppo`` only); None disables it.
        entropies: optional (B, T) token entropies, reported as the ``entropy`` metric.
        global_tokens, global_seqs, loss_scale_factor, dp_size: passed to ``aggregate_loss``.
        offline: optional (B,) flags of the mix-policy offline rows; with ``offline_loss`` =
            ``weighted_nll`` their per-token loss is -A log pi (no ratio, no clip),
            with ``policy`` (default) they take the policy loss like every other row.
    """
    choose("loss aggregation mode", loss_agg_mode, LOSS_AGG_MODES)
    per_token, metrics = policy_loss_per_token(
        name, old_log_probs, log_probs, advantages, response_mask,
        clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high,
        clip_ratio_dual=clip_ratio_dual, entropies=entropies, offline=offline, offline_loss=offline_loss,
    )
    loss = aggregate_loss(
        per_token, response_mask, loss_agg_mode, global_tokens=global_tokens, global_seqs=global_seqs,
        loss_scale_factor=loss_scale_factor, dp_size=dp_size,
    )
    return loss, metrics
