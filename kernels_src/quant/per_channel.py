"""Per-channel FP8 (e4m3): one scale per channel per 128-token group, s[ceil(M / 128), K]; q as x's
layout or transposed (q^T[K, M], for weight-gradient GEMMs); the SwiGLU form quantizes
silu(g) * u (fp32, SILU's flush-to-zero forms) into q^T.

One kernel, channel_quant_kernel: a CTA owns one 128-token slab x `channels` channels, a thread
`rows_per_thread` tokens x 8 channels, and only the bf16 / fp16 inputs stay in registers (an fp32
copy held the first kernel at 2 CTAs/SM; SwiGLU's y is recomputed from them).  The per-warp amaxes
meet in shared memory, and `channels` threads compute each channel's scale once; a second barrier
hands 1/s back.  Without SwiGLU the amax runs on the packed bf16x2 / fp16x2 words as loaded and the
e4m3 bytes come four per cvt pair (E4M3X4); q^T goes through a channels x 128-byte XOR-swizzled
shared tile and out in 16-byte stores.  Measured tables: docs/quant-tuning.md.
"""
from kernels_src.common import DTYPES, FP8, FP8_MAX, SCALE_GROUP
from tkreg.spec import OpSpec, Tensor, Variant

from .device import BF16X2, E4M3X4, NV, PRELUDE_CS, REFERENCE, SILU, UE8M0, scale, silu_mul_ftz, word

def _load(T, dtype, rpt):
    """load(x, g, h, r0, k0, M, K, silu): a thread's rpt tokens x NV channels (zeros past the edges;
    with silu also the up half into h)."""
    nv = NV

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

    return load


