"""Typed functions for the built-in ops: the fast eager path.

Each is one dict lookup and one call into the native launcher, which validates, picks the
variant and launches; outputs are allocated unless `out=` is given.
"""
from __future__ import annotations

from .registry import OPS


def rms_norm(x, weight, eps: float = 1e-6, *, out=None):
    """RMSNorm over the last dim: `x[M, N] * rsqrt(mean(x^2) + eps) * weight[N]` (bf16/fp16)."""
    return OPS["tkreg.rms_norm"](x, weight, out, eps)


def gemm(a, b, *, out=None):
    """`a[M, K] @ b[N, K]^T` in bf16 with fp32 accumulation (K and N multiples of 8)."""
    return OPS["tkreg.gemm"](a, b, out)
