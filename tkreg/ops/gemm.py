"""Typed functions for the GEMMs."""
from __future__ import annotations

from ..runtime import OPS
from ._route import compiling, graph


def gemm(a, b, bias=None, *, out=None):
    """`a[M, K] @ b[N, K]^T (+ bias[N])`, bf16 or fp16 with fp32 accumulation (K, N % 8 == 0)."""
    if compiling():
        return graph("tkreg.gemm", out, a, b, bias)
    return OPS["tkreg.gemm"](a, b, bias, out)


def fp8_gemm(a, a_scale, b, b_scale, *, out=None):
    """Block-scaled FP8 GEMM -> bf16 (DeepSeek-V3 / DeepGEMM): a[M, K], b[N, K] e4m3;
    a_scale[M, K/128] fp32 per 1x128 group, row-major or DeepGEMM's column-major view (what
    `per_token_group_quant_fp8_colmajor` returns); b_scale[N/128, K/128] fp32 per 128x128 block."""
    if compiling():
        return graph("tkreg.fp8_gemm", out, a, a_scale, b, b_scale)
    return OPS["tkreg.fp8_gemm"](a, a_scale, b, b_scale, out)
