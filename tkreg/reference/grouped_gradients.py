"""Torch references for the MoE grouped GEMM gradients: per expert, fp32 accumulation, one rounding.

The forward (tkreg.reference.gemm.grouped_gemm / grouped_gemm_masked) is y rows of expert e =
x rows of e @ w[e]^T.  dgrad: dx rows of e = dy rows of e @ w[e], zeros on rows outside every
segment (their gradient: the kernels write those zeros too).  wgrad (k-grouped): dw[e] = dy rows
of e ^T @ x rows of e, zeros for an empty expert.  Contiguous segments are rows offsets[e] ..
offsets[e + 1] clipped to [0, M]; masked ones the first counts[e] rows (clamped to [0, Mmax]).
"""
from __future__ import annotations


def _bounds(group_offsets, m: int):
    """(lo, hi) of every expert's contiguous segment, clipped to [0, m] as the kernels clip them."""
    offs = [int(x) for x in group_offsets.tolist()]
    out = []
    for e in range(len(offs) - 1):
        lo = min(max(offs[e], 0), m)
        out.append((lo, min(max(offs[e + 1], lo), m)))
    return out


def _counts(counts, mmax: int):
    return [min(max(int(c), 0), mmax) for c in counts.tolist()]


def grouped_gemm_dgrad(dy, w, group_offsets):
    """dx[M, K]: rows offsets[e]:offsets[e+1] = dy rows @ w[e] (w[E, N, K] as stored); others zero."""
    import torch
    out = torch.zeros(dy.shape[0], w.shape[2], dtype=dy.dtype, device=dy.device)
    for e, (lo, hi) in enumerate(_bounds(group_offsets, dy.shape[0])):
        if hi > lo:
            out[lo:hi] = torch.matmul(dy[lo:hi].float(), w[e].float()).to(dy.dtype)
    return out


def grouped_gemm_masked_dgrad(dy, w, counts):
    """dx[E, Mmax, K]: dx[e, :counts[e]] = dy[e, :counts[e]] @ w[e]; rows >= counts[e] zero."""
    import torch
    out = torch.zeros(dy.shape[0], dy.shape[1], w.shape[2], dtype=dy.dtype, device=dy.device)
    for e, r in enumerate(_counts(counts, dy.shape[1])):
        if r:
            out[e, :r] = torch.matmul(dy[e, :r].float(), w[e].float()).to(dy.dtype)
    return out


def _wgrad32(dy, x, group_offsets):
    """fp32 dw[E, N, K] over the contiguous segments."""
    import torch
    bounds = _bounds(group_offsets, dy.shape[0])
    out = torch.zeros(len(bounds), dy.shape[1], x.shape[1], dtype=torch.float32, device=dy.device)
    for e, (lo, hi) in enumerate(bounds):
        if hi > lo:
            out[e] = torch.matmul(dy[lo:hi].float().t(), x[lo:hi].float())
    return out


def grouped_gemm_wgrad(dy, x, group_offsets):
    """dw[E, N, K]: dw[e] = dy[lo:hi]^T @ x[lo:hi] over expert e's rows (E = len(offsets) - 1)."""
    return _wgrad32(dy, x, group_offsets).to(dy.dtype)


def grouped_gemm_wgrad_accumulate(dy, x, group_offsets, main_grad):
    """main_grad[E, N, K] += the per-expert dy^T @ x in fp32, in place; returns None."""
    main_grad.add_(_wgrad32(dy, x, group_offsets))
    return None


def grouped_gemm_masked_wgrad(dy, x, counts):
    """dw[E, N, K]: dw[e] = dy[e, :counts[e]]^T @ x[e, :counts[e]]; counts 0 give zeros."""
    import torch
    out = torch.zeros(dy.shape[0], dy.shape[2], x.shape[2], dtype=torch.float32, device=dy.device)
    for e, r in enumerate(_counts(counts, dy.shape[1])):
        if r:
            out[e] = torch.matmul(dy[e, :r].float().t(), x[e, :r].float())
    return out.to(dy.dtype)
