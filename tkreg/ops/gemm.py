"""Typed functions for the GEMM family: gemm, fp8_gemm and the MoE grouped GEMMs.

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
