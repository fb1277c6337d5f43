"""Typed functions for the GEMM family: gemm (differentiable: GemmGrad) and its gradients, fp8_gemm
and the MoE grouped GEMMs.

Grouped layouts, contiguous: rows of expert e are a[offsets[e]:offsets[e + 1]]; every non-empty
segment starts at a multiple of 128 rows (what tkreg's routing pads to; DeepGEMM's contiguous
alignment), offsets[E] <= M.  masked: the first counts[e] rows of a[e] (0 <= counts[e] <= Mmax).
Output rows outside every segment / at or past counts[e] are left untouched (pass `out=` to keep
their contents).  The offsets / counts stay on the GPU (CUDA-graph safe); the launcher checks their
shape and dtype.  Their values are checked only with TKREG_CHECK_INDICES=1 (a device-to-host copy
per call; skipped under torch.compile and CUDA-graph capture); out-of-range values never read or
write out of bounds, they give wrong rows.
"""
from __future__ import annotations

from ..runtime import OPS
from ..reference.gemm import SWIGLU_GROUP, pack_gate_up as _pack, unpack_gate_up as _unpack
from ._route import checking, compiling, graph


def gemm(a, b, bias=None, *, out=None):
    """`a[M, K] @ b[N, K]^T (+ bias[N])`, bf16 or fp16 with fp32 accumulation (K, N % 8 == 0)."""
    if compiling():
        return graph("tkreg.gemm", out, a, b, bias)
    return OPS["tkreg.gemm"](a, b, bias, out)


def gemm_dgrad(dy, w, *, out=None):
    """A Linear layer's input gradient: dx[M, K] = dy[M, N] @ w[N, K] (w as stored), bf16/fp16 with
    fp32 accumulation, dy's dtype (N, K % 8 == 0; sm_90a, elsewhere NoKernelError)."""
    if compiling():
        return graph("tkreg.gemm_dgrad", out, dy, w)
    return OPS["tkreg.gemm_dgrad"](dy, w, out)


def gemm_wgrad(dy, x, *, main_grad=None, out=None):
    """A Linear layer's weight gradient, reduced over the M tokens: dw[N, K] = dy[M, N]^T @ x[M, K],
    fp32 accumulation, in dy's dtype; with `main_grad` (fp32 [N, K], Megatron's main grad) the
    product is added there in fp32 instead (in place) and main_grad is returned.  N, K % 8 == 0;
    sm_90a (elsewhere NoKernelError)."""
    if main_grad is not None:
        if out is not None:
            raise ValueError("tkreg.gemm_wgrad: give `main_grad` (accumulate in place) or `out=`, not both")
        if compiling():
            graph("tkreg.gemm_wgrad_accumulate", None, dy, x, main_grad)
        else:
            OPS["tkreg.gemm_wgrad_accumulate"](dy, x, main_grad)
        return main_grad
    if compiling():
        return graph("tkreg.gemm_wgrad", out, dy, x)
    return OPS["tkreg.gemm_wgrad"](dy, x, out)


def _kernels_serve(name: str, dy, other) -> bool:
    """Whether `name` runs a kernel (or, on the CPU with TKREG_FALLBACK=reference, its reference)
    for dy[M, N] and other[., K]: a 16-bit dtype, TMA-loadable rows and a pack for the device."""
    import torch

    from ._route import serves
    if dy.dtype not in (torch.bfloat16, torch.float16) or dy.shape[1] % 8 or other.shape[1] % 8:
        return False
    return serves(name, dy)


