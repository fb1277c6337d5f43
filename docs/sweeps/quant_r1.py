"""The kernels kernels_src/quant.py shipped before round 2 was folded (verbatim from commit 7eea321):
cfg 0 of docs/sweeps/quant_r2.py for the three ops round 2 replaced, so that the sweep still builds
what it measured against (per_channel_quant_fp8 73%, silu_and_mul_per_channel_quant_fp8_transpose
61%, per_token_group_quant_fp4 78% of copy; docs/quant-tuning.md).  Record only: no spec uses them.
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from kernels_src.quant import (FP8, AMAX_FLOOR, FP8_MAX, FP4_FLOOR, PRELUDE, _channel_io, _scale, _silu,  # noqa: F401
                               _t4x4)


def _channel_parts(T, dtype, nv, rpt):
    """The per-channel kernels' shared steps: a thread's rpt rows x nv channels loaded (zeros past
    the edges; with silu also the up half), and from the channel amaxes the scales, the fp8
    codes and the scale row."""
    @T.macro
    def load(x, g, h, r0, k0, M, K, silu):
        for i in T.unroll(rpt):
            if r0 + i < M and k0 < K:
                for v in T.vectorized(nv):
                    g[i * nv + v] = x[r0 + i, k0 + v]
                if silu:
                    for v in T.vectorized(nv):
                        h[i * nv + v] = x[r0 + i, K + k0 + v]
            else:
                for v in T.vectorized(nv):
                    g[i * nv + v] = T.cast(0, dtype)
                if silu:
                    for v in T.vectorized(nv):
                        h[i * nv + v] = T.cast(0, dtype)

    @T.macro
    def quantize(am, y, ql, sf, inv, s, bm, k0, first, K, ue8m0, scales=1):
        if scales:          # (the caller may have computed them with its amax reduction)
            for v in T.unroll(nv):
                sf[v] = _scale(T, am[v], AMAX_FLOOR, FP8_MAX, ue8m0)[0]
                inv[v] = _scale(T, am[v], AMAX_FLOOR, FP8_MAX, ue8m0)[1]
        for i in T.unroll(rpt):
            for v in T.vectorized(nv):
                ql[i * nv + v] = T.cast(y[i * nv + v] * inv[v], FP8)
        if first and k0 < K:
            for v in T.vectorized(nv):
                s[bm, k0 + v] = sf[v]

    return load, quantize


def channel_quant_kernel(dtype: str):
    """x[M, K] -> q[M, K] e4m3, s[ceil(M / 128), K] fp32.

    A 256-thread CTA owns 128 tokens x 128 channels, 8 x 8 a thread; the amax is a shfl_xor plus
    an 8 x 128 shared reduction.  Measured (docs/quant-tuning.md) above the warp-local layout of
    the transposed kernel below (73% against 53% of copy): here a warp's rows are 256 contiguous
    bytes.
    """
    import tilelang.language as T

    M, N, K, x_shape = _channel_io(T, 0)
    threads, nv, rpt = 256, 8, 8          # 16 channel chunks x 16 row groups; 8 x 8 per thread
    load, quantize = _channel_parts(T, dtype, nv, rpt)

    @T.prim_func
    def channel_quant(x: T.Tensor(x_shape, dtype), q: T.Tensor((M, K), FP8),
                      s: T.Tensor(((M + 127) // 128, K), "float32"), ue8m0: T.bool):
        with T.Kernel(T.ceildiv(M, 128), T.ceildiv(K, 128), threads=threads) as (bm, bk):
            T.assume(K % 8 == 0)
            tx = T.get_thread_binding()
            cc, rg = tx % 16, tx // 16
            k0 = bk * 128 + cc * nv
            r0 = bm * 128 + rg * rpt
            g = T.alloc_local((rpt * nv,), dtype)
            y = T.alloc_local((rpt * nv,), "float32")
            am = T.alloc_local((nv,), "float32")
            sf = T.alloc_local((nv,), "float32")
            inv = T.alloc_local((nv,), "float32")
            ql = T.alloc_local((rpt * nv,), FP8)
            red = T.alloc_shared((8, 128), "float32")
            load(x, g, None, r0, k0, M, K, 0)
            for v in T.unroll(nv):
                am[v] = T.float32(0)
            for i in T.unroll(rpt):
                for v in T.unroll(nv):
                    y[i * nv + v] = T.cast(g[i * nv + v], "float32")
                    am[v] = T.max(am[v], T.abs(y[i * nv + v]))
            for v in T.unroll(nv):
                am[v] = T.max(am[v], T.shfl_xor(am[v], 16))
            if tx % 32 < 16:
                for v in T.unroll(nv):
                    red[tx // 32, cc * nv + v] = am[v]
            T.sync_threads()
            for v in T.unroll(nv):
                am[v] = red[0, cc * nv + v]
                for w in T.unroll(8):
                    am[v] = T.max(am[v], red[w, cc * nv + v])
                sf[v] = _scale(T, am[v], AMAX_FLOOR, FP8_MAX, ue8m0)[0]
                inv[v] = _scale(T, am[v], AMAX_FLOOR, FP8_MAX, ue8m0)[1]
            quantize(am, y, ql, sf, inv, s, bm, k0, rg == 0, K, ue8m0, 0)
            for i in T.unroll(rpt):
                if r0 + i < M and k0 < K:
                    for v in T.vectorized(nv):
                        q[r0 + i, k0 + v] = ql[i * nv + v]

    return channel_quant


def channel_quant_t_kernel(dtype: str, silu: int = 0):
    """x[M, K] (or [M, 2K] with silu: silu(x[:, :K]) * x[:, K:]) -> q^T[K, M] e4m3, s[ceil(M / 128), K].

    Warp-local, no shared memory and no barrier: a warp owns 128 tokens x 8 * 32 / lr channels,
    lane = one of lr token groups (128 / lr tokens each) x a channel chunk; the 128-token amax is a
    shfl_xor butterfly over the lr lanes, q^T a PRMT byte transpose in registers, and lr lanes store
    128 contiguous bytes of a q^T row.  Against the old 16 KB shared-memory tile: 66% -> 86% of copy
    (plain, lr = 16, 4 warps) and 54% -> 60% (silu: lr = 32, 8 warps, half the registers a lane).
    """
    import tilelang.language as T

    M, N, K, x_shape = _channel_io(T, silu)
    lr, warps = (32, 8) if silu else (16, 4)
    nv, rpt, lc = 8, 128 // lr, 32 // lr
    cw = warps * lc * nv                 # channels per CTA
    nw = rpt // 4                        # q^T words per channel a lane
    load, quantize = _channel_parts(T, dtype, nv, rpt)

    @T.prim_func
    def channel_quant_t(x: T.Tensor(x_shape, dtype), q: T.Tensor((K, M), FP8),
                        s: T.Tensor(((M + 127) // 128, K), "float32"), ue8m0: T.bool):
        with T.Kernel(T.ceildiv(M, 128), T.ceildiv(K, cw), threads=warps * 32, prelude=PRELUDE) as (bm, bk):
            T.assume(N % (16 if silu else 8) == 0)
            tx = T.get_thread_binding()
            lane = tx % 32
            rg = lane % lr
            k0 = bk * cw + ((tx // 32) * lc + lane // lr) * nv
            r0 = bm * 128 + rg * rpt
            g = T.alloc_local((rpt * nv,), dtype)
            h = T.alloc_local((rpt * nv,), dtype)
            y = T.alloc_local((rpt * nv,), "float32")
            am = T.alloc_local((nv,), "float32")
            sf = T.alloc_local((nv,), "float32")
            inv = T.alloc_local((nv,), "float32")
            ql = T.alloc_local((rpt * nv,), FP8)
            load(x, g, h, r0, k0, M, K, silu)
            for v in T.unroll(nv):
                am[v] = T.float32(0)
            for i in T.unroll(rpt):
                for v in T.unroll(nv):
                    gv = T.cast(g[i * nv + v], "float32")
                    y[i * nv + v] = _silu(T, gv, T.cast(h[i * nv + v], "float32")) if silu else gv
                    am[v] = T.max(am[v], T.abs(y[i * nv + v]))
            for o in T.unroll(lr.bit_length() - 1):
                for v in T.unroll(nv):
                    am[v] = T.max(am[v], T.shfl_xor(am[v], 1 << o))
            quantize(am, y, ql, sf, inv, s, bm, k0, rg == 0, K, ue8m0)
            wq = T.alloc_local((rpt * 2,), "uint32")       # token i: channels 0-3, 4-7
            o = T.alloc_local((nv * nw,), "uint32")       # channel v: tokens 4j..4j+3 in word j
            for i in T.unroll(rpt):
                for j in T.unroll(2):
                    wq[i * 2 + j] = T.reinterpret(ql[T.Ramp(i * nv + 4 * j, 1, 4)], "uint32")
            for j in T.unroll(2):
                for hh in T.unroll(nw):
                    t = _t4x4(T, wq, 8 * hh + j, 2)
                    o[(4 * j) * nw + hh] = t[0]
                    o[(4 * j + 1) * nw + hh] = t[1]
                    o[(4 * j + 2) * nw + hh] = t[2]
                    o[(4 * j + 3) * nw + hh] = t[3]
            if k0 < K:
                if M % rpt == 0 and r0 + rpt <= M:
                    for v in T.unroll(nv):
                        if nw == 2:
                            T.stg64(q[k0 + v, r0], o[T.Ramp(v * 2, 1, 2)])
                        else:
                            T.stg32(q[k0 + v, r0], o[v])
                else:
                    for v in T.unroll(nv):
                        for i in T.unroll(rpt):
                            if r0 + i < M:
                                q[k0 + v, r0 + i] = ql[i * nv + v]

    return channel_quant_t


# ---- MXFP4 ---------------------------------------------------------------------------------------
def _e2m1(T, y):
    """e2m1 code of fp32 y (RNE, saturating at 6, sign bit kept; NaN -> 7 | sign) as uint32.

    The code magnitude is RNE(g(|y|)) with g = min(2a, a + 2, a / 2 + 4), the piecewise-linear
    map of the e2m1 grid (step 0.5 below 2, 1 in [2, 4), 2 from 4) onto the integers 0..7; RNE is
    monotone, so it is the min of the three lines each rounded by one fused 2^23 magic add:
    3 FFMA/FADD + 2 FMNMX + 1 LOP3, against ~12 for choosing the line first and 25 for comparing
    |y| with the seven midpoints (tkreg/reference/quant.py's form; the CPU tests check they agree).
    Exact for |y| <= 6 (1 + 2^-24), which the scale guarantees.
    """
    U = T.uint32
    a = T.abs(y)
    big = 8388608.0
    l1 = a * T.float32(2.0) + T.float32(big)
    l2 = a + T.float32(big + 2.0)
    l3 = a * T.float32(0.5) + T.float32(big + 4.0)
    k = T.reinterpret(T.min(T.min(l1, l2), l3), "uint32") & U(7)
    return k | ((T.reinterpret(y, "uint32") >> U(28)) & U(8))


def fp4_quant_kernel(dtype: str, threads: int = 128, unroll: int = 4):
    """x[M, K] -> q[M, K // 2] uint8 (2 codes a byte), s[M, K // 32] uint8 E8M0 (K % 32 == 0).

    ~11 instructions an element with _e2m1's three lines (was ~19): 60% -> 76% of copy.
    """
    import tilelang.language as T

    M, K = T.dynamic("M"), T.dynamic("K")
    warps, nv = threads // 32, 8
    span = 32 * nv                        # elements a warp covers per load

    @T.prim_func
    def fp4_quant(x: T.Tensor((M, K), dtype), q: T.Tensor((M, K // 2), "uint8"),
                  s: T.Tensor((M, K // 32), "uint8")):
        with T.Kernel(T.ceildiv(M, warps), T.ceildiv(K, span * unroll), threads=threads) as (bx, by):
            T.assume(K % 32 == 0)
            tx = T.get_thread_binding()
            row = bx * warps + tx // 32
            g = T.alloc_local((unroll * nv,), dtype)
            am = T.alloc_local((unroll,), "float32")
            pk = T.alloc_local((unroll,), "uint32")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < M and col < K:
                    for v in T.vectorized(nv):
                        g[u * nv + v] = x[row, col + v]
                else:
                    for v in T.vectorized(nv):
                        g[u * nv + v] = T.cast(0, dtype)
            for u in T.unroll(unroll):
                am[u] = T.float32(0)
                for v in T.unroll(nv):
                    am[u] = T.max(am[u], T.abs(T.cast(g[u * nv + v], "float32")))
                am[u] = T.max(am[u], T.shfl_xor(am[u], 2))
                am[u] = T.max(am[u], T.shfl_xor(am[u], 1))
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                sf = T.ieee_fdiv(T.max(am[u], T.float32(FP4_FLOOR)), T.float32(6.0))
                e = ((T.reinterpret(sf, "uint32") - T.uint32(1)) >> T.uint32(23)) + T.uint32(1)
                inv = T.reinterpret((T.uint32(254) - e) << T.uint32(23), "float32")
                pk[u] = T.uint32(0)
                for v in T.unroll(nv):
                    pk[u] = pk[u] | (_e2m1(T, T.cast(g[u * nv + v], "float32") * inv) << T.uint32(4 * v))
                if row < M and col < K:
                    T.stg32(q[row, col // 2], pk[u])
                    if tx % 4 == 0:
                        s[row, col // 32] = T.cast(e, "uint8")

    return fp4_quant

