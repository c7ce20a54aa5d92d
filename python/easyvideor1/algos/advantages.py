r"""Advantage estimators over outcome rewards.

Notation: sample :math:`i` belongs to the group :math:`G(i)` of samples sharing its uid;
:math:`n = |G(i)|`; :math:`m_{i,t}` is the response mask; the outcome reward is
:math:`r_i = \sum_t m_{i,t}\,R_{i,t}` (token-level rewards summed under the mask). A scalar
advantage :math:`A_i` is broadcast to every response token: :math:`A_{i,t} = m_{i,t} A_i`.

Every group-relative estimator (``grpo``, ``dr_grpo``, ``grpo_passk``, ``rloo``,
``reinforce_plus_plus_baseline``, ``gdpo``) gives exactly 0 to a *degenerate* group (one member,
or all members with the same reward): such a group carries no ranking signal. veRL instead gives a
one-member group mean 0 / std 1 (so its raw reward leaks through as an advantage); see
docs/algorithms.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from ._checks import (
    AlgoInputError,
    check_float_tensor,
    check_mask,
    check_vector,
    choose,
    masked_whiten,
    uid_list,
    zero_masked,
)
from ._groups import GroupIndex


@dataclass(frozen=True)
class _Batch:
    rewards: torch.Tensor  # (B, T), zero where masked
    mask: torch.Tensor  # (B, T) bool
    scores: torch.Tensor  # (B,) outcome rewards
    uids: object
    eps: float
    gamma: float
    reward_baselines: object
    components: Mapping[str, object] | None
    component_weights: Mapping[str, float] | None

    def groups(self, estimator: str) -> GroupIndex:
        if self.uids is None:
            raise AlgoInputError(f"advantage estimator {estimator!r} groups samples by uid: uids are required")
        return GroupIndex.from_uids(self.uids, self.scores.shape[0], self.scores.device)

    def broadcast(self, per_sample: torch.Tensor) -> torch.Tensor:
        return zero_masked(per_sample.unsqueeze(-1).expand_as(self.rewards), self.mask)


def _zero_where(condition: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return torch.where(condition, torch.zeros_like(values), values)


def _group_normalised(values: torch.Tensor, groups: GroupIndex, eps: float) -> torch.Tensor:
    r""":math:`(x_i - \mathrm{mean}_{G(i)} x) / (\mathrm{std}_{G(i)} x + \epsilon)`, 0 for degenerate groups."""
    normalised = (values - groups.mean(values)) / (groups.std(values) + eps)
    return _zero_where(groups.degenerate(values), normalised)


def grpo(batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    r"""GRPO: :math:`A_i = (r_i - \mathrm{mean}_{G(i)} r) / (\mathrm{std}_{G(i)} r + \epsilon)`.

    std is the unbiased (n-1) sample std, :math:`\epsilon` = ``eps`` (default 1e-6).
    Returns (advantages, advantages).
    """
    advantages = batch.broadcast(_group_normalised(batch.scores, batch.groups("grpo"), batch.eps))
    return advantages, advantages


def dr_grpo(batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Dr.GRPO: :math:`A_i = r_i - \mathrm{mean}_{G(i)} r` (no std division)."""
    groups = batch.groups("dr_grpo")
    centred = _zero_where(groups.degenerate(batch.scores), batch.scores - groups.mean(batch.scores))
    advantages = batch.broadcast(centred)
    return advantages, advantages