class GemmGrad:
    """Autograd of tkreg.gemm (its spec names this class as `backward`): y = a @ b^T (+ bias) gives
    da = dy @ b (tkreg.gemm_dgrad), db = dy^T @ a (tkreg.gemm_wgrad), dbias = dy summed over the
    rows (fp32, rounded once).  A weight with a `main_grad` (fp32, as Megatron keeps) gets db added
    there and returns None (eager; a compiled graph sees no attribute and returns db).  Where no
    kernel serves the device or shape, torch.matmul with the same transposes (fp32 into main_grad)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b = inputs[:2]
        ctx.save_for_backward(a, b)
        ctx.has_bias = len(inputs) > 2 and inputs[2] is not None

    @staticmethod
    def backward(ctx, dy):
        import torch

        from ._route import op
        a, b = ctx.saved_tensors
        dy = dy.contiguous()
        needs = tuple(ctx.needs_input_grad)    # (a, b) when the call left bias out, else (a, b, bias)
        need_a, need_b, need_bias = (needs + (False,))[:3]
        da = db = dbias = None
        if need_a:
            if _kernels_serve("tkreg.gemm_dgrad", dy, b):
                da = op("tkreg.gemm_dgrad")(dy, b)
            else:
                da = torch.matmul(dy, b)
        if need_b:
            main = getattr(b, "main_grad", None)
            served = _kernels_serve("tkreg.gemm_wgrad", dy, a)
            if main is not None and served:
                op("tkreg.gemm_wgrad_accumulate")(dy, a, main)
            elif main is not None:
                main.add_(torch.matmul(dy.t().float(), a.float()))
            elif served:
                db = op("tkreg.gemm_wgrad")(dy, a)
            else:
                db = torch.matmul(dy.t(), a)
        if ctx.has_bias and need_bias:
            dbias = dy.sum(0, dtype=torch.float32).to(dy.dtype)
        return (da, db, dbias)[:len(needs)]


def pack_gate_up(gate_w, up_w):
    """The gate_up weight `gemm_swiglu` reads, packed once (at load time): gate_w[I, K] and
    up_w[I, K] -> w_packed[2I, K], rows of gate and up alternating in groups of 8
    (`tkreg.reference.gemm.SWIGLU_GROUP`; `unpack_gate_up` inverts it).  Any device; a new tensor."""
    op = "tkreg.pack_gate_up"
    if gate_w.dim() != 2 or tuple(up_w.shape) != tuple(gate_w.shape):
        raise ValueError(f"{op}: `gate_w` and `up_w` must both be [I, K]; got {tuple(gate_w.shape)} and "
                         f"{tuple(up_w.shape)}")
    if up_w.dtype != gate_w.dtype:
        raise TypeError(f"{op}: `up_w` has dtype {up_w.dtype}; expected {gate_w.dtype} (gate_w's)")
    if gate_w.shape[0] % SWIGLU_GROUP:
        raise ValueError(f"{op}: I = {gate_w.shape[0]} rows; expected a multiple of {SWIGLU_GROUP} "
                         "(gate and up interleave in groups of that many rows)")
    return _pack(gate_w, up_w)


def unpack_gate_up(w_packed):
    """`pack_gate_up`'s inverse: w_packed[2I, K] -> (gate_w[I, K], up_w[I, K]), views."""
    return _unpack(w_packed)


def gemm_swiglu(a, w_packed, *, out=None):
    """out[M, I] = silu(a @ gate^T) * (a @ up^T) (an MLP's gate_up projection and activation in one
    kernel, I columns written): a[M, K] bf16/fp16, w_packed[2I, K] from `pack_gate_up`; each product
    rounded to a's dtype, then silu_and_mul's fp32 math, rounded once: bit for bit
    `silu_and_mul(gemm(a, cat([gate_w, up_w])))`.  K % 8 == 0, I % 8 == 0; sm_90a (elsewhere
    NoKernelError: use gemm + silu_and_mul)."""
    if compiling():
        return graph("tkreg.gemm_swiglu", out, a, w_packed)
    return OPS["tkreg.gemm_swiglu"](a, w_packed, out)


def fp8_gemm(a, a_scale, b, b_scale, *, out=None):
    """Block-scaled FP8 GEMM -> bf16 (DeepSeek-V3 / DeepGEMM): a[M, K], b[N, K] e4m3;
    a_scale[M, K/128] fp32 per 1x128 group, row-major or DeepGEMM's column-major view (what
    `per_token_group_quant_fp8_colmajor` returns); b_scale[N/128, K/128] fp32 per 128x128 block."""
    if compiling():
        return graph("tkreg.fp8_gemm", out, a, a_scale, b, b_scale)
    return OPS["tkreg.fp8_gemm"](a, a_scale, b, b_scale, out)



ALIGN = 128


