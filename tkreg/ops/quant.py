"""Typed functions for the quant family: FP8 per-token-group and per-block casts (+ SwiGLU) and
their cast back, transpose, per-channel FP8, SwiGLU backward + FP8, MXFP4, E5M6 and FP8 cast back
in every layout the quant ops write.

FP8 scales are fp32; `ue8m0=True` rounds each scale up to a power of two (DeepGEMM's UE8M0 recipe,
still stored as fp32).  `column_major_scales=True` writes DeepGEMM's TMA-aligned column-major
layout: the kernel fills a row-major `[K // 128, ceil(M / 4) * 4]` buffer and these functions
return its transposed view `[M, K // 128]` with strides `(1, ceil(M / 4) * 4)` (the padding columns
are not written).  Pass `s=` that raw buffer to reuse it.

Formats and rounding: tkreg/reference/quant.py (bit-identical to DeepSeek TileKernels' torch
references where TileKernels has the op).  Scales are fp32 except MXFP4's, which are uint8
E8M0 codes (value 2^(s - 127); `s.view(torch.float8_e8m0fnu)` names the same bytes).
"""
from __future__ import annotations

from ..runtime import OPS
from ._route import compiling, graph


def _call(name, out, *args):
    if compiling():
        return graph(name, out, *args)
    if out is None:
        return OPS[name](*args)
    return OPS[name](*args, *out) if isinstance(out, tuple) else OPS[name](*args, out)


def _quant(name, x, ue8m0, q, s):
    if compiling():   # the functional custom op, copied into the given outputs
        rq, rs = graph(name, None, x, bool(ue8m0))
        return (rq if q is None else q.copy_(rq)), (rs if s is None else s.copy_(rs))
    return OPS[name](x, ue8m0, q, s)


# ---- transpose -----------------------------------------------------------------------------------
def _bits(name, x):
    """The dtype the kernels move `x`'s elements as (same size), or a named error."""
    import torch
    kind = {1: torch.uint8, 2: torch.float16, 4: torch.int32}.get(getattr(x, "element_size", lambda: 0)())
    if kind is None:
        raise TypeError(f"{name}: `x` has dtype {getattr(x, 'dtype', type(x))}; expected a 1-, 2- or 4-byte dtype")
    return kind


def batched_transpose(x, *, out=None):
    """x[B, M, N] (contiguous, any 1-, 2- or 4-byte dtype) -> [B, N, M]."""
    kind = _bits("tkreg.batched_transpose", x)
    xv = x.view(kind)
    ov = None if out is None else out.view(kind)
    r = _call("tkreg.batched_transpose", ov, xv)
    return out if out is not None else r.view(x.dtype)


def transpose(x, *, out=None):
    """x[M, N] (contiguous, any 1-, 2- or 4-byte dtype) -> x.t() made contiguous, [N, M]."""
    if getattr(x, "dim", lambda: 0)() != 2:
        raise ValueError(f"tkreg.transpose: `x` must have 2 dims, got shape {tuple(getattr(x, 'shape', ()))}")
    r = batched_transpose(x.unsqueeze(0), out=None if out is None else out.unsqueeze(0))
    return out if out is not None else r[0]


# ---- FP8 -----------------------------------------------------------------------------------------
def per_channel_quant_fp8(x, *, ue8m0: bool = False, transpose: bool = False, q=None, s=None):
    """x[M, K] bf16/fp16 (K % 8 == 0) -> (q, s[ceil(M / 128), K] fp32), amax per channel over each
    128-token group.  q is [M, K] e4m3, or q^T [K, M] with `transpose=True` (weight-gradient GEMMs)."""
    name = "tkreg.per_channel_quant_fp8_transpose" if transpose else "tkreg.per_channel_quant_fp8"
    return _quant(name, x, ue8m0, q, s)


def silu_and_mul_per_channel_quant_fp8_transpose(x, *, ue8m0: bool = False, q=None, s=None):
    """x[M, 2I] (I % 8 == 0) -> silu(x[:, :I]) * x[:, I:] in fp32 -> (q^T[I, M] e4m3, s[ceil(M / 128), I])."""
    return _quant("tkreg.silu_and_mul_per_channel_quant_fp8_transpose", x, ue8m0, q, s)


def silu_and_mul_backward_quant_fp8(dy, x, *, ue8m0: bool = False, q=None, s=None):
    """dx of silu_and_mul (dy[M, I], x[M, 2I], I % 128 == 0) quantized per 128-element group of a
    row: (q[M, 2I] e4m3, s[M, 2I // 128] fp32)."""
    if compiling():
        rq, rs = graph("tkreg.silu_and_mul_backward_quant_fp8", None, dy, x, bool(ue8m0))
        return (rq if q is None else q.copy_(rq)), (rs if s is None else s.copy_(rs))
    return OPS["tkreg.silu_and_mul_backward_quant_fp8"](dy, x, ue8m0, q, s)


def dequant_fp8(q, s, *, layout: str = "token_group", out=None):
    """bf16 q * s for every FP8 layout tkreg writes:

    - "token_group": q[M, K], s[M, K // 128] from per_token_group_quant_fp8 / silu_and_mul_quant_fp8
      / silu_and_mul_backward_quant_fp8, row-major or column-major (the view those return), fp32
      or UE8M0 (powers of two stored as fp32);
    - "block": 128 x 128 blocks, s[ceil(N / 128), ceil(K / 128)] (per_block_quant_fp8);
    - "channel": q[M, K], s[ceil(M / 128), K] (per_channel_quant_fp8);
    - "channel_transposed": q^T[K, M], s[ceil(M / 128), K] (the `_transpose` ops) -> bf16 [K, M].
    """
    if layout == "token_group":
        return _call("tkreg.group_dequant_fp8", out, q, s)
    if layout == "channel_transposed":
        return _call("tkreg.group_dequant_fp8", out, q, s.t())
    if layout == "channel":
        return _call("tkreg.per_channel_dequant_fp8", out, q, s)
    if layout == "block":
        return _call("tkreg.per_block_dequant", out, q, s)
    raise ValueError(f"tkreg.dequant_fp8: layout={layout!r}; expected 'token_group', 'block', 'channel' "
                     "or 'channel_transposed'")


