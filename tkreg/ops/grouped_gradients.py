"""Typed functions for the MoE grouped GEMM gradients, and the grouped GEMMs' autograd.

The forward tkreg.grouped_gemm / grouped_gemm_masked (tkreg.ops.gemm) is y rows of expert e =
x rows of e @ w[e]^T, w[E, N, K].  Its gradients (sm_90a kernels: kernels_src/gemm/grouped_gradients.py):

- grouped_gemm_dgrad / grouped_gemm_masked_dgrad: dx = dy @ w[e] per segment, every row written
  (zeros outside every segment: their gradient).
- grouped_gemm_wgrad / grouped_gemm_masked_wgrad: dw[e] = dy^T @ x over expert e's rows (DeepGEMM's
  k-grouped wgrad), fp32 accumulation; empty experts get zeros; `main_grad=` (contiguous) adds the
  fp32 product into an fp32 main grad [E, N, K] instead.

Offsets / counts stay on the device (CUDA-graph safe); with TKREG_CHECK_INDICES=1 they are copied
to the host and checked first (as the forward's).  `GroupedGemmGrad` / `GroupedGemmMaskedGrad`
are the autograd the forward specs name as `backward`: the kernels where they serve, else a
per-expert torch.matmul loop (which reads the offsets on the host: under torch.compile on such a
device that is a graph break).  The offsets / counts get no gradient.
"""
from __future__ import annotations

from ..runtime import OPS
from ._route import checking, compiling, graph
from .gemm import check_counts, check_offsets


def _check_bounds(op: str, group_offsets, m: int) -> None:
    """The wgrad's offsets: non-decreasing, within [0, M] (no alignment needed)."""
    offs = [int(x) for x in group_offsets.tolist()]
    bad = [e for e in range(len(offs) - 1) if offs[e + 1] < offs[e]]
    if bad:
        e = bad[0]
        raise ValueError(f"{op}: `group_offsets` must be non-decreasing; offsets[{e}] = {offs[e]} > "
                         f"offsets[{e + 1}] = {offs[e + 1]}")
    if offs and (offs[0] < 0 or offs[-1] > m):
        raise ValueError(f"{op}: `group_offsets` must lie in [0, {m}] (dy's rows); got offsets[0] = {offs[0]}, "
                         f"offsets[E] = {offs[-1]}")


def _launch(op: str, out, dy, operand, groups, check, rows: int):
    """A typed function's one path: under torch.compile the graph op; else `check(op, groups, rows)`
    on a host copy of the offsets / counts when TKREG_CHECK_INDICES=1, then the launch."""
    if compiling():
        return graph(op, out, dy, operand, groups)
    if checking():
        check(op, groups, rows)
    return OPS[op](dy, operand, groups, out)


def grouped_gemm_dgrad(dy, w, group_offsets, *, out=None):
    """dx[M, K]: rows offsets[e]:offsets[e+1] = dy[M, N] rows @ w[e] (w[E, N, K] as stored), rows
    outside every segment zero; bf16/fp16, fp32 accumulation; segments start at multiples of 128
    (the forward's layout); N, K % 8 == 0; sm_90a (elsewhere NoKernelError)."""
    return _launch("tkreg.grouped_gemm_dgrad", out, dy, w, group_offsets, check_offsets, dy.shape[0])


def grouped_gemm_masked_dgrad(dy, w, counts, *, out=None):
    """dx[E, Mmax, K]: dx[e, :counts[e]] = dy[e, :counts[e]] @ w[e], rows >= counts[e] zero;
    dy[E, Mmax, N], w[E, N, K]; N, K % 8 == 0; sm_90a."""
    return _launch("tkreg.grouped_gemm_masked_dgrad", out, dy, w, counts, check_counts, dy.shape[1])


def grouped_gemm_wgrad(dy, x, group_offsets, *, main_grad=None, out=None):
    """dw[E, N, K] (E = len(group_offsets) - 1): dw[e] = dy[lo:hi]^T @ x[lo:hi] over expert e's rows
    lo, hi = offsets[e], offsets[e+1] (any non-decreasing offsets in [0, M]), fp32 accumulation
    rounded once to dy's dtype, zeros for an empty expert.  With `main_grad` (fp32 [E, N, K]) the
    fp32 product is added there instead (in place) and main_grad is returned.  N, K % 8 == 0; sm_90a."""
    op = "tkreg.grouped_gemm_wgrad"
    if main_grad is not None:
        if out is not None:
            raise ValueError(f"{op}: give `main_grad` (accumulate in place) or `out=`, not both")
        if main_grad.dim() != 3 or main_grad.shape[0] != group_offsets.shape[0] - 1:
            raise ValueError(f"{op}: `main_grad` must be [E, N, K] with E = len(group_offsets) - 1 = "
                             f"{group_offsets.shape[0] - 1}; got shape {tuple(main_grad.shape)}")
        if compiling():
            graph("tkreg.grouped_gemm_wgrad_accumulate", None, dy, x, group_offsets, main_grad)
            return main_grad
        if checking():
            _check_bounds(op, group_offsets, dy.shape[0])
        OPS["tkreg.grouped_gemm_wgrad_accumulate"](dy, x, group_offsets, main_grad)
        return main_grad
    return _launch(op, out, dy, x, group_offsets, _check_bounds, dy.shape[0])


