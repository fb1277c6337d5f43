"""Torch references for the GEMM family: fp32 accumulation, one rounding to the output dtype.

FP8 operands are dequantized first (1 x 128 activation groups, 128 x 128 weight blocks).  Grouped
GEMMs run per expert; rows no segment covers (contiguous: outside [offsets[0], offsets[E]);
masked: rows >= counts[e]) are zeros here, the kernels leave them untouched, so tests compare
only the covered rows.
"""
from __future__ import annotations

from .quant import dequant_blocks, dequant_groups


def gemm(a, b, bias=None):
    import torch
    out = torch.matmul(a.float(), b.float().t())
    if bias is not None:
        out += bias.float()
    return out.to(a.dtype)


def gemm_dgrad(dy, w):
    """dx[M, K] = dy[M, N] @ w[N, K] (tkreg.gemm's input gradient), fp32 accumulation, dy's dtype."""
    import torch
    return torch.matmul(dy.float(), w.float()).to(dy.dtype)


def gemm_wgrad(dy, x):
    """dw[N, K] = dy[M, N]^T @ x[M, K] (tkreg.gemm's weight gradient), fp32 accumulation, dy's dtype."""
    import torch
    return torch.matmul(dy.float().t(), x.float()).to(dy.dtype)


def gemm_wgrad_accumulate(dy, x, main_grad):
    """main_grad[N, K] += dy^T @ x in fp32, in place (Megatron's fp32 main grad); returns None."""
    import torch
    main_grad.add_(torch.matmul(dy.float().t(), x.float()))
    return None


# gate / up rows alternate in groups of SWIGLU_GROUP in the packed gate_up weight (the kernels pair
# them inside a thread's accumulator fragment: kernels_src/gemm/tiles/__init__.py)
SWIGLU_GROUP = 8


def pack_gate_up(gate, up):
    """[I, K] gate and up -> w_packed[2I, K]: groups of SWIGLU_GROUP rows, gate then up, ..."""
    import torch
    i, k = gate.shape
    g = SWIGLU_GROUP
    return torch.stack((gate.reshape(i // g, g, k), up.reshape(i // g, g, k)), dim=1).reshape(2 * i, k)


def unpack_gate_up(w_packed):
    """w_packed[2I, K] -> (gate[I, K], up[I, K]), pack_gate_up's inverse."""
    n, k = w_packed.shape
    v = w_packed.reshape(n // (2 * SWIGLU_GROUP), 2, SWIGLU_GROUP, k)
    return v[:, 0].reshape(n // 2, k), v[:, 1].reshape(n // 2, k)


def gemm_swiglu(a, w_packed):
    """silu(a @ gate^T) * (a @ up^T): each product rounded to a's dtype (what tkreg.gemm writes),
    then silu_and_mul's fp32 steps, rounded once: the unfused gemm + silu_and_mul, bit for bit."""
    import torch
    from .activation import silu_and_mul
    gate, up = unpack_gate_up(w_packed)
    return silu_and_mul(torch.cat([gemm(a, gate), gemm(a, up)], dim=-1))


def fp8_gemm(a, a_scale, b, b_scale):
    """Dequantize (1x128 activation groups, 128x128 weight blocks), multiply in fp32, round to bf16."""
    import torch
    return torch.matmul(dequant_groups(a, a_scale), dequant_blocks(b, b_scale).t()).to(torch.bfloat16)



def _segments(group_offsets, m: int):
    """(expert, lo, hi) of every non-empty contiguous segment, clipped to [0, m)."""
    offs = [int(x) for x in group_offsets.tolist()]
    for e in range(len(offs) - 1):
        lo, hi = max(offs[e], 0), min(offs[e + 1], m)
        if hi > lo:
            yield e, lo, hi


def _rows(counts, mmax: int):
    """(expert, rows) of every expert, counts clamped to [0, mmax] as the kernels do."""
    return [(e, min(max(int(c), 0), mmax)) for e, c in enumerate(counts.tolist())]


def grouped_gemm(a, b, group_offsets):
    import torch
    out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    for e, lo, hi in _segments(group_offsets, a.shape[0]):
        out[lo:hi] = torch.matmul(a[lo:hi].float(), b[e].float().t()).to(a.dtype)
    return out


def grouped_gemm_masked(a, b, counts):
    import torch
    out = torch.zeros(a.shape[0], a.shape[1], b.shape[1], dtype=a.dtype, device=a.device)
    for e, r in _rows(counts, a.shape[1]):
        if r:
            out[e, :r] = torch.matmul(a[e, :r].float(), b[e].float().t()).to(a.dtype)
    return out


def fp8_grouped_gemm(a, a_scale, b, b_scale, group_offsets):
    """Dequantize (1x128 activation groups, 128x128 weight blocks per expert), multiply in fp32, bf16."""
    import torch
    out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16, device=a.device)
    for e, lo, hi in _segments(group_offsets, a.shape[0]):
        x = dequant_groups(a[lo:hi], a_scale[lo:hi])
        out[lo:hi] = torch.matmul(x, dequant_blocks(b[e], b_scale[e]).t()).to(torch.bfloat16)
    return out


def fp8_grouped_gemm_masked(a, a_scale, b, b_scale, counts):
    import torch
    out = torch.zeros(a.shape[0], a.shape[1], b.shape[1], dtype=torch.bfloat16, device=a.device)
    for e, r in _rows(counts, a.shape[1]):
        if r:
            x = dequant_groups(a[e, :r], a_scale[e, :r])
            out[e, :r] = torch.matmul(x, dequant_blocks(b[e], b_scale[e]).t()).to(torch.bfloat16)
    return out