def grpo_passk(batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Pass@k GRPO (veRL's definition): only the best response of a group is credited.

    :math:`A_{i^*} = (r_{(1)} - r_{(2)}) / (\mathrm{std}_{G} r + \epsilon)` for the arg-max
    :math:`i^*` (first in batch order on ties, where the advantage is 0 anyway), :math:`r_{(1)}`
    and :math:`r_{(2)}` the largest and second largest rewards of the group; every other member
    gets 0. One-member groups get 0 (veRL raises).
    """
    groups = batch.groups("grpo_passk")
    std = groups.std(batch.scores)
    per_sample = torch.zeros_like(batch.scores)
    for members in groups.members:
        if len(members) < 2:
            continue
        index = torch.tensor(members, device=batch.scores.device)
        rewards = batch.scores[index]
        top = torch.topk(rewards, 2).values
        if top[0] > top[1]:  # a tie for the best credits nobody (and keeps eps=0 from dividing 0 by 0)
            best = index[int(torch.argmax(rewards))]
            per_sample[best] = (top[0] - top[1]) / (std[best] + batch.eps)
    advantages = batch.broadcast(per_sample)
    return advantages, advantages


def rloo(batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    r"""RLOO: :math:`A_i = r_i - \frac{1}{n-1}\sum_{j \in G(i), j \ne i} r_j
    = \frac{n}{n-1}(r_i - \mathrm{mean}_{G(i)} r)` (veRL's scaled form; same value)."""
    groups = batch.groups("rloo")
    sizes = groups.sizes(batch.scores)
    leave_one_out = (batch.scores - groups.mean(batch.scores)) * sizes / (sizes - 1).clamp(min=1)
    advantages = batch.broadcast(_zero_where(groups.degenerate(batch.scores), leave_one_out))
    return advantages, advantages


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    r"""Return-to-go :math:`G_{i,t} = R_{i,t} + \gamma\, m_{i,t+1} G_{i,t+1}`, zero where masked.

    The running return is reset after every masked position (after EOS), as in veRL. ``rewards``
    must already be zero at masked positions.
    """
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
        running = zero_masked(running, mask[:, t])
    return zero_masked(returns, mask)


def reinforce_plus_plus(batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    r"""REINFORCE++: :math:`A = \mathrm{whiten}_{batch}(G)` over all unmasked tokens, where
    :math:`G` is :func:`discounted_returns` with ``gamma``. Not group-relative: uids are unused.
    Returns (advantages, returns)."""
    returns = discounted_returns(batch.rewards, batch.mask, batch.gamma)
    return masked_whiten(returns, batch.mask), returns


def reinforce_plus_plus_baseline(batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    r"""REINFORCE++ with group baseline: :math:`A = \mathrm{whiten}_{batch}(m_{i,t}(r_i -
    \mathrm{mean}_{G(i)} r))` — token-level masked whitening over the batch; degenerate groups are
    set to 0 *after* whitening (they enter the statistics with value 0, as in veRL)."""
    groups = batch.groups("reinforce_plus_plus_baseline")
    degenerate = groups.degenerate(batch.scores)
    centred = _zero_where(degenerate, batch.scores - groups.mean(batch.scores))
    whitened = masked_whiten(batch.broadcast(centred), batch.mask)
    advantages = _zero_where(degenerate.unsqueeze(-1), whitened)
    return advantages, advantages


def remax(batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    r"""ReMax: :math:`A_{i,t} = m_{i,t}(\sum_{u \ge t} m_{i,u} R_{i,u} - b_i)` with :math:`b_i` the
    reward of a greedy rollout of the same prompt (``reward_baselines``). The return is the
    undiscounted reward-to-go (``gamma`` unused, as in veRL). Returns (advantages, returns)."""
    if batch.reward_baselines is None:
        raise AlgoInputError("advantage estimator 'remax' needs reward_baselines: (B,) greedy-rollout rewards")
    baselines = check_vector("reward_baselines", batch.reward_baselines, batch.scores.shape[0], batch.scores)
    returns = batch.rewards.flip(-1).cumsum(-1).flip(-1)
    advantages = zero_masked(returns - baselines.unsqueeze(-1), batch.mask)
    return advantages, zero_masked(returns, batch.mask)


def gdpo(batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    r"""GDPO: each reward component is group-normalised on its own, then summed with weights,
    then whitened over the batch (token level, as veRL):

    .. math:: A = \mathrm{whiten}_{batch}\Big(m_{i,t} \sum_k w_k
              \frac{c_{k,i} - \mathrm{mean}_{G(i)} c_k}{\mathrm{std}_{G(i)} c_k + \epsilon}\Big)

    ``components`` maps a name to a (B,) reward component, ``component_weights`` a name to
    :math:`w_k` (default 1). A group degenerate in *every* component gets 0 after whitening.
    """
    if not batch.components:
        raise AlgoInputError(
            "advantage estimator 'gdpo' needs components: a mapping like {'accuracy': (B,), 'format': (B,)}"
        )
    weights = dict(batch.component_weights or {})
    unknown = sorted(set(weights) - set(batch.components))
    if unknown:
        raise AlgoInputError(
            f"component_weights names unknown component(s) {unknown}; components are {sorted(batch.components)}"
        )
    groups = batch.groups("gdpo")
    size = batch.scores.shape[0]
    total = torch.zeros_like(batch.scores)
    degenerate_everywhere = torch.ones_like(batch.scores, dtype=torch.bool)
    for name, values in batch.components.items():
        component = check_vector(f"components[{name!r}]", values, size, batch.scores)
        total = total + float(weights.get(name, 1.0)) * _group_normalised(component, groups, batch.eps)
        degenerate_everywhere &= groups.degenerate(component)
    whitened = masked_whiten(batch.broadcast(total), batch.mask)
    advantages = _zero_where(degenerate_everywhere.unsqueeze(-1), whitened)
    return advantages, advantages


_ESTIMATORS: dict[str, Callable[[_Batch], tuple[torch.Tensor, torch.Tensor]]] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "grpo_passk": grpo_passk,
    "rloo": rloo,
    "reinforce_plus_plus": reinforce_plus_plus,
    "reinforce_plus_plus_baseline": reinforce_plus_plus_baseline,
    "remax": remax,
    "gdpo": gdpo,
}
ADVANTAGE_ESTIMATORS: tuple[str, ...] = tuple(_ESTIMATORS)


def compute_advantage(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    uids: Sequence[object] | None,
    *,
    eps: float = 1e-6,
    gamma: float = 1.0,
    reward_baselines: torch.Tensor | Sequence[float] | None = None,
    components: Mapping[str, torch.Tensor | Sequence[float]] | None = None,
    component_weights: Mapping[str, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Compute ``(advantages, returns)``, both (B, T), zero where ``response_mask`` is 0.

    Args:
        name: one of :data:`ADVANTAGE_ESTIMATORS` (see each estimator's docstring for its equation).
        token_level_rewards: (B, T) floating; the outcome reward of a sample is its sum under the mask.
            Masked positions may hold anything (NaN included).
        response_mask: (B, T) of 0/1 (bool, int or float).
        uids: B hashable group ids, compared by value (a 1-D tensor or array is accepted).
            Unused, and may be None, for ``reinforce_plus_plus`` and ``remax``.
        eps: added to the group std before dividing (grpo, grpo_passk, gdpo).
        gamma: discount of ``reinforce_plus_plus``'s return-to-go, in [0, 1].
        reward_baselines: (B,) greedy-rollout rewards, ``remax`` only.
        components / component_weights: reward components and their weights, ``gdpo`` only.

    Computed without gradient, in the dtype of ``token_level_rewards``.
    """
    estimator = _ESTIMATORS[choose("advantage estimator", name, _ESTIMATORS)]
    rewards = check_float_tensor("token_level_rewards", token_level_rewards, ndim=2)
    mask = check_mask(response_mask, rewards.shape)
    if not eps >= 0:
        raise AlgoInputError(f"eps must be >= 0, got {eps}")
    if not 0.0 <= gamma <= 1.0:
        raise AlgoInputError(f"gamma must lie in [0, 1], got {gamma}")
    if uids is not None:
        uid_list(uids, rewards.shape[0])
    with torch.no_grad():
        clean = zero_masked(rewards.detach(), mask)
        scores = clean.sum(dim=-1)
        bad = (~torch.isfinite(scores)).nonzero().flatten().tolist()
        if bad:
            raise AlgoInputError(f"token_level_rewards are not finite under the mask for sample(s) {bad[:10]}")
        batch = _Batch(clean, mask, scores, uids, eps, gamma, reward_baselines, components, component_weights)
        return estimator(batch)