def _packed_amax(T, dtype, rpt, ncc):
    """packed_amax(g, wa, am): am[v] = max |x| of channel v over the thread's rpt tokens and the
    warp's other lanes of that channel, on bf16x2 / fp16x2 words (|x| by clearing the sign bits,
    one packed max a pair; equal to the fp32 max, both widen exactly)."""
    nv, U = NV, T.uint32
    max2 = "tk_bmax2" if dtype == "bfloat16" else "tk_hmax2"

    def widen(w, hi):                      # the low / high 16-bit float of word w -> fp32, exactly
        if dtype == "bfloat16":
            return T.reinterpret(w & U(0xFFFF0000) if hi else w << U(16), "float32")
        return T.cast(T.reinterpret(T.cast(w >> U(16) if hi else w & U(0xFFFF), "uint16"), "float16"), "float32")

    @T.macro
    def packed_amax(g, wa, am):
        for w in T.unroll(nv // 2):
            wa[w] = word(T, g, 2 * w) & U(0x7FFF7FFF)
            for i in T.unroll(1, rpt):
                wa[w] = T.call_extern("uint32", max2, wa[w], word(T, g, i * nv + 2 * w) & U(0x7FFF7FFF))
        for o_ in T.unroll(5 - (ncc.bit_length() - 1)):
            for w in T.unroll(nv // 2):
                wa[w] = T.call_extern("uint32", max2, wa[w], T.shfl_xor(wa[w], ncc << o_))
        for w in T.unroll(nv // 2):
            am[2 * w] = widen(wa[w], 0)
            am[2 * w + 1] = widen(wa[w], 1)

    return packed_amax


def _silu_amax(T, rpt, ncc):
    """silu_amax(g, h, yb, am): yb = silu(g) * u in fp32 (computed once: nvcc does not merge two
    uses of the inline asm), am[v] = max |yb| of channel v as packed_amax's."""
    nv = NV

    @T.macro
    def silu_amax(g, h, yb, am):
        for i in T.unroll(rpt * nv):
            yb[i] = silu_mul_ftz(T, T.cast(g[i], "float32"), T.cast(h[i], "float32"))
        for v in T.unroll(nv):
            am[v] = T.float32(0)
        for i in T.unroll(rpt):
            for v in T.unroll(nv):
                am[v] = T.max(am[v], T.abs(yb[i * nv + v]))
        for o_ in T.unroll(5 - (ncc.bit_length() - 1)):
            for v in T.unroll(nv):
                am[v] = T.max(am[v], T.shfl_xor(am[v], ncc << o_))

    return silu_amax


def _channel_scales(T, cw, ncc, warps, K):
    """channel_scales(am, red, sc, a, inv, s, sl, bk, tx, cc, ue8m0): the warps' amaxes through
    shared memory (red), thread c < cw computes channel c's s (to global) and 1/s (to sc), and
    every thread takes its NV channels' 1/s back into inv."""
    nv = NV

    @T.macro
    def channel_scales(am, red, sc, a, inv, s, sl, bk, tx, cc, ue8m0):
        if tx % 32 < ncc:
            for v in T.vectorized(nv):
                red[tx // 32, cc * nv + v] = am[v]
        T.sync_threads()
        if tx < cw:                    # thread c: channel c's amax, s and 1/s
            a[0] = red[0, tx]
            for w in T.unroll(warps):
                a[0] = T.max(a[0], red[w, tx])
            sc[tx] = scale(T, a[0], FP8_MAX, ue8m0)[1]
            if bk * cw + tx < K:
                s[sl, bk * cw + tx] = scale(T, a[0], FP8_MAX, ue8m0)[0]
        T.sync_threads()
        for v in T.vectorized(nv):
            inv[v] = sc[cc * nv + v]

    return channel_scales


def _store_tile(T, cw, threads, M, K, packed):
    """store_tile(q, qt, o, tx, sl, bk): the q^T tile -> q: per pass a thread's two 8-byte slots of
    one channel's 128 tokens, one 16-byte store (packed: qt holds words, o 4 words, plain stores;
    else qt holds bytes, o 16 bytes, evict-first stores)."""
    U = T.uint32

    @T.macro
    def store_tile(q, qt, o, tx, sl, bk):
        for p in T.unroll(cw * 8 // threads):
            c = p * (threads // 8) + tx // 8
            ch = (tx % 8) * 2              # logical 8-byte slots ch, ch + 1
            sw = c // 8
            if packed:
                for i in T.vectorized(2):
                    o[i] = qt[c, (ch ^ sw) * 2 + i]
                for i in T.vectorized(2):
                    o[2 + i] = qt[c, ((ch + 1) ^ sw) * 2 + i]
            else:
                for i in T.vectorized(8):
                    o[i] = qt[c, (ch ^ sw) * 8 + i]
                for i in T.vectorized(8):
                    o[8 + i] = qt[c, ((ch + 1) ^ sw) * 8 + i]
            kk = bk * cw + c
            mm = sl * SCALE_GROUP + ch * 8
            if kk < K:
                if M % 16 == 0 and mm + 16 <= M:
                    if packed:
                        T.stg128(q[kk, mm], o[T.Ramp(0, 1, 4)])
                    else:
                        T.call_extern("handle", "tk_st16_cs", T.address_of(q[kk, mm]), T.address_of(o[0]))
                else:
                    for i in T.unroll(16):
                        if mm + i < M:
                            if packed:
                                T.call_extern("handle", "tk_st1", T.address_of(q[kk, mm + i]), o[i // 4] >> U(8 * (i % 4)))
                            else:
                                q[kk, mm + i] = o[i]

    return store_tile


def channel_quant_kernel(dtype: str, transpose: int = 0, silu: int = 0, rows_per_thread: int = 8,
                         channels: int = 128, min_blocks: int = 3):
    """x[M, K] (or [M, 2K] with silu: silu(x[:, :K]) * x[:, K:]) -> q[M, K] (transpose: q^T[K, M])
    e4m3, s[ceil(M / 128), K] fp32.

    (channels / 8) * (128 / rows_per_thread) threads; a warp's rows are 256 contiguous bytes at
    128 channels; min_blocks: __launch_bounds__(threads, min_blocks).  Three kernels ship:
    - no silu, q: packed amax, E4M3X4 words, evict-first 8-byte row stores;
    - no silu, q^T: packed; a word is one channel's 4 tokens, written straight into the tile
      (rows_per_thread 8: two words a channel);
    - silu, q^T: fp32 amax of y, e4m3 by T.cast, a byte tile (rows_per_thread 4: 4-byte slots,
      16-way conflict-free), evict-first 16-byte stores.
    """
    import tilelang.language as T

    rpt, cw = rows_per_thread, channels
    packed = not silu
    assert transpose or packed, "the SwiGLU form ships transposed only"
    assert not transpose or rpt == (8 if packed else 4), "the q^T tile's slots"
    M = T.dynamic("M")
    if silu:
        N = T.dynamic("N")
        K, x_shape = N // 2, (M, N)
    else:
        N = K = T.dynamic("K")
        x_shape = (M, K)
    q_shape = (K, M) if transpose else (M, K)
    nv = NV
    ncc = cw // 8                          # 8-channel chunks a row
    threads = ncc * (SCALE_GROUP // rpt)
    warps = threads // 32
    assert threads % 32 == 0 and threads <= 1024 and 32 % ncc == 0

    def e4m3x4(a, b, c, d):
        return T.call_extern("uint32", "tk_e4m3x4", a, b, c, d)

    def yq(g, inv, i, v):                  # packed: token i, channel v, scaled
        return T.cast(g[i * nv + v], "float32") * inv[v]

    load = _load(T, dtype, rpt)
    channel_amax = _silu_amax(T, rpt, ncc) if silu else _packed_amax(T, dtype, rpt, ncc)
    channel_scales = _channel_scales(T, cw, ncc, warps, K)
    store_tile = _store_tile(T, cw, threads, M, K, packed)

    @T.prim_func
    def channel_quant(x: T.Tensor(x_shape, dtype), q: T.Tensor(q_shape, FP8),
                      s: T.Tensor(((M + 127) // 128, K), "float32"), ue8m0: T.bool):
        with T.Kernel(T.ceildiv(M, SCALE_GROUP), T.ceildiv(K, cw), threads=threads,
                      prelude=PRELUDE_CS + (SILU if silu else "") + (BF16X2 + E4M3X4 if packed else "")) as (bm, bk):
            T.assume(N % (16 if silu else 8) == 0)
            T.annotate_min_blocks_per_sm(min_blocks)
            tx = T.get_thread_binding()
            cc, rg = tx % ncc, tx // ncc
            k0 = bk * cw + cc * nv
            r0 = bm * SCALE_GROUP + rg * rpt
            g = T.alloc_local((rpt * nv,), dtype)
            h = T.alloc_local((rpt * nv,), dtype)
            am = T.alloc_local((nv,), "float32")
            inv = T.alloc_local((nv,), "float32")
            ql = T.alloc_local((rpt * nv,), FP8)
            a = T.alloc_local((1,), "float32")
            t8 = T.alloc_local((rpt,), FP8)
            o = T.alloc_local((16,), FP8)
            yb = T.alloc_local((rpt * nv,), "float32") if silu else None
            wa = T.alloc_local((nv // 2,), "uint32") if packed else None
            qw = T.alloc_local((rpt * 2,), "uint32") if packed else None
            red = T.alloc_shared((warps, cw), "float32")
            sc = T.alloc_shared((cw,), "float32")
            qs = T.alloc_shared((cw, 128), FP8) if not packed else None
            qs32 = T.alloc_shared((cw, 32), "uint32") if packed and transpose else None
            load(x, g, h, r0, k0, M, K, silu)
            if silu:
                channel_amax(g, h, yb, am)
            else:
                channel_amax(g, wa, am)
            channel_scales(am, red, sc, a, inv, s, bm, bk, tx, cc, ue8m0)
            if not transpose:                 # words: 4 channels of a token
                for i in T.unroll(rpt):
                    for h2 in T.unroll(2):
                        qw[i * 2 + h2] = e4m3x4(*(yq(g, inv, i, 4 * h2 + j) for j in range(4)))
                for i in T.unroll(rpt):
                    if r0 + i < M and k0 < K:
                        T.call_extern("handle", "tk_st8_cs", T.address_of(q[r0 + i, k0]), T.address_of(qw[i * 2]))
            elif packed:                      # words: a channel's 4 tokens, straight into its slot
                for v in T.unroll(nv):
                    for j in T.unroll(2):
                        qs32[cc * nv + v, (rg ^ cc) * 2 + j] = e4m3x4(*(yq(g, inv, 4 * j + i, v) for i in range(4)))
                T.sync_threads()
                store_tile(q, qs32, qw, tx, bm, bk)
            else:                             # bytes: channel c's 4 tokens rg*4.. in slot ((rg // 2) ^ cc) * 2 + rg % 2
                for i in T.unroll(rpt):
                    for v in T.unroll(nv):
                        ql[i * nv + v] = T.cast(yb[i * nv + v] * inv[v], FP8)
                for v in T.unroll(nv):
                    for i in T.unroll(rpt):
                        t8[i] = ql[i * nv + v]
                    slot = ((rg // 2) ^ cc) * 2 + rg % 2
                    for i in T.vectorized(rpt):
                        qs[cc * nv + v, slot * rpt + i] = t8[i]
                T.sync_threads()
                store_tile(q, qs, o, tx, bm, bk)

    return channel_quant


def _spec(name, doc, x_cols, q_shape, channels_dim, params, rule):
    return OpSpec(
        name=name, doc=doc,
        tensors=(Tensor("x", ("M", x_cols), dtypes=DTYPES), Tensor("q", q_shape, dtype=FP8, role="output"),
                 Tensor("s", ("(M + 127) // 128", channels_dim), dtype="float32", role="output")),
        scalars=(UE8M0,), factory=channel_quant_kernel,
        variants=tuple(Variant(dict(dtype=d, **params), rule=rule) for d in DTYPES),
        reference=REFERENCE + name.split(".")[1])


SPECS = (
    # 128 channels x 8 tokens a thread, 3 CTAs/SM, packed, evict-first: 0.88 -> 0.93 of a
    # same-size copy at 16384 x 7168
    _spec("tkreg.per_channel_quant_fp8",
          "x[M, K] -> q[M, K] e4m3, s[ceil(M / 128), K] fp32: amax per channel over groups of 128 "
          "tokens (TileKernels' per_channel_cast; K % 8 == 0)", "K", ("M", "K"), "K", {}, "K % 8 == 0"),
    # the same tile and q^T through the shared tile: 0.91 -> 0.97 of a same-size copy
    _spec("tkreg.per_channel_quant_fp8_transpose",
          "x[M, K] -> q^T[K, M] e4m3, s[ceil(M / 128), K] fp32 (per-channel, 128-token groups; "
          "for weight-gradient GEMMs; K % 8 == 0)", "K", ("K", "M"), "K", dict(transpose=1), "K % 8 == 0"),
    # 64 channels, 4 tokens a thread, held to 64 registers (4 CTAs/SM): 0.76-0.84 -> 0.92-0.95
    # of a same-size copy against two prefetched slabs a CTA at 2 CTAs/SM
    _spec("tkreg.silu_and_mul_per_channel_quant_fp8_transpose",
          "x[M, 2I] -> silu(x[:, :I]) * x[:, I:] (fp32, fast-math silu) -> q^T[I, M] e4m3, "
          "s[ceil(M / 128), I] fp32 (I % 8 == 0)", "N", ("N // 2", "M"), "N // 2",
          dict(silu=1, transpose=1, rows_per_thread=4, channels=64, min_blocks=4), "N % 16 == 0"),
)
