"""Input validation and masked reductions shared by every ``algos`` module.

Convention: a response mask arrives as any 0/1 tensor (bool, int or float) and is turned into a
bool tensor once. Values at masked positions may hold junk (NaN, inf); every reduction here selects
with ``torch.where`` *before* doing arithmetic, so junk never reaches a result or a gradient
(``x * mask`` would turn ``NaN * 0`` into ``NaN``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from easyvideor1.errors import ConfigError, EasyVideoR1Error

WHITEN_EPS = 1e-8  # variance floor of batch whitening; veRL's masked_whiten uses the same value


class AlgoInputError(EasyVideoR1Error, ValueError):
    """A tensor or argument handed to an ``algos`` function has the wrong shape, type or value."""


def choose(kind: str, name: str, known: Iterable[str]) -> str:
    """Return ``name`` if it is one of ``known``; otherwise raise a ConfigError listing them."""
    known = tuple(known)
    if name not in known:
        raise ConfigError(f"unknown {kind} {name!r}; known: {', '.join(known)}")
    return name


def check_float_tensor(name: str, value: object, ndim: int | None = None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise AlgoInputError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise AlgoInputError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    if ndim is not None and value.dim() != ndim:
        raise AlgoInputError(f"{name} must have {ndim} dimension(s), got shape {tuple(value.shape)}")
    return value


def check_same_shape(reference_name: str, reference: torch.Tensor, **others: torch.Tensor | None) -> None:
    for name, tensor in others.items():
        if tensor is not None and not isinstance(tensor, torch.Tensor):
            raise AlgoInputError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor is not None and tuple(tensor.shape) != tuple(reference.shape):
            raise AlgoInputError(
                f"{name} has shape {tuple(tensor.shape)} but {reference_name} has shape "
                f"{tuple(reference.shape)}; they must match"
            )


def check_mask(response_mask: object, shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    """Validate a 0/1 mask of the given shape and return it as a bool tensor."""
    if not isinstance(response_mask, torch.Tensor):
        raise AlgoInputError(f"response_mask must be a torch.Tensor, got {type(response_mask).__name__}")
    if tuple(response_mask.shape) != tuple(shape):
        raise AlgoInputError(
            f"response_mask has shape {tuple(response_mask.shape)}, expected {tuple(shape)}"
        )
    if response_mask.dtype == torch.bool:
        return response_mask
    if not bool(((response_mask == 0) | (response_mask == 1)).all()):
        raise AlgoInputError("response_mask must hold only 0 and 1")
    return response_mask != 0


def check_vector(name: str, value: object, length: int, like: torch.Tensor) -> torch.Tensor:
    """Turn a (B,) tensor or sequence of numbers into a finite tensor in ``like``'s dtype/device."""
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    tensor = tensor.to(dtype=like.dtype, device=like.device)
    if tensor.dim() != 1 or tensor.shape[0] != length:
        raise AlgoInputError(f"{name} must have shape ({length},), got {tuple(tensor.shape)}")
    bad = (~torch.isfinite(tensor)).nonzero().flatten().tolist()
    if bad:
        raise AlgoInputError(f"{name} is not finite at sample index(es) {bad[:10]}")
    return tensor


def uid_list(uids: object, batch_size: int) -> list:
    """Materialise uids as a list of hashable Python values (tensors and arrays become scalars)."""
    if uids is None:
        raise AlgoInputError("uids are required: one group id per sample")
    if hasattr(uids, "tolist") and not isinstance(uids, list):
        uids = uids.tolist()  # 0-dim tensors hash by identity, so compare plain values instead
    if not isinstance(uids, Sequence) or isinstance(uids, (str, bytes)):
        raise AlgoInputError(f"uids must be a sequence of {batch_size} hashable ids, got {type(uids).__name__}")
    if len(uids) != batch_size:
        raise AlgoInputError(f"got {len(uids)} uids for a batch of {batch_size} samples")
    for position, uid in enumerate(uids):
        try:
            hash(uid)
        except TypeError as exc:
            raise AlgoInputError(f"uid at index {position} ({uid!r}) is not hashable") from exc
    return list(uids)


def zero_masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` where the mask is set, exact zeros elsewhere (gradient-safe for junk)."""
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    selected = zero_masked(values, mask)
    return selected.sum() if dim is None else selected.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over set positions; 0 where nothing is set (never NaN)."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1).to(values.dtype)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Whiten over every set position of the whole batch.

    .. math:: \hat x = (x - \mu) / \sqrt{\sigma^2 + 10^{-8}},\quad
              \mu = \frac{\sum m x}{\sum m},\quad \sigma^2 = \frac{\sum m (x-\mu)^2}{\sum m - 1}

    (unbiased variance, as veRL's ``masked_whiten``). With fewer than two set positions the
    variance is undefined and the result is 0 rather than NaN (veRL raises instead).
    """
    count = mask.sum().to(values.dtype)
    mean = masked_sum(values, mask) / count.clamp(min=1)
    centred = zero_masked(values - mean, mask)
    variance = (centred * centred).sum() / (count - 1).clamp(min=1)
    whitened = centred * torch.rsqrt(variance + WHITEN_EPS)
    return torch.where(count >= 2, whitened, torch.zeros_like(whitened))