# ---- MXFP4 ---------------------------------------------------------------------------------------
def per_token_group_quant_fp4(x, *, q=None, s=None):
    """x[M, K] bf16/fp16 (K % 32 == 0) -> OCP MXFP4: (q[M, K // 2] uint8, two e2m1 codes a byte,
    element 2j in the low nibble; s[M, K // 32] uint8 E8M0, scale 2^ceil(log2(amax / 6)))."""
    if compiling():
        rq, rs = graph("tkreg.per_token_group_quant_fp4", None, x)
        return (rq if q is None else q.copy_(rq)), (rs if s is None else s.copy_(rs))
    return OPS["tkreg.per_token_group_quant_fp4"](x, q, s)


def per_token_group_dequant_fp4(q, s, *, out=None):
    """q[M, K // 2] uint8, s[M, K // 32] uint8 (or float8_e8m0fnu) -> bf16 [M, K], exact."""
    if getattr(s, "dtype", None) is not None and str(s.dtype) == "torch.float8_e8m0fnu":
        import torch
        s = s.view(torch.uint8)
    return _call("tkreg.per_token_group_dequant_fp4", out, q, s)


# ---- E5M6 ----------------------------------------------------------------------------------------
def quant_e5m6(x, *, ue8m0: bool = False, p=None, s=None):
    """x[M, K] bf16/fp16 (K % 8 == 0, K <= 16384) -> (p[M, 3K/2] uint8 packed 12-bit E5M6 codes,
    s[M] fp32, one scale per token).  Layout: tkreg/reference/quant.py."""
    return _quant("tkreg.quant_e5m6", x, ue8m0, p, s)


def dequant_e5m6(p, s, *, out=None):
    """p[M, 3K/2] uint8, s[M] fp32 -> bf16 [M, K]."""
    return _call("tkreg.dequant_e5m6", out, p, s)


# ---- FP8 per-token groups and 128 x 128 blocks -----------------------------------------------------
def _cols(q, s_t):
    return q, s_t.t()[: q.shape[0]]


def per_token_group_quant_fp8(x, *, ue8m0: bool = False, column_major_scales: bool = False, q=None, s=None):
    """x[M, K] bf16/fp16 (K % 128 == 0) -> (q[M, K] float8_e4m3fn, s[M, K // 128] fp32)."""
    if column_major_scales:
        return _cols(*_quant("tkreg.per_token_group_quant_fp8_colmajor", x, ue8m0, q, s))
    return _quant("tkreg.per_token_group_quant_fp8", x, ue8m0, q, s)


def silu_and_mul_quant_fp8(x, *, ue8m0: bool = False, column_major_scales: bool = False, q=None, s=None):
    """x[M, 2I] (I % 128 == 0) -> quantized silu(x[:, :I]) * x[:, I:]: (q[M, I], s[M, I // 128])."""
    if column_major_scales:
        return _cols(*_quant("tkreg.silu_and_mul_quant_fp8_colmajor", x, ue8m0, q, s))
    return _quant("tkreg.silu_and_mul_quant_fp8", x, ue8m0, q, s)


def per_block_quant_fp8(w, *, ue8m0: bool = False, q=None, s=None):
    """w[N, K] bf16/fp16 (K % 16 == 0) -> (q[N, K] e4m3, s[ceil(N/128), ceil(K/128)] fp32)."""
    return _quant("tkreg.per_block_quant_fp8", w, ue8m0, q, s)


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


# ---- RMSNorm -> FP8 (the activations of an FP8 GEMM after a norm) ----------------------------------
def rms_norm_quant_fp8(x, weight, eps: float = 1e-6, *, ue8m0: bool = False, q=None, s=None):
    """x[M, N] bf16, weight[N] (N % 128 == 0, N <= 16384) -> (q[M, N] e4m3, s[M, N // 128] fp32):
    rms_norm(x, weight, eps) rounded to bf16, then per_token_group_quant_fp8 of it, in one kernel."""
    if compiling():
        rq, rs = graph("tkreg.rms_norm_quant_fp8", None, x, weight, eps, bool(ue8m0))
        return (rq if q is None else q.copy_(rq)), (rs if s is None else s.copy_(rs))
    return OPS["tkreg.rms_norm_quant_fp8"](x, weight, eps, ue8m0, q, s)


def fused_add_rms_norm_quant_fp8(x, residual, weight, eps: float = 1e-6, *, ue8m0: bool = False, q=None, s=None):
    """In place: `residual += x` (rounded; x is left as it was); returns (q, s) of
    rms_norm(residual, weight, eps) rounded to bf16, quantized per 1x128 group (rms_norm_quant_fp8)."""
    if compiling():
        rq, rs = graph("tkreg.fused_add_rms_norm_quant_fp8", None, x, residual, weight, eps, bool(ue8m0))
        return (rq if q is None else q.copy_(rq)), (rs if s is None else s.copy_(rs))
    return OPS["tkreg.fused_add_rms_norm_quant_fp8"](x, residual, weight, eps, ue8m0, q, s)
