"""Typed functions for the FP8 (e4m3) family: quantize, cast back, fused SwiGLU + quantize.

Scales are fp32.  `ue8m0=True` rounds each scale up to a power of two (DeepGEMM's UE8M0 recipe,
still stored as fp32).  `column_major_scales=True` writes DeepGEMM's TMA-aligned column-major
layout: the kernel fills a row-major `[K // 128, ceil(M / 4) * 4]` buffer and these functions
return its transposed view `[M, K // 128]` with strides `(1, ceil(M / 4) * 4)` (the padding columns
are not written).  Pass `s=` that raw buffer to reuse it.  Exact rounding: kernels_src/fp8.py.
"""
from __future__ import annotations

from ..runtime import OPS
from ._route import compiling, graph


def _quant(name, x, q, s, ue8m0):
    if compiling():   # torch.compile: the functional custom op, copied into the given outputs
        rq, rs = graph(name, None, x, bool(ue8m0))
        return (rq if q is None else q.copy_(rq)), (rs if s is None else s.copy_(rs))
    return OPS[name](x, ue8m0, q, s)


def _cols(q, s_t):
    return q, s_t.t()[: q.shape[0]]


def per_token_group_quant_fp8(x, *, ue8m0: bool = False, column_major_scales: bool = False, q=None, s=None):
    """x[M, K] bf16/fp16 (K % 128 == 0) -> (q[M, K] float8_e4m3fn, s[M, K // 128] fp32)."""
    if column_major_scales:
        return _cols(*_quant("tkreg.per_token_group_quant_fp8_colmajor", x, q, s, ue8m0))
    return _quant("tkreg.per_token_group_quant_fp8", x, q, s, ue8m0)


def silu_and_mul_quant_fp8(x, *, ue8m0: bool = False, column_major_scales: bool = False, q=None, s=None):
    """x[M, 2I] (I % 128 == 0) -> quantized silu(x[:, :I]) * x[:, I:]: (q[M, I], s[M, I // 128])."""
    if column_major_scales:
        return _cols(*_quant("tkreg.silu_and_mul_quant_fp8_colmajor", x, q, s, ue8m0))
    return _quant("tkreg.silu_and_mul_quant_fp8", x, q, s, ue8m0)


def per_block_quant_fp8(w, *, ue8m0: bool = False, q=None, s=None):
    """w[N, K] bf16/fp16 (K % 16 == 0) -> (q[N, K] e4m3, s[ceil(N/128), ceil(K/128)] fp32)."""
    return _quant("tkreg.per_block_quant_fp8", w, q, s, ue8m0)


def per_token_group_dequant(q, s, *, out=None):
    """q[M, K] e4m3, s[M, K // 128] fp32 (row-major) -> bf16 q * s."""
    if compiling():
        return graph("tkreg.per_token_group_dequant", out, q, s)
    return OPS["tkreg.per_token_group_dequant"](q, s, out)


def per_block_dequant(q, s, *, out=None):
    """q[N, K] e4m3, s[ceil(N/128), ceil(K/128)] fp32 -> bf16 q * s."""
    if compiling():
        return graph("tkreg.per_block_dequant", out, q, s)
    return OPS["tkreg.per_block_dequant"](q, s, out)
