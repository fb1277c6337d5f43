"""MXFP4 (OCP e2m1 codes, E8M0 scales) per 32-element token group, and its cast back to bf16.

Quant: a warp a row, a group is 4 lanes (8 values each, two shfl_xor for its amax), the scale
2^ceil(log2(amax / 6)) as a biased exponent byte, and each e2m1 code the min of three
magic-rounded lines, two values at a time in fp16x2 (or bf16x2 as loaded): equal to comparing
against the RNE midpoints, TileKernels' bit-level convert (tests/tkreg/ops/test_quant_cpu.py checks
both).  Dequant: PRMT table lookups and a packed bf16 multiply by the power-of-two scale.
"""
import struct

from kernels_src.common import DTYPES, raster as grid_order
from tkreg.reference.quant import FP4_AMAX_FLOOR as FP4_FLOOR   # the smallest scale is 2^-126
from tkreg.spec import OpSpec, Tensor, Variant

from .device import BF16X2, NV, PRELUDE_CS, REFERENCE, pow2, prmt, ue8m0_exponent, word

FP4_FLOOR_BITS = struct.unpack("<I", struct.pack("<f", FP4_FLOOR))[0]   # 0x01C00000
THREADS, UNROLL = 128, 4                # quant: a CTA, SPAN-element pieces a warp covers a row
SPAN = 32 * NV                          # elements a warp covers a load


def _e2m1_fp16x2(T, unroll, store):
    """lines(g, row, by, tx, q, s, am, bt, wa): the codes of a lane's unroll x 8 values via fp16x2.

    e2m1 code magnitude = RNE(l(|y|)) with l = min(2a, a + 2, a / 2 + 4), the piecewise-linear map
    of the e2m1 grid (step 0.5 below 2, 1 in [2, 4), 2 from 4) onto 0..7; RNE is monotone, so it
    is the min of the three lines each rounded by a magic add.  y = x * 2^-e is exact in fp16 (8 or
    11 significant bits; only |y| < 2^-14, far below the first midpoint 0.25, can round, and keeps
    its sign), a line is one fma.rn.f16x2 with the 1024 magic add (fp16's step is 1 in [1024,
    2048)), then two min.f16x2, and the sign is the fp16 sign bit.  Exact for |y| <= 6, which the
    scale guarantees.  (The same lines in fp32 were issue-bound: 78% -> 82% of copy.)"""
    nv, span, U = NV, SPAN, T.uint32

    def hf(a, b, c):
        return T.call_extern("uint32", "tk_hfma2", a, U(b), U(c))

    @T.macro
    def lines(g, row, by, tx, q, s, am, bt, wa):
        for u in T.unroll(unroll):
            am[u] = T.float32(0)
            for v in T.unroll(nv):
                am[u] = T.max(am[u], T.abs(T.cast(g[u * nv + v], "float32")))
            am[u] = T.max(am[u], T.shfl_xor(am[u], 2))
            am[u] = T.max(am[u], T.shfl_xor(am[u], 1))
        for u in T.unroll(unroll):
            col = (by * unroll + u) * span + (tx % 32) * nv
            sf = T.ieee_fdiv(T.max(am[u], T.float32(FP4_FLOOR)), T.float32(6.0))
            e = ue8m0_exponent(T, sf)
            inv = pow2(T, U(254) - e)
            for p in T.unroll(4):      # values 2p, 2p + 1: fp16 halves of h2
                h2 = T.call_extern("uint32", "tk_f16x2_rn", T.cast(g[u * nv + 2 * p], "float32") * inv,
                                   T.cast(g[u * nv + 2 * p + 1], "float32") * inv)
                a2 = h2 & U(0x7FFF7FFF)
                # 2a + 1024, a + 1026, a / 2 + 1028: the code is the min's low 3 mantissa bits
                m = T.call_extern("uint32", "tk_hmin2", T.call_extern("uint32", "tk_hmin2",
                                  hf(a2, 0x40004000, 0x64006400), hf(a2, 0x3C003C00, 0x64026402)),
                                  hf(a2, 0x38003800, 0x64046404))
                c = (m & U(0x00070007)) | ((h2 >> U(12)) & U(0x00080008))
                bt[p] = c | (c >> U(12))           # low byte: code 2p | code 2p + 1 << 4
            pk = prmt(T, prmt(T, bt[0], bt[1], 0x0040), prmt(T, bt[2], bt[3], 0x0040), 0x5410)
            store(row, col, tx, q, s, pk, e)

    return lines


