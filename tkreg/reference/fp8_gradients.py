"""Torch references for the FP8 Linear-layer gradients (DeepSeek-V3's recipe): dequantize, then
multiply in fp32.

- fp8_gemm_wgrad: dy_t[N, M], x_t[K, M] e4m3 (the transposed per-channel casts of dy[M, N] and
  x[M, K]) with s[ceil(M / 128), channels] fp32 -> dw[N, K] fp32 = deq(dy_t) @ deq(x_t)^T.
- fp8_transpose_blocks: a 128x128-block-scaled weight q[N, K], s[ceil(N/128), ceil(K/128)] ->
  q^T[K, N], s^T: an exact transposition (the same blocks, transposed), no requantization.
- fp8_linear / fp8_linear_dgrad / fp8_linear_wgrad: the whole recipe in torch (the autograd's
  path where no kernel serves): x 1x128 and w 128x128 for the forward, dy 1x128 against the
  transposed weight blocks for dgrad, dy and x per-channel (128-token groups) for wgrad.
"""
from __future__ import annotations

from .quant import GROUP, dequant_blocks, dequant_groups


def dequant_channels_t(q_t, s):
    """fp32(q_t) * s for a transposed per-channel cast: q_t[C, M], s[ceil(M / 128), C]."""
    return q_t.float() * s.float().t().repeat_interleave(GROUP, 1)[:, :q_t.shape[1]]


def fp8_gemm_wgrad(dy_t, dy_scale, x_t, x_scale):
    """dw[N, K] fp32 = sum over the M tokens of dequantized dy_t[N, M] x x_t[K, M]."""
    import torch
    return torch.matmul(dequant_channels_t(dy_t, dy_scale), dequant_channels_t(x_t, x_scale).t())


def fp8_gemm_wgrad_accumulate(dy_t, dy_scale, x_t, x_scale, main_grad):
    """main_grad[N, K] += fp8_gemm_wgrad(...) in fp32, in place; returns None."""
    main_grad.add_(fp8_gemm_wgrad(dy_t, dy_scale, x_t, x_scale))
    return None


def fp8_transpose_blocks(q, s):
    """(q[N, K] e4m3, s[ceil(N/128), ceil(K/128)]) -> (q^T[K, N], s^T), both contiguous."""
    return q.t().contiguous(), s.t().contiguous()


def fp8_linear(x, w):
    """y[M, N] bf16 = deq(x 1x128) @ deq(w 128x128)^T in fp32 (tkreg.fp8_gemm's math)."""
    import torch
    from .quant import per_block_quant_fp8, per_token_group_quant_fp8
    xq, xs = per_token_group_quant_fp8(x)
    wq, ws = per_block_quant_fp8(w)
    return torch.matmul(dequant_groups(xq, xs), dequant_blocks(wq, ws).t()).to(torch.bfloat16)


def fp8_linear_dgrad(dy, w):
    """dx[M, K] bf16 = deq(dy 1x128 along N) @ deq(w^T's 128x128 blocks)^T = ... @ deq(w)."""
    import torch
    from .quant import per_block_quant_fp8, per_token_group_quant_fp8
    dq, ds = per_token_group_quant_fp8(dy)
    wq, ws = per_block_quant_fp8(w)
    wt, wst = fp8_transpose_blocks(wq, ws)
    return torch.matmul(dequant_groups(dq, ds), dequant_blocks(wt, wst).t()).to(torch.bfloat16)


def fp8_linear_wgrad(dy, x):
    """dw[N, K] fp32 from the per-channel (128-token group) casts of dy and x."""
    from .quant import per_channel_quant_fp8_transpose
    dq, ds = per_channel_quant_fp8_transpose(dy)
    xq, xs = per_channel_quant_fp8_transpose(x)
    return fp8_gemm_wgrad(dq, ds, xq, xs)
