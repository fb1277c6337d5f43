"""Issue #17 round 3 candidates (sweep pack docs/sweeps/quant_r3.py): the expand's lesson (docs/quant-tuning.md,
"MoE expand": loads stall behind the write stream) applied to the quant kernels.  Bit-exact with the kernels
kernels_src/quant.py ships by construction: the same per-value math in the same order and the same rounding
(amax is a max: exact in any order); only the schedule and the memory instructions change:

- `ns` / `nt` / `nb` (prefetch): a CTA owns ns 128-token slabs (nt row tiles, nb transpose blocks) one after
  another, and the next one's global loads go out into a second register buffer before the current one is
  computed and stored (moe_expand_cand.move_pipe's A/B pattern: buffers A and B alternate, the slab loop unrolled).
- `cs`: evict-first stores, st.global.cs (16, 8 or 4 bytes) through inline asm, as the expand ships.
- `cw` (per-channel smem kernel): channels a CTA (128 shipped, 64 or 32): 512 -> 256 / 128 threads, so the
  108-register SwiGLU kernel holds 2-4 CTAs an SM instead of 1 (its load, barrier and store phases then
  overlap across CTAs).
- `minb`: __launch_bounds__(threads, minb) (T.annotate_min_blocks_per_sm as a statement of the kernel body,
  which is where tilelang applies it): caps the registers the prefetch buffers add, so occupancy holds.
- `y32 = 0` (warp-local transpose): no fp32 copy of the inputs (cast again: bf16 -> fp32 is exact), 64 fewer
  live registers.
"""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from kernels_src.quant import (FP8, AMAX_FLOOR, FP8_MAX, FP4_FLOOR, PRELUDE, STORE_CS, _prmt, _scale,  # noqa: F401
                               _silu, _t4x4)
# Folded into kernels_src/quant.py (round 3): the code of channel_cand and fp4_quant_cand moved there as
# quant.channel_quant_kernel and quant.fp4_quant_kernel (same parameters; their defaults are the kernels shipped
# when the sweep ran, byte for byte), and STORE_CS with it (PRELUDE3 = quant.PRELUDE_CS).
from kernels_src.quant import PRELUDE_CS as PRELUDE3  # noqa: F401
from kernels_src.quant import channel_quant_kernel as channel_cand, fp4_quant_kernel as fp4_quant_cand  # noqa: F401


