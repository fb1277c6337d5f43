"""RMSNorm (and its residual-add form) with the per-token-group FP8 cast of its output in the same
kernel: the activations of an FP8 GEMM that follows a norm (DeepSeek-V3's qkv and gate_up inputs).

    rms_norm_quant_fp8(x, weight, eps)                 -> q[M, N] e4m3, s[M, N // 128] fp32
    fused_add_rms_norm_quant_fp8(x, residual, weight)  -> residual += x (rounded, in place); q, s

y = bf16(x * rsqrt(mean(x^2) + eps) * w) is rounded to x's dtype exactly as tkreg.rms_norm does,
then quantized from that rounded value by the per_token_group_quant_fp8 rule (device.py), so the
op is rms_norm followed by per_token_group_quant_fp8 with the normed row never leaving registers
(3 bytes an element written instead of 2 + 2 + 1 and a second launch).

Resident rows, one CTA a row: each thread holds `max_n / (8 * threads)` 16-byte slots of the row
(and of the weight, loaded before the reduction's barrier).  The layout is tkreg.rms_norm's own
(kernels_src/norm/forward.py: a thread's slots at columns i * 8 * threads + 8 * tx, its squares
summed in slot order, then the warp shuffles and one shared slot a warp), so the sums match where
that kernel runs the same layout.  A 128-column group is one 16-lane half-warp's slot: its amax is
four shfl_xor, as in fp8_group.py.  N % 128 == 0, N <= MAX_N (bf16).
"""
from typing import NamedTuple

from kernels_src.common import FP8, SCALE_GROUP
from kernels_src.norm.forward import EPS
from tkreg.spec import OpSpec, Tensor, Variant

from .device import NV, REFERENCE, UE8M0, scale_macro


class Range(NamedTuple):
    """Rows lo < N <= hi held in registers by `threads` threads a CTA (hi / (8 * threads) slots)."""
    lo: int
    hi: int
    threads: int


# tkreg.rms_norm's thread counts for these N (its two-pass / resident kernels), 1-8 slots a thread.
RANGES = (Range(0, 2048, 256), Range(2048, 4096, 128), Range(4096, 8192, 256), Range(8192, 16384, 256))
MAX_N = RANGES[-1].hi
DTYPE = "bfloat16"


