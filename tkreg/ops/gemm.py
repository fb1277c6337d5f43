"""Typed function for GEMM."""
from __future__ import annotations

from ..runtime import OPS
from ._route import compiling, graph


def gemm(a, b, *, out=None):
    """`a[M, K] @ b[N, K]^T` in bf16 with fp32 accumulation (K and N multiples of 8)."""
    if compiling():
        return graph("tkreg.gemm", out, a, b)
    return OPS["tkreg.gemm"](a, b, out)
