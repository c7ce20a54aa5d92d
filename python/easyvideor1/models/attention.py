"""A packed attention implementation for Qwen-VL training (:func:`use_packed_attention`).

Why: transformers' default (sdpa) path runs the vision tower's windowed attention as one
SDPA call *per window* (a Python loop over ``cu_seqlens``: thousands of tiny kernels per
layer for a 128-frame video). The vision config gets a name containing "flash", which makes
the vision blocks hand us the packed ``cu_seqlens`` instead (the model itself is loaded under
a name without "flash", so transformers does not look for a flash-attn package), and we run
every window of a layer in one call:
PyTorch's variable-length flash kernel on CUDA, or the windows gathered into one padded
batch with a key-padding mask elsewhere (no per-window loop either way). The language model's
causal attention goes to one SDPA call (flash backend on CUDA when there is no padding).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F

NAME = "evr1_packed"
PACKED_KWARG = "evr1_cu_seqlens"
VISION_NAME = "evr1_flash_packed"
_REGISTERED = False


def _varlen_kernel() -> Any:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def packed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_len: int, scale: float | None, causal: bool = False) -> torch.Tensor:
    """Attention within each segment of a packed sequence (causal for the language model).

    ``query/key/value``: (L, H, D); ``cu_seqlens``: (S+1,) segment boundaries. Returns (L, H, D).
    """
    if key.shape[1] != query.shape[1]:
        repeat = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1)
    kernel = _varlen_kernel() if query.is_cuda else None
    if kernel is not None and query.dtype in (torch.float16, torch.bfloat16):
        cu = cu_seqlens.to(device=query.device, dtype=torch.int32)
        extra: dict[str, Any] = {}
        if causal:
            params = inspect.signature(kernel).parameters
            extra = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
        return kernel(query, key, value, cu, cu, int(max_len), int(max_len), scale=scale, **extra)
    # Gather every segment into one padded batch (S, H, max_len, D) with a key-padding mask.
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(query.device)
    starts = cu_seqlens[:-1].to(query.device)
    offsets = torch.arange(int(max_len), device=query.device)
    valid = offsets.unsqueeze(0) < lengths.unsqueeze(1)  # (S, max_len)
    index = (starts.unsqueeze(1) + offsets.unsqueeze(0)).clamp(max=query.shape[0] - 1)  # (S, max_len)

    def batch(t: torch.Tensor) -> torch.Tensor:
        return t[index].permute(0, 2, 1, 3)  # (S, H, max_len, D)

    mask = valid[:, None, None, :]  # keys beyond a segment's end are masked out
    if causal:
        mask = mask & torch.ones(int(max_len), int(max_len), dtype=torch.bool, device=query.device).tril()
    out = F.scaled_dot_product_attention(batch(query), batch(key), batch(value), attn_mask=mask, scale=scale)
    out = out.permute(0, 2, 1, 3)[valid]  # (L, H, D) in packed order
    return out


def evr1_flash_packed(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                      is_causal: bool | None = None, cu_seq_lens_q: torch.Tensor | None = None,
                      max_length_q: int | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention-interface function; inputs (B, H, L, D), output (B, L, H, D).

    The vision blocks pass their windows as ``cu_seq_lens_q``; a padding-free packed row of
    several sequences passes its boundaries as ``evr1_cu_seqlens`` (a keyword transformers
    forwards to every attention call untouched), used by the causal language-model layers.
    """
    packed_rows = kwargs.get(PACKED_KWARG)
    if cu_seq_lens_q is None and packed_rows is not None and getattr(module, "is_causal", False):
        q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
        lengths = packed_rows[1:] - packed_rows[:-1]
        out = packed_attention(q, k, v, packed_rows, int(lengths.max()), scaling, causal=True)
        return out.unsqueeze(0), None
    if cu_seq_lens_q is not None:
        if query.shape[0] != 1:
            raise ValueError(f"packed attention expects one packed row, got batch {query.shape[0]}")
        q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (L, H, D)
        max_len = int(max_length_q) if max_length_q is not None else int((cu_seq_lens_q[1:] -
                                                                          cu_seq_lens_q[:-1]).max())
        out = packed_attention(q, k, v, cu_seq_lens_q, max_len, scaling)
        return out.unsqueeze(0), None
    causal = bool(getattr(module, "is_causal", True)) if is_causal is None else bool(is_causal)
    if attention_mask is not None and attention_mask.dim() == 2:
        if bool(attention_mask.all()):
            attention_mask = None
        else:  # padding: a boolean (B, 1, Lq, Lk) mask that is causal and hides padded keys
            lq, lk = query.shape[2], key.shape[2]
            keep = torch.ones(lq, lk, dtype=torch.bool, device=query.device).tril(lk - lq) if causal else None
            pad = attention_mask.bool()[:, None, None, :]
            attention_mask = pad if keep is None else pad & keep
            causal = False
    elif attention_mask is not None:
        causal = False
    if key.shape[1] != query.shape[1]:
        # Expand grouped KV heads: SDPA's flash backend does not take enable_gqa.
        repeat = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout if module.training else 0.0,
        is_causal=causal and attention_mask is None and query.shape[2] > 1, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Make ``attn_implementation="evr1_packed"`` known to transformers (idempotent)."""
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

        for name in (NAME, VISION_NAME):
            AttentionInterface.register(name, evr1_flash_packed)
            # 2-D padding masks (or None without padding), as flash implementations take them.
            AttentionMaskInterface.register(name, flash_attention_mask)
        _REGISTERED = True
    return NAME


def use_packed_attention(model: torch.nn.Module) -> torch.nn.Module:
    """Switch a model loaded with ``attn_implementation=register()`` to packed vision attention."""
    vision_config = getattr(model.config, "vision_config", None)
    if vision_config is not None:
        vision_config._attn_implementation = VISION_NAME
    return model
