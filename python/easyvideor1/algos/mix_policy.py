"""Mix-policy groups: one offline (teacher) trajectory in the last slot of a group of n.

The rollout layer asks :func:`responses_to_generate` how many responses to sample for a prompt,
generates them, and calls :func:`assemble_group`:

* mix-policy off, or no offline trajectory: generate n, the group is those n.
* unconditional mode: generate n - 1; the group is those plus the offline response in slot n.
* conditional mode: generate n and score them; when the online accuracy (mean of the n scores) is
  below ``accuracy_threshold`` the offline response *replaces* the last online one, otherwise the n
  online responses stand. Groups therefore always have exactly n members.

The offline text is tokenised with the caller's ``encode(text) -> list[int]`` (without special
tokens), truncated to ``max_response_length - 1`` tokens, and EOS is appended (unless the text
already ends with it), so its mask covers the text and the EOS, never padding. An offline
response given as token ids (a multi-turn trajectory the rollout layer assembled, EOS and
length limit already applied) is taken as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from easyvideor1.config.schema import MixPolicyConfig

from ._checks import AlgoInputError, check_float_tensor, check_mask, zero_masked


@dataclass(frozen=True)
class AssembledGroup:
    """The n responses of one prompt (token ids, unpadded) and which of them is offline."""

    responses: tuple[tuple[int, ...], ...]
    is_offline: tuple[bool, ...]

    @property
    def offline_injected(self) -> bool:
        return any(self.is_offline)


def _check_n(n: int) -> None:
    if not (isinstance(n, int) and n >= 1):
        raise AlgoInputError(f"group size n must be an int >= 1, got {n!r}")


def responses_to_generate(n: int, has_offline: bool, config: MixPolicyConfig) -> int:
    """How many responses the rollout engine samples for one prompt: n - 1 or n (module docstring)."""
    _check_n(n)
    if config.enable and has_offline and not config.conditional:
        if n < 2:
            raise AlgoInputError("mix-policy needs a group size n >= 2 (n - 1 online + 1 offline)")
        return n - 1
    return n


def encode_offline_response(
    text: str, encode: Callable[[str], Sequence[int]], *, eos_token_id: int, max_response_length: int
) -> tuple[int, ...]:
    """Token ids of an offline response: ``encode(text)[:max_response_length - 1] + [eos]``."""
    if not isinstance(text, str) or not text.strip():
        raise AlgoInputError("the offline trajectory is empty: offline_output must be non-empty text")
    if not (isinstance(max_response_length, int) and max_response_length >= 1):
        raise AlgoInputError(f"max_response_length must be an int >= 1, got {max_response_length!r}")
    ids = list(encode(text))
    if not all(isinstance(token, int) and not isinstance(token, bool) for token in ids):
        raise AlgoInputError("encode(text) must return a list of int token ids")
    if ids and ids[-1] == eos_token_id:
        ids = ids[:-1]  # append exactly one EOS below, whether or not the text carried one
    return tuple(ids[: max_response_length - 1]) + (eos_token_id,)


def assemble_group(
    generated: Sequence[Sequence[int]],
    offline_text: str | Sequence[int] | None,
    *,
    n: int,
    config: MixPolicyConfig,
    encode: Callable[[str], Sequence[int]],
    eos_token_id: int,
    max_response_length: int,
    online_accuracies: Sequence[float] | None = None,
) -> AssembledGroup:
    """Build the group of n for one prompt from its generated responses and optional offline text.

    ``generated`` must hold ``responses_to_generate(n, offline_text is not None, config)`` token-id
    sequences. In conditional mode with an offline text, ``online_accuracies`` (one score in [0, 1]
    per generated response) decides whether the offline response replaces the last slot.
    """
    has_offline = offline_text is not None
    expected = responses_to_generate(n, has_offline, config)
    online = [tuple(int(token) for token in response) for response in generated]
    if len(online) != expected:
        raise AlgoInputError(f"expected {expected} generated response(s) for a group of {n}, got {len(online)}")
    if not (config.enable and has_offline):
        return AssembledGroup(tuple(online), (False,) * n)
    if config.conditional:
        if online_accuracies is None or len(online_accuracies) != n:
            got = None if online_accuracies is None else len(online_accuracies)
            raise AlgoInputError(f"conditional mix-policy needs {n} online_accuracies, got {got}")
        accuracy = sum(float(a) for a in online_accuracies) / n
        if accuracy >= config.accuracy_threshold:
            return AssembledGroup(tuple(online), (False,) * n)
        online = online[:-1]
    if isinstance(offline_text, str):
        offline = encode_offline_response(
            offline_text, encode, eos_token_id=eos_token_id, max_response_length=max_response_length
        )
    else:
        offline = tuple(int(token) for token in offline_text)
        if not offline or len(offline) > max_response_length:
            raise AlgoInputError(f"an offline response of {len(offline)} token ids does not fit "
                                 f"max_response_length={max_response_length} (or is empty)")
    return AssembledGroup(tuple(online) + (offline,), (False,) * (n - 1) + (True,))


def pad_responses(
    responses: Sequence[Sequence[int]], *, max_response_length: int, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to (N, max_response_length): int64 ids and a 0/1 int64 mask over real tokens."""
    ids = torch.full((len(responses), max_response_length), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(responses), max_response_length), dtype=torch.long)
    for row, response in enumerate(responses):
        if len(response) > max_response_length:
            raise AlgoInputError(
                f"response {row} has {len(response)} tokens, more than max_response_length={max_response_length}"
            )
        ids[row, : len(response)] = torch.tensor(list(response), dtype=torch.long)
        mask[row, : len(response)] = 1
    return ids, mask


def mix_policy_metrics(groups: Sequence[AssembledGroup]) -> dict[str, float]:
    """How many groups got an offline response, and their fraction of all groups."""
    with_offline = sum(group.offline_injected for group in groups)
    return {
        "mix_policy/groups": float(len(groups)),
        "mix_policy/groups_with_offline": float(with_offline),
        "mix_policy/offline_group_fraction": with_offline / len(groups) if groups else 0.0,
    }


def offline_loss_share(
    per_token_loss: torch.Tensor, response_mask: torch.Tensor, is_offline: Sequence[bool] | torch.Tensor
) -> torch.Tensor:
    r"""Share of the loss carried by offline responses:
    :math:`\sum_{i\,offline,t} m|\ell| \,/\, \sum_{i,t} m|\ell|` (0 when the loss is 0 everywhere).

    Absolute values, so positive and negative token losses cannot cancel; ``per_token_loss`` is the
    matrix from :func:`~easyvideor1.algos.policy_loss.policy_loss_per_token`."""
    losses = check_float_tensor("per_token_loss", per_token_loss, ndim=2)
    mask = check_mask(response_mask, losses.shape)
    offline = torch.as_tensor(is_offline, device=losses.device).bool()
    if offline.shape != (losses.shape[0],):
        raise AlgoInputError(f"is_offline must have shape ({losses.shape[0]},), got {tuple(offline.shape)}")
    magnitude = zero_masked(losses.detach().abs(), mask)
    total = magnitude.sum()
    offline_part = magnitude[offline].sum()
    return torch.where(total > 0, offline_part / total.clamp(min=torch.finfo(losses.dtype).tiny), total * 0)
