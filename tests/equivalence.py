"""Worst differences of an equivalence test (the shared-prefix layout against one sequence per
response), printed as one JSON line per case, ``worst-diff {...}``: ``pytest -s`` (or ``-rP``)
shows them, for the closing note of issue #32."""

from __future__ import annotations

import json

import torch


def rel_norm(a: torch.Tensor, b: torch.Tensor) -> float:
    """``|a - b| / |b|`` over the whole tensor (Frobenius norms)."""
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def max_rel(a: torch.Tensor, b: torch.Tensor, floor: float = 1e-6) -> float:
    """The largest element-wise ``|a - b| / |b|``, ``|b|`` floored (a value near 0 has no scale)."""
    a, b = a.float(), b.float()
    return float(((a - b).abs() / b.abs().clamp_min(floor)).max()) if b.numel() else 0.0


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max()) if b.numel() else 0.0


def report(test: str, case: str, **diffs: float | str) -> None:
    """One ``worst-diff`` JSON line: numbers to 3 significant digits, names as they are."""
    line = {"test": test, "case": case,
            **{k: float(f"{v:.3g}") if isinstance(v, float) else v for k, v in diffs.items()}}
    print("worst-diff " + json.dumps(line), flush=True)