def _e2m1_bf16x2(T, unroll, store):
    """lines(g, row, by, tx, q, s, am, bt, wa): the same codes on the bf16x2 words as loaded (440
    instead of 720 SASS instructions for a lane's 32 values).

    amax by max.bf16x2 over |x| (sign bit cleared), then over the halves as integers (bit patterns
    of non-negative floats order as their values); the scale exponent from the amax bits without a
    division (fl(a / 6) is a power of two only when a / 6 is, so ceil(log2(a / 6)) = E - 2, plus 1
    when a's mantissa exceeds 1.5: ((bits + 0x3FFFFF) >> 23) - 2, equal to the fp32 rule for every
    bf16 amax); each line one fma.rn.bf16x2 of |x| by 2^-e x (2, 1, 1/2) plus the magic 128 (bf16's
    step is 1 in [128, 256)): the product is exact inside the FMA, so the one rounding is the
    line's RNE.  Codes: the min minus 128 in each half, the sign bit of x shifted in."""
    nv, span, U = NV, SPAN, T.uint32

    def b2(op, *a):                # BF16X2's packed bf16 FMA / min / max
        return T.call_extern("uint32", "tk_b" + op, *a)

    @T.macro
    def lines(g, row, by, tx, q, s, am, bt, wa):
        for u in T.unroll(unroll):
            for p in T.unroll(4):
                wa[u * 4 + p] = word(T, g, u * nv + 2 * p) & U(0x7FFF7FFF)
            m4 = b2("max2", b2("max2", wa[u * 4], wa[u * 4 + 1]), b2("max2", wa[u * 4 + 2], wa[u * 4 + 3]))
            m1 = T.max(m4 & U(0xFFFF), m4 >> U(16))
            m2 = T.max(m1, T.shfl_xor(m1, 2))
            am[u] = T.max(m2, T.shfl_xor(m2, 1)) << U(16)   # fp32 bits of the group's amax
        for u in T.unroll(unroll):
            col = (by * unroll + u) * span + (tx % 32) * nv
            # int32 (every value here is < 2^31): the simplifier turns compares into subtractions
            # whose negative literals a uint32 expression rejects
            fb = T.max(T.reinterpret(am[u], "int32"), FP4_FLOOR_BITS)
            e = T.if_then_else(fb >= 0x7F800000, 255, ((fb + 0x3FFFFF) >> 23) - 2)
            k2 = T.reinterpret((255 - e) * 0x00800080, "uint32")          # 2^-e x 2, both halves
            k1 = T.reinterpret((254 - e) * 0x00800080, "uint32")
            kh = T.reinterpret(T.if_then_else(e >= 253, 0x00400040, (253 - e) * 0x00800080), "uint32")   # subnormal at 253
            for h in T.unroll(2):        # values 4h .. 4h + 3 -> 16 bits of codes
                for r in T.unroll(2):
                    a2 = wa[u * 4 + 2 * h + r]
                    m = b2("min2", b2("min2", b2("fma2", a2, k2, U(0x43004300)), b2("fma2", a2, k1, U(0x43024302))),
                           b2("fma2", a2, kh, U(0x43044304)))
                    bt[r] = m - U(0x43004300) + ((word(T, g, u * nv + 4 * h + 2 * r) >> U(12)) & U(0x00080008))
                z = bt[0] + (bt[1] << U(8))                  # codes at bits 0, 16, 8, 24
                bt[2 + h] = z | (z >> U(12))
            store(row, col, tx, q, s, prmt(T, bt[2], bt[3], 0x5410), e)

    return lines


