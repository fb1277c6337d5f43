"""Paged-KV decode attention (one query token per sequence): split-KV kernel + combine kernel.

    q[B, HQ, D], k_cache / v_cache[NP, PS, HK, D] (vLLM / FlashInfer "NHD" pages),
    block_table[B, MP] int32, seq_lens[B] int32  ->  out[B, HQ, D], lse[B, HQ] fp32

out[b, h] = softmax(scale * q[b, h] . K_b^T) V_b over the first L = seq_lens[b] tokens of
sequence b, token t in page block_table[b, t // PS], slot t % PS; query head h reads KV head
h // G, G = HQ / HK (GQA, G <= 16).  lse: natural log-sum-exp of the scaled scores (-inf for an
empty sequence, whose out is zeros).  L is clamped to [0, MP * PS], so no read leaves the block
table; a page entry outside the cache reads zeros (TMA fills out-of-bounds boxes) -- wrong
but never a fault (tkreg/ops/paged_attention.py has the TKREG_CHECK_PAGES debug check).

Split kernel, grid (HK, NS, B), one CTA per (KV head, split, sequence): a producer warp issues TMA
loads of the pages (per page [PS, 64-column swizzle blocks], BLOCK_N tokens = one page of 64 or
four of 16 per iteration) into a ring of `stages` K/V buffers through mbarriers; four consumer
warps hold the whole GQA group as the 16-row M side of mma.sync m16n8k16 (QK^T, then P V with P
through shared memory) and run the online softmax in fp32 (exp2 domain), cross-warp row reductions
through shared memory.  Tokens at or past L in the last iteration are masked to -inf, and their V
rows are zeroed in shared memory first (an unwritten slot may hold NaN, and NaN * 0 is NaN).
Split s covers iterations s, s + NS, s + 2 NS, ... of ceil(L / BLOCK_N): the work follows the actual
length, the grid only shapes, so one CUDA graph serves any seq_lens; and split s's first pages are
known before L is, so their block-table entries load beside seq_lens instead of after it (one DRAM
trip off each CTA's start: batch 1 x 32k 44.2 -> 42.4 µs on the H200).
NS (`SPLITS`) = num_splits when > 0, else floor(waves * SM_COUNT / (B * HK)), at least 1: the
most splits that still fit one wave of `waves` resident CTAs per SM (the split work is even, so a
partial second wave would only add a tail); capped by the block table's iterations and MAX_SPLITS.
NS == 1: the split kernel writes out and lse itself and the combine grid is empty.  NS > 1: fp32
partial outputs and log2-sum-exps go to the o_part / lse_part workspace, and the combine kernel,
grid (HQ, B), weights them by exp2(lse_s - max) across COMBINE_THREADS threads.
Both kernels are programmatic dependent launches that read nothing before griddepcontrol.wait, so
each one's launch and prologue overlap the kernel before it.
Variants: D in {64, 128} x PS in {16, 64} x {bf16, fp16}, the same source for sm_90a and sm_100a.
Measured figures: docs/attention-tuning.md.
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from ..common import DTYPES
from .tiles import LOG2E

HEAD_DIMS = (64, 128)
PAGE_SIZES = (16, 64)
BLOCK_H = 16            # query heads per CTA (the MMA's M side)
BLOCK_N = 64            # tokens an iteration
THREADS = 128           # the split kernel's consumer threads (plus one producer warp)
COMBINE_THREADS = 256
MAX_SPLITS = 128
LN2 = 0.6931471805599453

# The split count: the same function in the spec (text, for the launcher) and in the kernels
# (TIR, for grids and workspace shapes); the build checks that the two agree.
_CTAS = "(B * HK)"
_AUTO = f"max(waves * SM_COUNT // max({_CTAS}, 1), 1)"
_CAP = f"max(min((MP * page_size + {BLOCK_N} - 1) // {BLOCK_N}, {MAX_SPLITS}), 1)"
SPLITS = f"min((num_splits > 0) * num_splits + (num_splits <= 0) * {_AUTO}, {_CAP})"


def _splits_tir(T, B, HK, MP, SM_COUNT, num_splits, page_size, waves):
    ctas = B * HK
    auto = T.max(waves * SM_COUNT // T.max(ctas, 1), 1)
    cap = T.max(T.min((MP * page_size + BLOCK_N - 1) // BLOCK_N, MAX_SPLITS), 1)
    return T.min(T.Select(num_splits > 0, num_splits, auto), cap)


def _split_kernel(T, D: int, PS: int, dtype: str, stages: int, sizes):
    """Macro: the split kernel (module docstring).  sizes: (B, HK, MP, NS, G)."""
    from tilelang.cuda.language import pdl_sync, pdl_trigger
    from tilelang.layout import make_swizzled_layout

    f32 = "float32"
    B, HK, MP, NS, G = sizes
    PPI = BLOCK_N // PS                      # pages per iteration
    SWZ = 64                                 # columns of one 128-byte swizzle atom (16-bit types)

    @T.macro
    def split_kernel(q, k_cache, v_cache, block_table, seq_lens, softmax_scale, out, lse, o_part, lse_part):
        with T.Kernel(HK, NS, B, threads=THREADS + 32) as (h, s, b):
            q_s = T.alloc_shared((BLOCK_H, D), dtype)
            k_s = T.alloc_shared((stages, BLOCK_N, D), dtype)
            v_s = T.alloc_shared((stages, BLOCK_N, D), dtype)
            p_s = T.alloc_shared((BLOCK_H, BLOCK_N), dtype)
            T.annotate_layout({q_s: make_swizzled_layout(q_s), k_s: make_swizzled_layout(k_s),
                               v_s: make_swizzled_layout(v_s), p_s: make_swizzled_layout(p_s)})
            ready = T.alloc_barrier([32] * stages)        # the producer warp's arrivals (+ TMA bytes)
            free = T.alloc_barrier([THREADS] * stages)    # every consumer thread is done with a stage
            acc_s = T.alloc_fragment((BLOCK_H, BLOCK_N), f32)
            acc_o = T.alloc_fragment((BLOCK_H, D), f32)
            m = T.alloc_fragment((BLOCK_H,), f32)
            m_prev = T.alloc_fragment((BLOCK_H,), f32)
            alpha = T.alloc_fragment((BLOCK_H,), f32)
            rsum = T.alloc_fragment((BLOCK_H,), f32)
            lsum = T.alloc_fragment((BLOCK_H,), f32)

            tx = T.get_thread_binding()
            pdl_sync()         # launched early: wait here for the previous kernel's writes ...
            pdl_trigger()      # ... and let the combine kernel be scheduled (it waits for this grid)
            # split s runs iterations s, s + NS, ...: its first pages are known before seq_lens
            # is, so their table entries load beside it (an entry past the sequence may be
            # anything: TMA reads any page index safely, and those tokens are masked)
            pg0 = T.alloc_local((PPI,), "int32")
            if tx >= THREADS:
                for j in T.unroll(PPI):
                    pg0[j] = block_table[b, T.min(s * PPI + j, MP - 1)]
            ns = T.alloc_var("int32")
            ns = NS
            L = T.alloc_var("int32")
            L = T.max(T.min(seq_lens[b], MP * PS), 0)
            n_it = T.alloc_var("int32")
            n_it = T.max(T.ceildiv(T.ceildiv(L, BLOCK_N) - s, ns), 0)

            if tx >= THREADS:
                # producer warp: TMA page loads into the ring, `stages` iterations ahead
                last = T.alloc_var("int32")
                last = T.max(T.ceildiv(L, PS) - 1, 0)      # the last page the sequence uses
                for k in T.serial(n_it):
                    T.mbarrier_wait_parity(free[k % stages], ((k // stages) % 2) ^ 1)
                    for j in T.unroll(PPI):
                        pg = T.if_then_else(k == 0, pg0[j], block_table[b, T.min((s + k * ns) * PPI + j, last)])
                        r0 = j * PS
                        for c0 in T.unroll(0, D, SWZ):   # one 128-byte-swizzled column block per box
                            T.tma_copy(k_cache[pg, 0:PS, h, c0:c0 + SWZ], k_s[k % stages, r0:r0 + PS, c0:c0 + SWZ],
                                       barrier=ready[k % stages])
                            T.tma_copy(v_cache[pg, 0:PS, h, c0:c0 + SWZ], v_s[k % stages, r0:r0 + PS, c0:c0 + SWZ],
                                       barrier=ready[k % stages])
                    T.mbarrier_arrive(ready[k % stages])
            else:
                c = T.alloc_var(f32)
                c = T.if_then_else(softmax_scale == T.float32(0), T.float32(D ** -0.5 * LOG2E),
                                   softmax_scale * T.float32(LOG2E))
                for i, d in T.Parallel(BLOCK_H, D):
                    q_s[i, d] = T.if_then_else(i < G, q[b, h * G + i, d], T.cast(0, dtype))
                T.fill(acc_o, 0)
                T.fill(lsum, 0)
                T.fill(m, -T.infinity(f32))
                for k in T.serial(n_it):
                    T.mbarrier_wait_parity(ready[k % stages], (k // stages) % 2)
                    t0 = (s + k * ns) * BLOCK_N
                    if t0 + BLOCK_N > L:
                        # the sequence's last, partial iteration: slots at or past L may hold
                        # anything (NaN included), and P = 0 there does not clear NaN * 0
                        for i, d in T.Parallel(BLOCK_N, D):
                            if t0 + i >= L:
                                v_s[k % stages, i, d] = T.cast(0, dtype)
                        T.fence_proxy_async()   # generic writes before the stage's next TMA refill
                    T.clear(acc_s)
                    T.gemm(q_s, k_s[k % stages, :, :], acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                    for i, j in T.Parallel(BLOCK_H, BLOCK_N):
                        acc_s[i, j] = T.if_then_else(t0 + j < L, acc_s[i, j], -T.infinity(f32))
                    T.copy(m, m_prev)
                    T.reduce_max(acc_s, m, dim=1, clear=False)
                    for i in T.Parallel(BLOCK_H):
                        alpha[i] = T.exp2((m_prev[i] - m[i]) * c)
                    for i, j in T.Parallel(BLOCK_H, BLOCK_N):
                        acc_s[i, j] = T.exp2((acc_s[i, j] - m[i]) * c)
                    T.reduce_sum(acc_s, rsum, dim=1)
                    for i in T.Parallel(BLOCK_H):
                        lsum[i] = lsum[i] * alpha[i] + rsum[i]
                    for i, d in T.Parallel(BLOCK_H, D):
                        acc_o[i, d] *= alpha[i]
                    T.copy(acc_s, p_s)
                    T.gemm(p_s, v_s[k % stages, :, :], acc_o, policy=T.GemmWarpPolicy.FullRow)
                    T.mbarrier_arrive(free[k % stages])

                # this split's normalized output and its log2-sum-exp (-inf when it is empty)
                for i, d in T.Parallel(BLOCK_H, D):
                    acc_o[i, d] = T.if_then_else(lsum[i] > 0, acc_o[i, d] / lsum[i], T.float32(0))
                for i in T.Parallel(BLOCK_H):
                    m[i] = T.if_then_else(lsum[i] > 0, T.log2(T.max(lsum[i], T.float32(1e-30))) + m[i] * c,
                                          -T.infinity(f32))
                if ns == 1:
                    for i, d in T.Parallel(BLOCK_H, D):
                        if i < G:
                            out[b, h * G + i, d] = T.cast(acc_o[i, d], dtype)
                    for i in T.Parallel(BLOCK_H):
                        if i < G:
                            lse[b, h * G + i] = m[i] * T.float32(LN2)
                else:
                    for i, d in T.Parallel(BLOCK_H, D):
                        if i < G:
                            o_part[b, h * G + i, s, d] = acc_o[i, d]
                    for i in T.Parallel(BLOCK_H):
                        if i < G:
                            lse_part[b, h * G + i, s] = m[i]
    return split_kernel


def _combine_kernel(T, D: int, dtype: str, sizes):
    """Macro: the combine kernel, grid (HQ, B) when NS > 1, else empty.  sizes: (B, HQ, NS)."""
    from tilelang.cuda.language import pdl_sync, pdl_trigger

    f32 = "float32"
    B, HQ, NS = sizes
    VEC = 4
    LANES = D // VEC                         # threads per row of D (one float4 each)
    GROUPS = COMBINE_THREADS // LANES        # splits summed side by side
    ROUNDS = -(-MAX_SPLITS // GROUPS)        # static, so every partial load can be in flight at once

    @T.macro
    def combine_kernel(out, lse, o_part, lse_part):
        with T.Kernel(T.Select(NS > 1, HQ, 0), B, threads=COMBINE_THREADS) as (hq, b):
            lse_s = T.alloc_shared((MAX_SPLITS,), f32)
            red = T.alloc_shared((GROUPS, D), f32)
            acc = T.alloc_local((VEC,), f32)
            part = T.alloc_local((ROUNDS, VEC), f32)
            mx = T.alloc_var(f32)
            tot = T.alloc_var(f32)
            pdl_sync()         # launched early (programmatic dependent launch): wait for the splits
            pdl_trigger()
            ns = T.alloc_var("int32")
            ns = NS
            tx = T.get_thread_binding()
            g = tx // LANES
            d0 = (tx % LANES) * VEC
            for r in T.unroll(ROUNDS):         # issue every partial load first
                if g + r * GROUPS < ns:
                    for v in T.vectorized(VEC):
                        part[r, v] = o_part[b, hq, g + r * GROUPS, d0 + v]
            if tx < ns:
                lse_s[tx] = lse_part[b, hq, tx]
            T.sync_threads()
            mx = -T.infinity(f32)
            for j in T.serial(ns):
                mx = T.max(mx, lse_s[j])
            tot = T.float32(0)
            for v in T.vectorized(VEC):
                acc[v] = T.float32(0)
            if mx > -T.infinity(f32):          # else every split is empty: zeros, lse = -inf
                for j in T.serial(ns):
                    tot += T.exp2(lse_s[j] - mx)
                for r in T.unroll(ROUNDS):
                    if g + r * GROUPS < ns:
                        for v in T.unroll(VEC):
                            acc[v] += T.exp2(lse_s[g + r * GROUPS] - mx) * part[r, v]
            for v in T.vectorized(VEC):
                red[g, d0 + v] = acc[v]
            T.sync_threads()
            if g == 0:
                for v in T.unroll(VEC):
                    for j in T.unroll(1, GROUPS):
                        acc[v] += red[j, d0 + v]
                    out[b, hq, d0 + v] = T.cast(T.if_then_else(tot > 0, acc[v] / tot, T.float32(0)), dtype)
                if tx == 0:
                    lse[b, hq] = T.if_then_else(tot > 0, (T.log2(tot) + mx) * T.float32(LN2), -T.infinity(f32))
    return combine_kernel


def paged_decode_kernel(D: int, page_size: int, dtype: str, stages: int, waves: int):
    import tilelang.language as T

    PS = page_size
    assert BLOCK_N % PS == 0 and BLOCK_N % 32 == 0
    f32 = "float32"
    B, HQ, HK = T.dynamic("B"), T.dynamic("HQ"), T.dynamic("HK")
    NP, MP = T.dynamic("NP"), T.dynamic("MP")
    sq = T.dynamic("sq")
    sk, sv = T.dynamic("sk", "int64"), T.dynamic("sv", "int64")
    # int scalars the workspace shape and the grids use: parameters annotated with the very
    # variables the shapes name, so they are bound before the buffers
    SM_COUNT_, num_splits_ = T.dynamic("SM_COUNT"), T.dynamic("num_splits")
    NS = _splits_tir(T, B, HK, MP, SM_COUNT_, num_splits_, PS, waves)
    G = HQ // T.max(HK, 1)                 # the GQA group: at most BLOCK_H heads (the rule)
    split_kernel = _split_kernel(T, D, PS, dtype, stages, (B, HK, MP, NS, G))
    combine_kernel = _combine_kernel(T, D, dtype, (B, HQ, NS))

    Q = T.StridedTensor((B, HQ, D), (sq, D, 1), dtype)
    K = T.StridedTensor((NP, PS, HK, D), (sk, HK * D, D, 1), dtype)
    V = T.StridedTensor((NP, PS, HK, D), (sv, HK * D, D, 1), dtype)

    @T.prim_func
    def paged_decode_attention(q: Q, k_cache: K, v_cache: V, block_table: T.Tensor((B, MP), "int32"),
                               seq_lens: T.Tensor((B,), "int32"), softmax_scale: T.float32,
                               out: T.Tensor((B, HQ, D), dtype), lse: T.Tensor((B, HQ), f32),
                               o_part: T.Tensor((B, HQ, NS, D), f32), lse_part: T.Tensor((B, HQ, NS), f32),
                               num_splits: num_splits_, SM_COUNT: SM_COUNT_):
        split_kernel(q, k_cache, v_cache, block_table, seq_lens, softmax_scale, out, lse, o_part, lse_part)
        combine_kernel(out, lse, o_part, lse_part)

    return paged_decode_attention


# (stages, waves) per head dim: K/V iterations in flight, resident CTAs a SM the split count fills.
TILES = {64: dict(stages=4, waves=3), 128: dict(stages=3, waves=2)}
# every read the kernels make is in bounds by construction (clamped or guarded; TMA fills zeros
# outside the cache), so tilelang's per-access guards would only cost registers and vector loads;
# exp2 -> ex2.approx (nvcc --use_fast_math): batch 1 x 32k 45.6 -> 43.7 µs
PASS_CONFIGS = {"tl.disable_safe_memory_legalize": True, "tl.enable_fast_math": True}

SPECS = (
    OpSpec(
        name="tkreg.paged_decode_attention",
        doc="decode attention over a paged KV cache: q[B, HQ, D], k/v_cache[NP, PS, HK, D] (NHD), "
            "block_table[B, MP] int32, seq_lens[B] int32 -> out[B, HQ, D], lse[B, HQ] fp32; "
            "D = 64 or 128, PS = 16 or 64, HQ % HK == 0 and HQ / HK <= 16",
        tensors=(Tensor("q", ("B", "HQ", "D"), dtypes=DTYPES, strides=("sq", "D", 1)),
                 Tensor("k_cache", ("NP", "PS", "HK", "D"), dtype_of="q", strides=("sk", "HK * D", "D", 1)),
                 Tensor("v_cache", ("NP", "PS", "HK", "D"), dtype_of="q", strides=("sv", "HK * D", "D", 1)),
                 Tensor("block_table", ("B", "MP"), dtype="int32"),
                 Tensor("seq_lens", ("B",), dtype="int32"),
                 Tensor("out", ("B", "HQ", "D"), dtype_of="q", role="output"),
                 Tensor("lse", ("B", "HQ"), dtype="float32", role="output"),
                 Tensor("o_part", ("B", "HQ", SPLITS, "D"), dtype="float32", role="scratch"),
                 Tensor("lse_part", ("B", "HQ", SPLITS), dtype="float32", role="scratch")),
        scalars=(Scalar("softmax_scale", "float32", 0.0), Scalar("num_splits", "int32", 0)),
        factory=paged_decode_kernel,
        variants=tuple(Variant(dict(D=d, page_size=ps, dtype=dt, **TILES[d]),
                               rule=f"HK > 0 and HQ % HK == 0 and HQ <= {BLOCK_H} * HK and NP > 0",
                               pass_configs=PASS_CONFIGS)
                       for d in HEAD_DIMS for ps in PAGE_SIZES for dt in DTYPES),
        reference="tkreg.reference.attention:paged_decode_attention",
        index64=True,
    ),
)
