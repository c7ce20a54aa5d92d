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

A shared-prefix row (models/packing.py ``pack_shared_batch``) passes a :class:`SharedLayout`
as ``evr1_shared_layout``: its segments are each group's prompt and each of its responses; a
prompt's keys are itself, a response's its prompt then itself, causal with the query's last key
at its own position (bottom-right alignment, as flash's varlen kernel aligns a query segment
shorter than its keys). The keys are gathered once per layer (the prompt's K/V repeated for
each response), then one varlen call (CUDA, half precision) or one padded SDPA call per kind
of segment (prompts, responses) elsewhere.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

NAME = "evr1_packed"
PACKED_KWARG = "evr1_cu_seqlens"
SHARED_KWARG = "evr1_shared_layout"
VISION_NAME = "evr1_flash_packed"
_REGISTERED = False


def _varlen_kernel() -> Any:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@dataclass
class SharedLayout:
    """Which keys each query segment of a shared-prefix row attends to (causal, bottom-right)."""

    cu_q: torch.Tensor  # (S+1,) int32: segment boundaries in the row
    cu_k: torch.Tensor  # (S+1,) int32: boundaries in the gathered keys
    key_index: torch.Tensor  # (K,) int64: the row position of every gathered key
    max_q: int
    max_k: int
    # Segment indices per kind (prompts, responses): the fallback pads each kind on its own, so
    # a short response is never padded to a long prompt's length.
    buckets: tuple[torch.Tensor, ...] = ()

    def to(self, device: torch.device) -> SharedLayout:
        return SharedLayout(self.cu_q.to(device), self.cu_k.to(device), self.key_index.to(device), self.max_q,
                            self.max_k, tuple(b.to(device) for b in self.buckets))


def _repeat_kv(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if key.shape[1] != query.shape[1]:
        repeat = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1)
    return key, value


def segment_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_q: torch.Tensor,
                      cu_k: torch.Tensor, max_q: int, max_k: int, scale: float | None, causal: bool = False,
                      buckets: tuple[torch.Tensor, ...] = ()) -> torch.Tensor:
    """Segment s of ``query`` attends to segment s of ``key/value`` (causal: query i of a segment of
    ``lq`` queries and ``lk`` keys sees keys ``<= i + lk - lq``). ``query``: (Lq, H, D), ``key/value``:
    (Lk, H, D) with the same heads; returns (Lq, H, D)."""
    kernel = _varlen_kernel() if query.is_cuda else None
    if kernel is not None and query.dtype in (torch.float16, torch.bfloat16):
        extra: dict[str, Any] = {}
        if causal:
            params = inspect.signature(kernel).parameters
            extra = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
        cu_q, cu_k = (c.to(device=query.device, dtype=torch.int32) for c in (cu_q, cu_k))
        return kernel(query, key, value, cu_q, cu_k, int(max_q), int(max_k), scale=scale, **extra)
    device = query.device
    lengths_q = (cu_q[1:] - cu_q[:-1]).to(device)
    lengths_k = (cu_k[1:] - cu_k[:-1]).to(device)
    if not buckets:
        buckets = (torch.arange(len(lengths_q), device=device),)
    pieces = []
    for seg in buckets:
        seg = seg.to(device)
        if seg.numel() == 0:
            continue
        lq, lk = lengths_q[seg], lengths_k[seg]
        mq, mk = int(lq.max()), int(lk.max())
        oq, ok = torch.arange(mq, device=device), torch.arange(mk, device=device)
        valid_q = oq.unsqueeze(0) < lq.unsqueeze(1)  # (S, mq)
        iq = (cu_q[:-1].to(device)[seg].unsqueeze(1) + oq).clamp(max=query.shape[0] - 1)
        ik = (cu_k[:-1].to(device)[seg].unsqueeze(1) + ok).clamp(max=key.shape[0] - 1)
        mask = (ok.unsqueeze(0) < lk.unsqueeze(1))[:, None, None, :]  # keys beyond a segment's end
        if causal:  # a padded query row still sees every real key, so no row is fully masked
            mask = mask & (ok[None, None, :] <= oq[None, :, None] + (lk - lq)[:, None, None]).unsqueeze(1)
        out = F.scaled_dot_product_attention(query[iq].permute(0, 2, 1, 3), key[ik].permute(0, 2, 1, 3),
                                             value[ik].permute(0, 2, 1, 3), attn_mask=mask, scale=scale)
        pieces.append((iq[valid_q], out.permute(0, 2, 1, 3)[valid_q]))
    if len(pieces) == 1 and pieces[0][0].shape[0] == query.shape[0]:
        return pieces[0][1]  # one bucket in row order (the plain packed row)
    out = query.new_zeros(query.shape)
    for index, values in pieces:
        out = out.index_copy(0, index, values.to(out.dtype))
    return out


def packed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_len: int, scale: float | None, causal: bool = False) -> torch.Tensor:
    """Attention within each segment of a packed sequence (causal for the language model).

    ``query/key/value``: (L, H, D); ``cu_seqlens``: (S+1,) segment boundaries. Returns (L, H, D).
    """
    key, value = _repeat_kv(query, key, value)
    return segment_attention(query, key, value, cu_seqlens, cu_seqlens, max_len, max_len, scale, causal)


def shared_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: SharedLayout,
                     scale: float | None) -> torch.Tensor:
    """Causal attention of a shared-prefix row: ``query/key/value`` (L, H, D), returns (L, H, D)."""
    index = layout.key_index.to(key.device)
    # Gather before repeating the grouped KV heads: the repeated prompt copies stay small.
    key, value = _repeat_kv(query, key.index_select(0, index), value.index_select(0, index))
    return segment_attention(query, key, value, layout.cu_q, layout.cu_k, layout.max_q, layout.max_k, scale,
                             causal=True, buckets=layout.buckets)


def evr1_flash_packed(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                      is_causal: bool | None = None, cu_seq_lens_q: torch.Tensor | None = None,
                      max_length_q: int | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention-interface function; inputs (B, H, L, D), output (B, L, H, D).

    The vision blocks pass their windows as ``cu_seq_lens_q``; a padding-free packed row of
    several sequences passes its boundaries as ``evr1_cu_seqlens`` (a keyword transformers
    forwards to every attention call untouched), used by the causal language-model layers; a
    shared-prefix row its :class:`SharedLayout` as ``evr1_shared_layout``.
    """
    shared = kwargs.get(SHARED_KWARG)
    if cu_seq_lens_q is None and shared is not None and getattr(module, "is_causal", False):
        q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
        return shared_attention(q, k, v, shared, scaling).unsqueeze(0), None
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
