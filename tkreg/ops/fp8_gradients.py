"""Typed functions for the FP8 Linear-layer gradients (DeepSeek-V3's recipe; kernels_src/gemm/fp8_gradients.py).

A Linear layer y[M, N] = x[M, K] @ w[N, K]^T trained in FP8:
- forward: x cast 1x128 (`per_token_group_quant_fp8`), w 128x128 (`per_block_quant_fp8`), `fp8_gemm`.
- dgrad dx = dy @ w: dy cast 1x128 along N, w's 128x128 blocks transposed exactly
  (`fp8_transpose_blocks`, no requantization): then it is `fp8_gemm(dy_q, dy_s, w_t, w_t_scale)`.
- wgrad dw = dy^T @ x: dy and x cast per channel over 128-token groups, transposed
  (`per_channel_quant_fp8(..., transpose=True)`), into `fp8_gemm_wgrad` (fp32 out, or added into
  an fp32 main grad in place).
tkreg.nn.Fp8Linear is the module that runs the whole recipe under autograd.
"""
from __future__ import annotations

from ..runtime import OPS
from ._route import compiling, graph

ALIGN_M = 16   # the transposed operands' rows are M bytes: TMA's 16-byte row pitch


def _check_wgrad(dy_t, dy_scale, x_t, x_scale) -> None:
    name = "tkreg.fp8_gemm_wgrad"
    for arg, t in (("dy_t", dy_t), ("x_t", x_t), ("dy_scale", dy_scale), ("x_scale", x_scale)):
        if getattr(t, "dim", lambda: 0)() != 2:
            raise ValueError(f"{name}: `{arg}` must have 2 dims, got shape {tuple(getattr(t, 'shape', ()))}")
    m = dy_t.shape[1]
    if x_t.shape[1] != m:
        raise ValueError(f"{name}: `dy_t` [N, M] and `x_t` [K, M] must share M (the tokens); got {tuple(dy_t.shape)} "
                         f"and {tuple(x_t.shape)}")
    if m % ALIGN_M:
        raise ValueError(f"{name}: M = {m} tokens; expected a multiple of {ALIGN_M} (TMA rows of the transposed "
                         "operands; pad the tokens with zero rows, which change neither the scales nor the product)")


def fp8_gemm_wgrad(dy_t, dy_scale, x_t, x_scale, *, main_grad=None, out=None):
    """A Linear layer's FP8 weight gradient: dw[N, K] fp32 = sum over 128-token blocks of
    (dy_t @ x_t^T) * dy_scale[blk, n] * x_scale[blk, k], from the transposed per-channel casts
    dy_t[N, M], x_t[K, M] e4m3 and their s[ceil(M / 128), channels] fp32 (exactly what
    `per_channel_quant_fp8(dy, transpose=True)` returns).  With `main_grad` (fp32 [N, K]) the
    product is added there in place and main_grad is returned.  M % 16 == 0; sm_90a (elsewhere
    NoKernelError: `tkreg.reference.fp8_gradients.fp8_gemm_wgrad` computes the same)."""
    if not compiling():
        _check_wgrad(dy_t, dy_scale, x_t, x_scale)
    if main_grad is not None:
        if out is not None:
            raise ValueError("tkreg.fp8_gemm_wgrad: give `main_grad` (accumulate in place) or `out=`, not both")
        if compiling():
            graph("tkreg.fp8_gemm_wgrad_accumulate", None, dy_t, dy_scale, x_t, x_scale, main_grad)
        else:
            OPS["tkreg.fp8_gemm_wgrad_accumulate"](dy_t, dy_scale, x_t, x_scale, main_grad)
        return main_grad
    if compiling():
        return graph("tkreg.fp8_gemm_wgrad", out, dy_t, dy_scale, x_t, x_scale)
    return OPS["tkreg.fp8_gemm_wgrad"](dy_t, dy_scale, x_t, x_scale, out)


def fp8_transpose_blocks(q, s):
    """A 128x128-block-scaled weight q[N, K] e4m3, s[ceil(N/128), ceil(K/128)] fp32 -> (q^T[K, N],
    s^T[ceil(K/128), ceil(N/128)]), both contiguous: the same blocks transposed, bit for bit (no
    requantization), what `fp8_gemm` takes as the weight of the dgrad dx = dy @ w.  q^T through
    tkreg.transpose's byte kernel on a GPU (one read and one write of N K bytes), s^T in torch."""
    import torch
    name = "tkreg.fp8_transpose_blocks"
    if getattr(q, "dim", lambda: 0)() != 2 or getattr(s, "dim", lambda: 0)() != 2:
        raise ValueError(f"{name}: `q` [N, K] and `s` [ceil(N/128), ceil(K/128)] must have 2 dims; got "
                         f"{tuple(getattr(q, 'shape', ()))} and {tuple(getattr(s, 'shape', ()))}")
    if q.dtype != torch.float8_e4m3fn:
        raise TypeError(f"{name}: `q` has dtype {q.dtype}; expected torch.float8_e4m3fn")
    n, k = q.shape
    if tuple(s.shape) != (-(-n // 128), -(-k // 128)):
        raise ValueError(f"{name}: `s` has shape {tuple(s.shape)}; expected {(-(-n // 128), -(-k // 128))} "
                         f"(128x128 blocks of q {tuple(q.shape)})")
    if q.is_cuda:
        from .quant import transpose
        q_t = transpose(q.contiguous())
    else:
        q_t = q.t().contiguous()
    return q_t, s.t().contiguous()
