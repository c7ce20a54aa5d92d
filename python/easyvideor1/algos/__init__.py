"""RL algorithm core: advantages, policy losses, KL, loss aggregation, filters. Pure torch.

Conventions (masks, eps, argument order, clip fractions, differences from veRL/TRL) are in
docs/algorithms.md.
"""

from ._checks import AlgoInputError
from .advantages import ADVANTAGE_ESTIMATORS, compute_advantage, discounted_returns
from .aggregation import LOSS_AGG_MODES, aggregate_loss, loss_denominators
from .dynamic_sampling import (
    DynamicSamplingExhaustedError,
    DynamicSamplingResult,
    ScoredBatch,
    collect_informative_groups,
    informative_group_mask,
    overlong_penalty,
)
from .kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    compute_entropy_from_logits,
    compute_kl,
    compute_kl_loss,
    kl_controller,
    kl_full_from_logits,
)
from .mix_policy import (
    AssembledGroup,
    assemble_group,
    encode_offline_response,
    mix_policy_metrics,
    offline_loss_share,
    pad_responses,
    responses_to_generate,
)
from .policy_loss import OFFLINE_LOSSES, POLICY_LOSSES, compute_policy_loss, policy_loss_per_token

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "OFFLINE_LOSSES",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "AlgoInputError",
    "AssembledGroup",
    "DynamicSamplingExhaustedError",
    "DynamicSamplingResult",
    "FixedKLController",
    "kl_controller",
    "ScoredBatch",
    "aggregate_loss",
    "apply_kl_penalty",
    "assemble_group",
    "collect_informative_groups",
    "compute_advantage",
    "compute_entropy_from_logits",
    "compute_kl",
    "compute_kl_loss",
    "compute_policy_loss",
    "discounted_returns",
    "encode_offline_response",
    "informative_group_mask",
    "kl_full_from_logits",
    "loss_denominators",
    "mix_policy_metrics",
    "offline_loss_share",
    "overlong_penalty",
    "pad_responses",
    "policy_loss_per_token",
    "responses_to_generate",
]