def check_offsets(op: str, group_offsets, m: int) -> None:
    """Monotone, within [0, M], every non-empty segment starting at a multiple of 128."""
    offs = [int(x) for x in group_offsets.tolist()]
    for e in range(len(offs) - 1):
        if offs[e + 1] < offs[e]:
            raise ValueError(f"{op}: `group_offsets` must be non-decreasing; offsets[{e}] = {offs[e]} > "
                             f"offsets[{e + 1}] = {offs[e + 1]}")
        if offs[e + 1] > offs[e] and offs[e] % ALIGN:
            raise ValueError(f"{op}: expert {e}'s segment starts at row {offs[e]}, not a multiple of {ALIGN} "
                             "(pad each expert's rows to 128, as the routing ops do)")
    if offs and (offs[0] < 0 or offs[-1] > m):
        raise ValueError(f"{op}: `group_offsets` must lie in [0, {m}] (a's rows); got offsets[0] = {offs[0]}, "
                         f"offsets[E] = {offs[-1]}")


def check_counts(op: str, counts, mmax: int) -> None:
    bad = [(e, int(c)) for e, c in enumerate(counts.tolist()) if not 0 <= int(c) <= mmax]
    if bad:
        e, c = bad[0]
        raise ValueError(f"{op}: `counts` must lie in [0, Mmax = {mmax}]; counts[{e}] = {c} "
                         f"({len(bad)} expert(s) out of range)")


def _checked(kind: str, op: str, groups, rows: int) -> None:
    if checking():
        (check_offsets if kind == "offsets" else check_counts)(op, groups, rows)


def grouped_gemm(a, b, group_offsets, *, out=None):
    """out[M, N] = per expert e: a[offsets[e]:offsets[e+1]] @ b[e]^T; a[M, K] bf16/fp16, b[E, N, K],
    group_offsets[E + 1] int32 (K, N % 8 == 0)."""
    if compiling():
        return graph("tkreg.grouped_gemm", out, a, b, group_offsets)
    _checked("offsets", "tkreg.grouped_gemm", group_offsets, a.shape[0])
    return OPS["tkreg.grouped_gemm"](a, b, group_offsets, out)


def grouped_gemm_masked(a, b, counts, *, out=None):
    """out[E, Mmax, N]: out[e, :counts[e]] = a[e, :counts[e]] @ b[e]^T; a[E, Mmax, K] bf16/fp16,
    b[E, N, K], counts[E] int32 on the device."""
    if compiling():
        return graph("tkreg.grouped_gemm_masked", out, a, b, counts)
    _checked("counts", "tkreg.grouped_gemm_masked", counts, a.shape[1])
    return OPS["tkreg.grouped_gemm_masked"](a, b, counts, out)


def fp8_grouped_gemm(a, a_scale, b, b_scale, group_offsets, *, out=None):
    """Block-scaled FP8 contiguous grouped GEMM -> bf16: a[M, K] e4m3 with a_scale[M, K/128] fp32
    (row-major or the column-major view `per_token_group_quant_fp8(column_major_scales=True)`
    returns), b[E, N, K] e4m3 with b_scale[E, N/128, K/128] fp32, group_offsets[E + 1] int32."""
    if compiling():
        return graph("tkreg.fp8_grouped_gemm", out, a, a_scale, b, b_scale, group_offsets)
    _checked("offsets", "tkreg.fp8_grouped_gemm", group_offsets, a.shape[0])
    return OPS["tkreg.fp8_grouped_gemm"](a, a_scale, b, b_scale, group_offsets, out)


def fp8_grouped_gemm_masked(a, a_scale, b, b_scale, counts, *, out=None):
    """Block-scaled FP8 masked grouped GEMM -> bf16: a[E, Mmax, K] e4m3, a_scale[E, Mmax, K/128]
    fp32 (any strides: a [E * Mmax, K/128] column-major view reshaped works), b[E, N, K] e4m3,
    b_scale[E, N/128, K/128], counts[E] int32."""
    if compiling():
        return graph("tkreg.fp8_grouped_gemm_masked", out, a, a_scale, b, b_scale, counts)
    _checked("counts", "tkreg.fp8_grouped_gemm_masked", counts, a.shape[1])
    return OPS["tkreg.fp8_grouped_gemm_masked"](a, a_scale, b, b_scale, counts, out)
