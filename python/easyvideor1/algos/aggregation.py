r"""Reduce a per-token loss matrix (B, T) to a scalar.

With :math:`\ell_{i,t}` the per-token loss and :math:`m_{i,t}` the mask:

* ``token-mean``: :math:`\sum_{i,t} m\ell \,/\, N`, :math:`N` = number of unmasked tokens;
* ``seq-mean-token-mean``: :math:`\sum_i \big(\sum_t m\ell / \sum_t m\big) \,/\, S`;
* ``seq-mean-token-sum``: :math:`\sum_i \sum_t m\ell \,/\, S`;
* ``seq-mean-token-sum-norm``: :math:`\sum_i \big(\sum_t m\ell / C\big) \,/\, S`, with
  :math:`C` = ``loss_scale_factor`` or T (the padded response length): Dr.GRPO's constant
  normaliser, as veRL 0.9.

:math:`S` = number of sequences with at least one unmasked token (empty rows take no part).

**Gradient accumulation and data parallelism.** By default :math:`N` and :math:`S` are counted on
the tensor given, so averaging micro-batch losses is *not* the full-batch loss when micro-batches
hold different token counts. Pass the totals over every micro-batch of the optimizer step (and
every data-parallel rank) as ``global_tokens`` / ``global_seqs``: each micro-batch loss is then its
share of the full-batch loss and *summing* the micro-batch losses gives exactly the full-batch
value (use :func:`loss_denominators` per micro-batch, add them up, all-reduce across ranks). When
the data-parallel all-reduce *averages* gradients (DDP/FSDP default), also pass ``dp_size`` = world
size: the loss is multiplied by it so the average over ranks equals the global sum.
"""

from __future__ import annotations

import torch

from ._checks import AlgoInputError, check_float_tensor, check_mask, choose, masked_sum, zero_masked

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)

Denominator = int | float | torch.Tensor


def loss_denominators(response_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Local counts to be summed over micro-batches and ranks: ``global_tokens``, ``global_seqs``."""
    if not isinstance(response_mask, torch.Tensor) or response_mask.dim() != 2:
        raise AlgoInputError("response_mask must be a (B, T) tensor")
    mask = check_mask(response_mask, response_mask.shape)
    return {"global_tokens": mask.sum(), "global_seqs": mask.any(dim=-1).sum()}


def _scalar(name: str, value: Denominator, like: torch.Tensor, *, count: bool) -> torch.Tensor:
    """A positive denominator. Counts may be 0 (an all-masked step): the numerator is 0 too."""
    tensor = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if tensor.dim() != 0:
        raise AlgoInputError(f"{name} must be a scalar, got shape {tuple(tensor.shape)}")
    if count:
        if not bool(tensor >= 0):
            raise AlgoInputError(f"{name} must be >= 0, got {float(tensor)}")
        return tensor.clamp(min=1)
    if not bool(tensor > 0):
        raise AlgoInputError(f"{name} must be > 0, got {float(tensor)}")
    return tensor


def aggregate_loss(
    values: torch.Tensor,
    response_mask: torch.Tensor,
    mode: str,
    *,
    global_tokens: Denominator | None = None,
    global_seqs: Denominator | None = None,
    loss_scale_factor: Denominator | None = None,
    dp_size: int = 1,
) -> torch.Tensor:
    """Aggregate ``values`` (B, T) under ``response_mask`` with ``mode`` (see module docstring).

    ``global_tokens`` is the token-mean denominator, ``global_seqs`` the seq-mean-* one and
    ``loss_scale_factor`` the extra seq-mean-token-sum-norm divisor (keep it constant across
    steps, e.g. the configured max response length); each is ignored by the modes that do not use
    it, so a trainer may always pass all of them. With ``dp_size`` > 1, token-mean needs ``global_tokens``
    and the seq-mean modes need ``global_seqs`` (a local count would be wrong by the rank
    imbalance). An empty mask gives 0 (with a graph), never NaN.
    """
    choose("loss aggregation mode", mode, LOSS_AGG_MODES)
    check_float_tensor("values", values, ndim=2)
    mask = check_mask(response_mask, values.shape)
    if not (isinstance(dp_size, int) and dp_size >= 1):
        raise AlgoInputError(f"dp_size must be an int >= 1, got {dp_size!r}")
    token_sums = masked_sum(values, mask, dim=-1)  # (B,)

    if mode == "token-mean":
        if global_tokens is None:
            if dp_size > 1:
                raise AlgoInputError("token-mean with dp_size > 1 needs global_tokens (tokens on all ranks)")
            denominator = mask.sum().clamp(min=1).to(values.dtype)
        else:
            denominator = _scalar("global_tokens", global_tokens, values, count=True)
        return token_sums.sum() / denominator * dp_size

    lengths = mask.sum(dim=-1)
    non_empty = lengths > 0
    if mode == "seq-mean-token-mean":
        per_sequence = token_sums / lengths.clamp(min=1).to(values.dtype)
    elif mode == "seq-mean-token-sum-norm":
        scale = loss_scale_factor if loss_scale_factor is not None else max(values.shape[-1], 1)
        per_sequence = token_sums / _scalar("loss_scale_factor", scale, values, count=False)
    else:
        per_sequence = token_sums
    if global_seqs is None:
        if dp_size > 1:
            raise AlgoInputError(f"{mode} with dp_size > 1 needs global_seqs (sequences on all ranks)")
        denominator = non_empty.sum().clamp(min=1).to(values.dtype)
    else:
        denominator = _scalar("global_seqs", global_seqs, values, count=True)
    return zero_masked(per_sequence, non_empty).sum() / denominator * dp_size