def norm_quant_kernel(dtype: str, threads: int, max_n: int, fused: int = 0):
    """rms_norm (+ residual add) -> per-token-group e4m3 codes and fp32 scales of the rounded output."""
    import tilelang.language as T

    scale_of = scale_macro(T)
    M, N = T.dynamic("M"), T.dynamic("N")
    nv, warps, f32 = NV, threads // 32, "float32"
    chunk = threads * nv                     # columns one slot of every thread covers
    slots = max_n // chunk

    @T.macro
    def run(x, residual, weight, q, s, eps, ue8m0):
        with T.Kernel(M, threads=threads) as row:
            T.assume(N % SCALE_GROUP == 0)
            tx = T.get_thread_binding()
            red = T.alloc_shared((warps,), f32)
            a = T.alloc_local((slots, nv), dtype)
            b = T.alloc_local((slots, nv), dtype)
            w = T.alloc_local((slots, nv), dtype)
            ql = T.alloc_local((nv,), FP8)
            acc = T.alloc_local((1,), f32)
            amax = T.alloc_local((slots,), f32)
            sf = T.alloc_local((slots,), f32)
            inv = T.alloc_local((slots,), f32)
            for i in T.unroll(slots):            # every load first: the row (+ residual), then the weight
                if i * chunk + tx * nv < N:
                    for v in T.vectorized(nv):
                        a[i, v] = x[row, i * chunk + tx * nv + v]
                    if fused:
                        for v in T.vectorized(nv):
                            b[i, v] = residual[row, i * chunk + tx * nv + v]
                else:
                    for v in T.vectorized(nv):
                        a[i, v] = T.cast(0, dtype)
            for i in T.unroll(slots):
                if i * chunk + tx * nv < N:
                    for v in T.vectorized(nv):
                        w[i, v] = weight[i * chunk + tx * nv + v]
            acc[0] = T.float32(0)
            for i in T.unroll(slots):
                if i * chunk + tx * nv < N:
                    if fused:                    # the rounded sum is the new residual and the normed row
                        for v in T.unroll(nv):
                            a[i, v] = T.cast(T.cast(a[i, v], f32) + T.cast(b[i, v], f32), dtype)
                        for v in T.vectorized(nv):
                            residual[row, i * chunk + tx * nv + v] = a[i, v]
                    for v in T.unroll(nv):
                        acc[0] = acc[0] + T.cast(a[i, v], f32) * T.cast(a[i, v], f32)
            for k in T.unroll(5):
                acc[0] = acc[0] + T.shfl_xor(acc[0], 16 >> k)
            if tx % 32 == 0:
                red[tx // 32] = acc[0]
            T.sync_threads()
            acc[0] = T.float32(0)
            for i in T.unroll(warps):
                acc[0] = acc[0] + red[i]
            r = T.rsqrt(acc[0] / T.cast(N, f32) + eps)
            for i in T.unroll(slots):            # y rounded to the dtype, then its group amax
                amax[i] = T.float32(0)
                for v in T.unroll(nv):
                    a[i, v] = T.cast(T.cast(a[i, v], f32) * r * T.cast(w[i, v], f32), dtype)
                    amax[i] = T.max(amax[i], T.abs(T.cast(a[i, v], f32)))
                for o in T.unroll(4):            # the 16 lanes of a group: xor 8, 4, 2, 1
                    amax[i] = T.max(amax[i], T.shfl_xor(amax[i], 8 >> o))
            for i in T.unroll(slots):
                scale_of(amax, i, ue8m0, sf, inv)
                for v in T.vectorized(nv):
                    ql[v] = T.cast(T.cast(a[i, v], f32) * inv[i], FP8)
                if i * chunk + tx * nv < N:
                    for v in T.vectorized(nv):
                        q[row, i * chunk + tx * nv + v] = ql[v]
                    if tx % 16 == 0:
                        s[row, (i * chunk + tx * nv) // SCALE_GROUP] = sf[i]

    S = (M, N // SCALE_GROUP)
    if fused:
        @T.prim_func
        def fused_add_rms_norm_quant_fp8(x: T.Tensor((M, N), dtype), residual: T.Tensor((M, N), dtype),
                                         weight: T.Tensor((N,), dtype), q: T.Tensor((M, N), FP8),
                                         s: T.Tensor(S, f32), eps: T.float32, ue8m0: T.bool):
            run(x, residual, weight, q, s, eps, ue8m0)
        return fused_add_rms_norm_quant_fp8

    @T.prim_func
    def rms_norm_quant_fp8(x: T.Tensor((M, N), dtype), weight: T.Tensor((N,), dtype), q: T.Tensor((M, N), FP8),
                           s: T.Tensor(S, f32), eps: T.float32, ue8m0: T.bool):
        run(x, None, weight, q, s, eps, ue8m0)
    return rms_norm_quant_fp8


def _variants(fused: int):
    return tuple(Variant(dict(dtype=DTYPE, threads=r.threads, max_n=r.hi, fused=fused),
                         rule=f"N % 128 == 0 and N > {r.lo} and N <= {r.hi}") for r in RANGES)


def _spec(name, doc, fused):
    x = Tensor("x", ("M", "N"), dtypes=(DTYPE,))
    res = (Tensor("residual", ("M", "N"), dtype_of="x", role="inplace"),) if fused else ()
    return OpSpec(
        name=name, doc=doc,
        tensors=(x, *res, Tensor("weight", ("N",), dtype_of="x"),
                 Tensor("q", ("M", "N"), dtype=FP8, role="output"),
                 Tensor("s", ("M", "N // 128"), dtype="float32", role="output")),
        scalars=(EPS, UE8M0), factory=norm_quant_kernel, variants=_variants(fused),
        reference=REFERENCE + name.split(".")[1])


SPECS = (
    _spec("tkreg.rms_norm_quant_fp8",
          "x[M, N] bf16, weight[N] -> rms_norm(x) rounded to bf16, quantized per 1x128 group: "
          "q[M, N] e4m3, s[M, N // 128] fp32 (N % 128 == 0, N <= 16384)", 0),
    _spec("tkreg.fused_add_rms_norm_quant_fp8",
          "residual += x in place (rounded); q, s = per-1x128-group e4m3 of rms_norm(residual) rounded to "
          "bf16 (N % 128 == 0, N <= 16384)", 1),
)