def grouped_gemm_masked_wgrad(dy, x, counts, *, out=None):
    """dw[E, N, K]: dw[e] = dy[e, :counts[e]]^T @ x[e, :counts[e]], fp32 accumulation rounded once,
    zeros where counts[e] = 0; dy[E, Mmax, N], x[E, Mmax, K]; N, K % 8 == 0; sm_90a."""
    return _launch("tkreg.grouped_gemm_masked_wgrad", out, dy, x, counts, check_counts, dy.shape[1])


# ---- autograd ---------------------------------------------------------------------------------
def _serves(name: str, dy, n: int, k: int) -> bool:
    """Whether `name` runs a kernel (or, on the CPU with TKREG_FALLBACK=reference, its reference):
    a 16-bit dtype, TMA-loadable rows (N, K % 8 == 0) and a pack for the device's arch."""
    import torch

    from ._route import serves
    if dy.dtype not in (torch.bfloat16, torch.float16) or n % 8 or k % 8:
        return False
    return serves(name, dy)


def _segments(groups, rows: int, masked: bool):
    """[(e, lo, hi)] per expert (host copy of the offsets / counts, clipped as the kernels clip)."""
    vals = [int(v) for v in groups.tolist()]
    if masked:
        return [(e, 0, min(max(c, 0), rows)) for e, c in enumerate(vals)]
    out = []
    for e in range(len(vals) - 1):
        lo = min(max(vals[e], 0), rows)
        out.append((e, lo, min(max(vals[e + 1], lo), rows)))
    return out


def _loop_dgrad(dy, w, groups, masked: bool):
    """torch fallback: per-expert dy @ w[e] in the dtype (torch.matmul), zeros elsewhere."""
    import torch
    dx = torch.zeros(dy.shape[:-1] + (w.shape[2],), dtype=dy.dtype, device=dy.device)
    for e, lo, hi in _segments(groups, dy.shape[-2], masked):
        if hi > lo:
            if masked:
                dx[e, lo:hi] = torch.matmul(dy[e, lo:hi], w[e])
            else:
                dx[lo:hi] = torch.matmul(dy[lo:hi], w[e])
    return dx


def _loop_wgrad(dy, x, groups, masked: bool, main=None):
    """torch fallback: per-expert dy^T @ x (torch.matmul), or its fp32 form added into `main`."""
    import torch
    segs = _segments(groups, dy.shape[-2], masked)
    dw = None if main is not None else torch.zeros(len(segs), dy.shape[-1], x.shape[-1], dtype=dy.dtype,
                                                   device=dy.device)
    for e, lo, hi in segs:
        if hi > lo:
            d, xx = (dy[e, lo:hi], x[e, lo:hi]) if masked else (dy[lo:hi], x[lo:hi])
            if main is not None:
                main[e].add_(torch.matmul(d.t().float(), xx.float()))
            else:
                dw[e] = torch.matmul(d.t(), xx)
    return dw


class GroupedGemmGrad:
    """Autograd of tkreg.grouped_gemm (its spec's `backward`): y rows of e = a rows of e @ b[e]^T
    gives da = tkreg.grouped_gemm_dgrad(dy, b, offsets) (zeros outside every segment), db =
    tkreg.grouped_gemm_wgrad(dy, a, offsets); a weight with an fp32 `main_grad` [E, N, K] (as
    Megatron keeps) gets db added there in fp32 and returns None (eager).  Where no kernel serves
    the device or shape, a per-expert torch.matmul loop with the same transposes."""
    masked = False
    dgrad, wgrad = "tkreg.grouped_gemm_dgrad", "tkreg.grouped_gemm_wgrad"

    @classmethod
    def setup_context(cls, ctx, inputs, output):
        a, b, groups = inputs[:3]
        ctx.save_for_backward(a, b, groups)

    @classmethod
    def backward(cls, ctx, dy):
        from ._route import op
        a, b, groups = ctx.saved_tensors
        dy = dy.contiguous()
        need_a, need_b = tuple(ctx.needs_input_grad)[:2]
        n, k = b.shape[1], b.shape[2]
        da = db = None
        if need_a:
            if _serves(cls.dgrad, dy, n, k):
                da = op(cls.dgrad)(dy, b, groups)
            else:
                da = _loop_dgrad(dy, b, groups, cls.masked)
        if need_b:
            main = getattr(b, "main_grad", None)
            served = _serves(cls.wgrad, dy, n, k)
            if main is not None and served and not cls.masked:
                op("tkreg.grouped_gemm_wgrad_accumulate")(dy, a, groups, main)
            elif main is not None and served:     # masked: no accumulating kernel; add the rounded product
                main.add_(op(cls.wgrad)(dy, a, groups))
            elif main is not None:
                _loop_wgrad(dy, a, groups, cls.masked, main)
            elif served:
                db = op(cls.wgrad)(dy, a, groups)
            else:
                db = _loop_wgrad(dy, a, groups, cls.masked)
        return da, db, None


class GroupedGemmMaskedGrad(GroupedGemmGrad):
    """Autograd of tkreg.grouped_gemm_masked: da = tkreg.grouped_gemm_masked_dgrad (zeros on rows
    >= counts[e]), db = tkreg.grouped_gemm_masked_wgrad; a weight's fp32 `main_grad` gets db (rounded
    to the dtype first: no accumulating masked kernel) added; the same torch fallback."""
    masked = True
    dgrad, wgrad = "tkreg.grouped_gemm_masked_dgrad", "tkreg.grouped_gemm_masked_wgrad"
