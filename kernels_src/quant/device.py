"""Device pieces the quant kernels share: CUDA preludes (inline PTX, one instruction a helper), the
scale rule, the block-wide amax and the fast-math SwiGLU forms.

Scale rule (exact; tkreg/reference/quant.py states it too), for a group amax and the
format's largest code value qmax (448 for e4m3, 65024 for E5M6):
  a = max(amax, AMAX_FLOOR); s = a / qmax (IEEE fp32 division); q = code(x * fl(qmax / a)).
  ue8m0: s = 2^ceil(log2(a / qmax)), taken from the bits of the rounded quotient (a power of two
  stays, anything above rounds up), and x is multiplied by the exact 2^-e.
"""
from kernels_src.common import AMAX_FLOOR, FP8_MAX, STORE_CS
from tkreg.spec import Scalar

REFERENCE = "tkreg.reference.quant:"
UE8M0 = Scalar("ue8m0", "bool", False)     # power-of-two scales (the rule above)
NV = 8          # values a lane moves a vector: 16 bytes of bf16 / fp16, 8 bytes of fp8, 8 codes

# PRMT (byte permute), RZ / RN fp16x2 conversions, packed bf16 multiply, fp16x2 FMA and min: one
# instruction each (the RN conversion, FMA and min: the FP4 quant's e2m1 lines).
PRELUDE = r"""
__device__ __forceinline__ unsigned tk_prmt(unsigned a, unsigned b, unsigned s) { return __byte_perm(a, b, s); }
__device__ __forceinline__ unsigned tk_f16x2_rz(float lo, float hi) {
  unsigned r; asm("cvt.rz.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
__device__ __forceinline__ unsigned tk_bmul2(unsigned a, unsigned b) {
  unsigned r; asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ unsigned tk_f16x2_rn(float lo, float hi) {
  unsigned r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
__device__ __forceinline__ unsigned tk_hfma2(unsigned a, unsigned b, unsigned c) {
  unsigned r; asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ unsigned tk_hmin2(unsigned a, unsigned b) {
  unsigned r; asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
"""
PRELUDE_CS = PRELUDE + STORE_CS            # with the evict-first stores (kernels_src/common.py)
# Packed bf16x2 FMA, min and max (the bf16 FP4 quant's e2m1 lines and amax): one instruction each.
BF16X2 = r"""
__device__ __forceinline__ unsigned tk_bfma2(unsigned a, unsigned b, unsigned c) {
  unsigned r; asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ unsigned tk_bmin2(unsigned a, unsigned b) {
  unsigned r; asm("min.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ unsigned tk_bmax2(unsigned a, unsigned b) {
  unsigned r; asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
"""
# Four fp32 -> four e4m3 bytes (a lowest) by two cvt.rn.satfinite.e4m3x2: the rounding of
# T.cast(y, FP8) (one F2FP a value plus the PRMTs that pack the bytes), half the instructions.
E4M3X4 = r"""
__device__ __forceinline__ unsigned tk_e4m3x4(float a, float b, float c, float d) {
  unsigned short lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
  return (unsigned)lo | ((unsigned)hi << 16); }
__device__ __forceinline__ void tk_st1(void* dst, unsigned v) { *(unsigned char*)dst = (unsigned char)v; }
__device__ __forceinline__ unsigned tk_hmax2(unsigned a, unsigned b) {
  unsigned r; asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
"""
# sigmoid(g) and silu(g) * u as __fdividef(g, 1 + __expf(-g)) on the flush-to-zero ex2 / rcp: one
# MUFU each, where the non-ftz forms nvcc emits without --use_fast_math add range fix-ups (a
# compare and two predicated multiplies around the ex2, more around the rcp).  Equal wherever
# 1 + e^-g <= 2^126 (g > -87.3); below, both are zeros (their signs may differ).
SILU = r"""
__device__ __forceinline__ float tk_sigmoid(float g) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(g * -1.44269504088896340736f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r; }
__device__ __forceinline__ float tk_silu(float g, float u) { return g * tk_sigmoid(g) * u; }
"""


