"""Typed function for GEMM."""
from __future__ import annotations

from ..registry import OPS


def gemm(a, b, *, out=None):
    """`a[M, K] @ b[N, K]^T` in bf16 with fp32 accumulation (K and N multiples of 8)."""
    return OPS["tkreg.gemm"](a, b, out)