def fp4_quant_kernel(dtype: str, row_tiles: int = 1, evict_first: int = 0, packed: int = 0):
    """x[M, K] -> q[M, K // 2] uint8 (2 codes a byte), s[M, K // 32] uint8 E8M0 (K % 32 == 0).

    A warp a row, 128 threads, 4 x 8 values a lane.  row_tiles = 2: two row tiles a CTA (tile t:
    rows (bx * 2 + t) * warps + warp), the second's loads issued before the first is computed and
    stored.  evict_first: 4-byte code stores by st.global.cs.  packed (bf16 only): the e2m1 lines
    on bf16x2 words (_e2m1_bf16x2), else through fp16x2 (_e2m1_fp16x2).
    """
    import tilelang.language as T

    assert row_tiles in (1, 2)
    assert not packed or dtype == "bfloat16"
    threads, unroll, nv, span = THREADS, UNROLL, NV, SPAN
    M, K = T.dynamic("M"), T.dynamic("K")
    warps = threads // 32

    @T.macro
    def load(x, g, row, by, tx):
        for u in T.unroll(unroll):
            col = (by * unroll + u) * span + (tx % 32) * nv
            if row < M and col < K:
                for v in T.vectorized(nv):
                    g[u * nv + v] = x[row, col + v]
            else:
                for v in T.vectorized(nv):
                    g[u * nv + v] = T.cast(0, dtype)

    @T.macro
    def store(row, col, tx, q, s, pk, e):
        # a lane's 8 codes (4 bytes) and, from one lane of the group's four, its E8M0 scale
        if row < M and col < K:
            if evict_first:
                T.call_extern("handle", "tk_st4_cs", T.address_of(q[row, col // 2]), pk)
            else:
                T.stg32(q[row, col // 2], pk)
            if tx % 4 == 0:
                s[row, col // 32] = T.cast(e, "uint8")

    lines = (_e2m1_bf16x2 if packed else _e2m1_fp16x2)(T, unroll, store)

    @T.prim_func
    def fp4_quant(x: T.Tensor((M, K), dtype), q: T.Tensor((M, K // 2), "uint8"),
                  s: T.Tensor((M, K // 32), "uint8")):
        with T.Kernel(T.ceildiv(M, warps * row_tiles), T.ceildiv(K, span * unroll), threads=threads,
                      prelude=PRELUDE_CS + BF16X2 if packed else PRELUDE_CS) as (bx, by):
            T.assume(K % 32 == 0)
            tx = T.get_thread_binding()
            gA = T.alloc_local((unroll * nv,), dtype)
            gB = T.alloc_local((unroll * nv,), dtype)
            am = T.alloc_local((unroll,), "uint32" if packed else "float32")
            bt = T.alloc_local((4,), "uint32")
            wa = T.alloc_local((unroll * 4,), "uint32") if packed else None
            w = tx // 32
            load(x, gA, (bx * row_tiles) * warps + w, by, tx)
            if row_tiles == 1:
                lines(gA, bx * warps + w, by, tx, q, s, am, bt, wa)
            else:                          # tile 1's loads go out before tile 0 is computed and stored
                load(x, gB, (bx * 2 + 1) * warps + w, by, tx)
                lines(gA, (bx * 2) * warps + w, by, tx, q, s, am, bt, wa)
                lines(gB, (bx * 2 + 1) * warps + w, by, tx, q, s, am, bt, wa)

    return fp4_quant


def fp4_dequant_kernel():
    """q[M, K // 2] uint8, s[M, K // 32] uint8 -> out[M, K] bf16 (8 values a lane, 16-byte stores).

    8 codes -> 4 bf16x2 words by PRMT: the two bytes of each e2m1 magnitude in bf16 are 8-entry
    byte tables indexed by the 3 magnitude bits, one more PRMT moves the sign bits, then
    mul.rn.bf16x2 by 2^(s - 127) (exact: a 2-significant-bit value times a power of two rounds
    nowhere, as the reference's fp32 product and bf16 rounding).  ~19 instructions per 8 values
    (was ~100): 59% -> 88% of copy; 8 independent 4-byte loads in flight a lane, evict-first
    stores, column blocks fastest on one flat grid.
    """
    import tilelang.language as T

    threads, unroll, nv, span = 256, 8, NV, SPAN
    M, H = T.dynamic("M"), T.dynamic("H")
    K = 2 * H
    warps = threads // 32
    U = T.uint32
    grid, unpack = grid_order(T, "flat", T.ceildiv(M, warps), T.ceildiv(K, span * unroll))

    @T.prim_func
    def fp4_dequant(q: T.Tensor((M, H), "uint8"), s: T.Tensor((M, H // 16), "uint8"),
                    out: T.Tensor((M, K), "bfloat16")):
        with T.Kernel(*grid, threads=threads, prelude=PRELUDE_CS) as blk:
            bx, by = unpack(blk)
            T.assume(H % 16 == 0)
            tx = T.get_thread_binding()
            row = bx * warps + tx // 32
            w = T.alloc_local((unroll,), "uint32")
            sb = T.alloc_local((unroll,), "uint32")
            o = T.alloc_local((4,), "uint32")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < M and col < K:
                    w[u] = T.reinterpret(T.ldg32(q[row, col // 2]), "uint32")
                    sb[u] = T.cast(s[row, col // 32], "uint32")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < M and col < K:
                    m = w[u] & U(0x77777777)
                    hb0 = prmt(T, U(0x3F3F3F00), U(0x40404040), m)            # high bytes, codes 0-3
                    hb1 = prmt(T, U(0x3F3F3F00), U(0x40404040), m >> U(16))   # codes 4-7
                    lb0 = prmt(T, U(0xC0800000), U(0xC0804000), m)            # low bytes
                    lb1 = prmt(T, U(0xC0800000), U(0xC0804000), m >> U(16))
                    w4 = w[u] << U(4)
                    hs0 = hb0 | (prmt(T, w4, w[u], 0x5140) & U(0x80808080))   # sign bits
                    hs1 = hb1 | (prmt(T, w4, w[u], 0x7362) & U(0x80808080))
                    sc2 = (sb[u] << U(7)) | (sb[u] << U(23))                  # 2^(s - 127) twice in bf16
                    o[0] = T.call_extern("uint32", "tk_bmul2", prmt(T, lb0, hs0, 0x5140), sc2)
                    o[1] = T.call_extern("uint32", "tk_bmul2", prmt(T, lb0, hs0, 0x7362), sc2)
                    o[2] = T.call_extern("uint32", "tk_bmul2", prmt(T, lb1, hs1, 0x5140), sc2)
                    o[3] = T.call_extern("uint32", "tk_bmul2", prmt(T, lb1, hs1, 0x7362), sc2)
                    T.call_extern("handle", "tk_st16_cs", T.address_of(out[row, col]), T.address_of(o[0]))

    return fp4_dequant


SPECS = (
    OpSpec(
        name="tkreg.per_token_group_quant_fp4",
        doc="x[M, K] -> q[M, K // 2] uint8 (OCP MXFP4 e2m1, RNE, two a byte, low nibble first), "
            "s[M, K // 32] uint8 E8M0 = 2^ceil(log2(amax / 6)) (K % 32 == 0)",
        tensors=(Tensor("x", ("M", "K"), dtypes=DTYPES), Tensor("q", ("M", "K // 2"), dtype="uint8", role="output"),
                 Tensor("s", ("M", "K // 32"), dtype="uint8", role="output")),
        factory=fp4_quant_kernel,
        # bf16: the lines on packed bf16x2 (16384 x 7168: 0.86 -> 0.96 of a same-size copy), two
        # tiles a CTA from 2048 rows, evict-first stores throughout.  fp16: two row tiles a CTA +
        # evict-first from 4096 rows (at 1024 rows two tiles a CTA halve too few CTAs).
        variants=(Variant(dict(dtype="bfloat16", packed=1, row_tiles=2, evict_first=1),
                          rule="K % 32 == 0 and M >= 2048", priority=1),
                  Variant(dict(dtype="bfloat16", packed=1, evict_first=1), rule="K % 32 == 0"),
                  Variant(dict(dtype="float16", row_tiles=2, evict_first=1),
                          rule="K % 32 == 0 and M >= 4096", priority=1),
                  Variant(dict(dtype="float16"), rule="K % 32 == 0")),
        reference=REFERENCE + "per_token_group_quant_fp4"),
    OpSpec(
        name="tkreg.per_token_group_dequant_fp4",
        doc="q[M, K // 2] uint8 e2m1 pairs, s[M, K // 32] uint8 E8M0 -> bf16 (exact)",
        tensors=(Tensor("q", ("M", "H"), dtypes=("uint8",)),
                 Tensor("s", ("M", "H // 16"), dtype="uint8"),
                 Tensor("out", ("M", "2 * H"), dtype="bfloat16", role="output")),
        factory=fp4_dequant_kernel, variants=(Variant({}, rule="H % 16 == 0"),),
        reference=REFERENCE + "per_token_group_dequant_fp4"),
)