# ---- per_channel_quant_fp8_transpose, warp-local (quant.channel_quant_t_kernel) ----------------------------
def channel_t_cand(dtype: str, ns: int = 1, cs: int = 0, y32: int = 1, warps: int = 4, minb: int = 0):
    """quant.channel_quant_t_kernel with ns slabs a CTA (next slab's loads first), evict-first 8-byte stores,
    y32 = 0: no fp32 copy of the inputs, and `warps` warps a CTA (16 channels each)."""
    import tilelang.language as T

    M, K = T.dynamic("M"), T.dynamic("K")
    lr = 16
    nv, rpt, lc = 8, 128 // lr, 32 // lr
    cw = warps * lc * nv                 # channels per CTA
    nw = rpt // 4                        # q^T words per channel a lane (2: one 8-byte store)
    SL = T.ceildiv(M, 128)

    @T.macro
    def load(x, g, r0, k0):
        for i in T.unroll(rpt):
            if r0 + i < M and k0 < K:
                for v in T.vectorized(nv):
                    g[i * nv + v] = x[r0 + i, k0 + v]
            else:
                for v in T.vectorized(nv):
                    g[i * nv + v] = T.cast(0, dtype)

    @T.macro
    def proc(g, sl, r0, k0, rg, q, s, ue8m0, y, am, sf, inv, ql, wq, o):
        if sl < SL:
            for v in T.unroll(nv):
                am[v] = T.float32(0)
            for i in T.unroll(rpt):
                for v in T.unroll(nv):
                    if y32:
                        y[i * nv + v] = T.cast(g[i * nv + v], "float32")
                        am[v] = T.max(am[v], T.abs(y[i * nv + v]))
                    else:
                        am[v] = T.max(am[v], T.abs(T.cast(g[i * nv + v], "float32")))
            for o_ in T.unroll(lr.bit_length() - 1):
                for v in T.unroll(nv):
                    am[v] = T.max(am[v], T.shfl_xor(am[v], 1 << o_))
            for v in T.unroll(nv):
                sf[v] = _scale(T, am[v], AMAX_FLOOR, FP8_MAX, ue8m0)[0]
                inv[v] = _scale(T, am[v], AMAX_FLOOR, FP8_MAX, ue8m0)[1]
            for i in T.unroll(rpt):
                if y32:
                    for v in T.vectorized(nv):
                        ql[i * nv + v] = T.cast(y[i * nv + v] * inv[v], FP8)
                else:
                    for v in T.vectorized(nv):
                        ql[i * nv + v] = T.cast(T.cast(g[i * nv + v], "float32") * inv[v], FP8)
            if rg == 0 and k0 < K:
                for v in T.vectorized(nv):
                    s[sl, k0 + v] = sf[v]
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
                        if cs:
                            T.call_extern("handle", "tk_st8_cs", T.address_of(q[k0 + v, r0]), T.address_of(o[v * 2]))
                        else:
                            T.stg64(q[k0 + v, r0], o[T.Ramp(v * 2, 1, 2)])
                else:
                    for v in T.unroll(nv):
                        for i in T.unroll(rpt):
                            if r0 + i < M:
                                q[k0 + v, r0 + i] = ql[i * nv + v]

    @T.prim_func
    def channel_quant_t(x: T.Tensor((M, K), dtype), q: T.Tensor((K, M), FP8),
                        s: T.Tensor(((M + 127) // 128, K), "float32"), ue8m0: T.bool):
        with T.Kernel(T.ceildiv(M, 128 * ns), T.ceildiv(K, cw), threads=warps * 32, prelude=PRELUDE3) as (bm, bk):
            T.assume(K % 8 == 0)
            if minb:                       # __launch_bounds__(threads, minb)
                T.annotate_min_blocks_per_sm(minb)
            tx = T.get_thread_binding()
            lane = tx % 32
            rg = lane % lr
            k0 = bk * cw + ((tx // 32) * lc + lane // lr) * nv
            gA = T.alloc_local((rpt * nv,), dtype)
            gB = T.alloc_local((rpt * nv,), dtype)
            y = T.alloc_local((rpt * nv,), "float32")
            am = T.alloc_local((nv,), "float32")
            sf = T.alloc_local((nv,), "float32")
            inv = T.alloc_local((nv,), "float32")
            ql = T.alloc_local((rpt * nv,), FP8)
            wq = T.alloc_local((rpt * 2,), "uint32")       # token i: channels 0-3, 4-7
            o = T.alloc_local((nv * nw,), "uint32")       # channel v: tokens 4j..4j+3 in word j
            load(x, gA, (bm * ns) * 128 + rg * rpt, k0)
            if ns == 1:
                proc(gA, bm, bm * 128 + rg * rpt, k0, rg, q, s, ue8m0, y, am, sf, inv, ql, wq, o)
            else:
                for j in T.unroll(ns // 2):
                    load(x, gB, (bm * ns + 2 * j + 1) * 128 + rg * rpt, k0)
                    proc(gA, bm * ns + 2 * j, (bm * ns + 2 * j) * 128 + rg * rpt, k0, rg, q, s, ue8m0,
                         y, am, sf, inv, ql, wq, o)
                    if 2 * j + 2 < ns:
                        load(x, gA, (bm * ns + 2 * j + 2) * 128 + rg * rpt, k0)
                    proc(gB, bm * ns + 2 * j + 1, (bm * ns + 2 * j + 1) * 128 + rg * rpt, k0, rg, q, s, ue8m0,
                         y, am, sf, inv, ql, wq, o)

    return channel_quant_t


# ---- batched transpose (quant.transpose_kernel) -------------------------------------------------------------
def transpose_cand(dtype: str, rows: int, cols: int, threads: int = 256, nb: int = 1, cs: int = 0, minb: int = 0):
    """quant.transpose_kernel with nb row blocks a CTA (block j covers rows (bm * nb + j) * tm ..; the next
    block's loads first) and evict-first stores."""
    import tilelang.language as T

    B, M, N = T.dynamic("B"), T.dynamic("M"), T.dynamic("N")
    nbytes = 16 // cols
    ow = rows * nbytes // 4
    warps = threads // 32
    tm, tn = 16 * rows, warps * 2 * cols

    @T.macro
    def load(x, a, bb, m0, n0):
        if m0 + rows <= M and n0 + cols <= N and N % cols == 0 and M % rows == 0:
            for r in T.unroll(rows):
                a[T.Ramp(r * 4, 1, 4)] = T.ldg128(x[bb, m0 + r, n0])

    @T.macro
    def proc(x, out, a, o, bb, m0, n0):
        if m0 + rows <= M and n0 + cols <= N and N % cols == 0 and M % rows == 0:
            for w in T.unroll(4):
                for h in T.unroll(ow):
                    if nbytes == 1:
                        y = _t4x4(T, a, 16 * h + w, 4)
                        o[(4 * w) * ow + h] = y[0]
                        o[(4 * w + 1) * ow + h] = y[1]
                        o[(4 * w + 2) * ow + h] = y[2]
                        o[(4 * w + 3) * ow + h] = y[3]
                    elif nbytes == 2:
                        o[(2 * w) * ow + h] = _prmt(T, a[(2 * h) * 4 + w], a[(2 * h + 1) * 4 + w], 0x5410)
                        o[(2 * w + 1) * ow + h] = _prmt(T, a[(2 * h) * 4 + w], a[(2 * h + 1) * 4 + w], 0x7632)
                    else:
                        o[w * ow + h] = a[h * 4 + w]
            for c in T.unroll(cols):
                if ow == 4:
                    if cs:
                        T.call_extern("handle", "tk_st16_cs", T.address_of(out[bb, n0 + c, m0]), T.address_of(o[c * 4]))
                    else:
                        T.stg128(out[bb, n0 + c, m0], o[T.Ramp(c * 4, 1, 4)])
                else:
                    if cs:
                        T.call_extern("handle", "tk_st8_cs", T.address_of(out[bb, n0 + c, m0]), T.address_of(o[c * 2]))
                    else:
                        T.stg64(out[bb, n0 + c, m0], o[T.Ramp(c * 2, 1, 2)])
        else:
            for c in T.unroll(cols):
                for r in T.unroll(rows):
                    if m0 + r < M and n0 + c < N:
                        out[bb, n0 + c, m0 + r] = x[bb, m0 + r, n0 + c]

    @T.prim_func
    def batched_transpose(x: T.Tensor((B, M, N), dtype), out: T.Tensor((B, N, M), dtype)):
        with T.Kernel(T.ceildiv(M, tm * nb), T.ceildiv(N, tn), B, threads=threads, prelude=PRELUDE3) as (bm, bn, bb):
            if minb:                       # __launch_bounds__(threads, minb)
                T.annotate_min_blocks_per_sm(minb)
            tx = T.get_thread_binding()
            n0 = bn * tn + (tx // 32) * (2 * cols) + (tx % 2) * cols
            aA = T.alloc_local((rows * 4,), "uint32")
            aB = T.alloc_local((rows * 4,), "uint32")
            o = T.alloc_local((cols * ow,), "uint32")
            ml = (tx % 32) // 2 * rows
            load(x, aA, bb, (bm * nb) * tm + ml, n0)
            if nb == 1:
                proc(x, out, aA, o, bb, bm * tm + ml, n0)
            else:
                for j in T.unroll(nb // 2):
                    load(x, aB, bb, (bm * nb + 2 * j + 1) * tm + ml, n0)
                    proc(x, out, aA, o, bb, (bm * nb + 2 * j) * tm + ml, n0)
                    if 2 * j + 2 < nb:
                        load(x, aA, bb, (bm * nb + 2 * j + 2) * tm + ml, n0)
                    proc(x, out, aB, o, bb, (bm * nb + 2 * j + 1) * tm + ml, n0)

    return batched_transpose