def prmt(T, a, b, sel):
    """PRMT: the bytes of (b:a) that the selector's four nibbles name."""
    return T.call_extern("uint32", "tk_prmt", a, b, T.uint32(sel) if isinstance(sel, int) else sel)


def word(T, g, i):
    """values i, i + 1 of a bf16 / fp16 array as one 32-bit word (i even)"""
    return T.reinterpret(g[T.Ramp(i, 1, 2)], "uint32")


def silu_mul(T, g, u):
    """Fast-math silu(g) * u in fp32: ex2.approx + rcp.approx, ~5 instructions instead of ~20 (the
    precise form held the FP8 SwiGLU quant ALU-bound at 79% of copy bandwidth); a few fp32 ulps
    from torch's expf and IEEE division."""
    return T.call_extern("float32", "__fdividef", g, T.float32(1) + T.__exp(-g)) * u


def silu_mul_ftz(T, g, u):
    """silu_mul on SILU's flush-to-zero helpers."""
    return T.call_extern("float32", "tk_silu", g, u)


def sigmoid_ftz(T, g):
    return T.call_extern("float32", "tk_sigmoid", g)


def ue8m0_exponent(T, s):
    """The biased exponent of 2^ceil(log2(s)) for a positive normal fp32 s (the carry of s's bits
    less one into the exponent field)."""
    return ((T.reinterpret(s, "uint32") - T.uint32(1)) >> T.uint32(23)) + T.uint32(1)


def pow2(T, e):
    """2^(e - 127) as fp32, e a biased exponent."""
    return T.reinterpret(e << T.uint32(23), "float32")


def scale(T, amax, qmax, ue8m0):
    """(s, 1 / s) from a group amax as expressions (selects on the run-time ue8m0 flag)."""
    a = T.max(amax, T.float32(AMAX_FLOOR))
    sf = T.ieee_fdiv(a, T.float32(qmax))
    e = ue8m0_exponent(T, sf)
    return (T.if_then_else(ue8m0, pow2(T, e), sf),
            T.if_then_else(ue8m0, pow2(T, T.uint32(254) - e), T.ieee_fdiv(T.float32(qmax), a)))


def scale_macro(T):
    """scale_of(amax, u, ue8m0, sf, inv): sf[u], inv[u] from amax[u] for e4m3 codes, as a branch on
    ue8m0 (the FP8 group and block quants; `scale` is the select form the others use)."""
    @T.macro
    def scale_of(amax, u, ue8m0, sf, inv):
        a = T.max(amax[u], T.float32(AMAX_FLOOR))
        sf[u] = T.ieee_fdiv(a, T.float32(FP8_MAX))
        if ue8m0:
            e = ue8m0_exponent(T, sf[u])
            sf[u] = pow2(T, e)
            inv[u] = pow2(T, T.uint32(254) - e)
        else:
            inv[u] = T.ieee_fdiv(T.float32(FP8_MAX), a)

    return scale_of


def block_amax_macro(T, warps):
    """block_amax(x, n, am, red, tx): am[0] = max |x[0 .. n)| over the whole CTA of `warps` warps
    (shuffles in each warp, then one shared-memory slot a warp, `red`, and a barrier)."""
    @T.macro
    def block_amax(x, n, am, red, tx):
        am[0] = T.float32(0)
        for i in T.unroll(n):
            am[0] = T.max(am[0], T.abs(T.cast(x[i], "float32")))
        for o in T.unroll(5):
            am[0] = T.max(am[0], T.shfl_xor(am[0], 16 >> o))
        if tx % 32 == 0:
            red[tx // 32] = am[0]
        T.sync_threads()
        for w in T.unroll(warps):
            am[0] = T.max(am[0], red[w])

    return block_amax
