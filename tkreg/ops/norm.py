"""Typed functions for the norm family."""
from __future__ import annotations

from ..registry import OPS


def rms_norm(x, weight, eps: float = 1e-6, *, out=None):
    """RMSNorm over the last dim: `x[M, N] * rsqrt(mean(x^2) + eps) * weight[N]` (bf16/fp16)."""
    return OPS["tkreg.rms_norm"](x, weight, out, eps)
