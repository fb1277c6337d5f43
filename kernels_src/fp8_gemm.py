"""FP8 block-scaled GEMM (DeepSeek-V3 / DeepGEMM semantics):

    out[M, N] = sum over 128-wide K blocks kb of  (a[:, kb] @ b[:, kb]^T) * a_scale[:, kb] * b_scale[n // 128, kb]

a[M, K], b[N, K] e4m3; a_scale[M, ceil(K/128)] fp32 (1x128 activation groups), read through its
strides so both tkreg's row-major scales and DeepGEMM's column-major TMA-aligned layout (the view
`s.t()[:M]` the `_colmajor` quant ops return) work without a copy; power-of-two (UE8M0) scales
are fp32 values like any other.  b_scale[ceil(N/128), ceil(K/128)] fp32 (128x128 weight blocks).
Each 128-wide K block is one WGMMA chain into a fresh fp32 fragment, promoted into the running
fp32 accumulator with both scales (the "2xAcc" scheme: WGMMA's fp8 accumulator keeps ~14 bits,
so accumulating all of K in it loses accuracy).  bf16 out.  K % 16 == 0 and N % 8 == 0 (TMA rows).
Shape classes as for bf16 (kernels_src/gemm.py): M > 128 on a persistent hand-written warp-
specialized 128x128 tile (kernels_src/fp8_ws.py), 64-row tiles below; decode M <= 16 swap-AB, with
split-K (fp32 partials summed in split order by a second kernel: deterministic) when N is small.
sm_100a: one tcgen05 kernel (kernels_src/gemm_sm100.py), compiled and SASS-checked only.
"""
from tkreg.spec import OpSpec, Tensor, Variant

from .fp8_ws import PASS_CONFIGS as WS_PASS_CONFIGS
from .gemm import fills

FP8 = "float8_e4m3fn"
GROUP = 128
REDUCE_M, REDUCE_N = 4, 256


def fp8_gemm_kernel(block_M: int, block_N: int, stages: int, threads: int, splits: int = 1,
                    swap_ab: bool = False, prefetch: int = 0, panel: int = 10):
    import tilelang.language as T

    block_K = GROUP
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    KB = T.ceildiv(K, GROUP)
    uniform_b = GROUP % block_N == 0     # one weight-block scale per tile and K block
    assert uniform_b or not swap_ab, "swap-AB tiles read one weight-block scale per K block"
    # prefetch: the promotion's scales are loaded into registers before the WGMMAs are issued
    # (1: this K block's, 2: the next block's, a block ahead), so their global-load latency hides
    # under the tensor-core work instead of stalling the warpgroup after its WGMMA wait.
    # (Not on swap-AB decode tiles: there it lost 2-15 points of copy bandwidth, docs/gemm-tuning.md.)
    assert not prefetch or (uniform_b and not swap_ab)

    @T.macro
    def tile(a, a_scale, b, b_scale, out, ws, m_blk, n_blk, split, a_s, b_s, c_s, part, acc, sa, sa_n, sb):
        # Split s runs K blocks [s * per, (s + 1) * per); blocks past K read as zeros (TMA fills
        # out of bounds) and are skipped in the promotion, whose scales they would overrun.
        # swap_ab: the tile is out^T = b @ a^T (as in kernels_src/gemm.py), part/acc[n, m].
        m0, n0 = m_blk * block_M, n_blk * block_N
        per = T.ceildiv(KB, splits)
        T.clear(acc)
        if prefetch == 2:
            for i in T.Parallel(block_M):
                sa_n[i] = a_scale[T.min(m0 + i, M - 1), T.min(split * per, KB - 1)]
        for k in T.Pipelined(per, num_stages=stages):
            kb = split * per + k
            T.copy(a[m0, kb * block_K], a_s)
            T.copy(b[n0, kb * block_K], b_s)
            if prefetch == 1:
                for i in T.Parallel(block_M):
                    sa[i] = a_scale[T.min(m0 + i, M - 1), T.min(kb, KB - 1)]
            elif prefetch == 2:
                for i in T.Parallel(block_M):
                    sa[i] = sa_n[i]
                for i in T.Parallel(block_M):
                    sa_n[i] = a_scale[T.min(m0 + i, M - 1), T.min(kb + 1, KB - 1)]
            if prefetch:
                sb[0] = b_scale[n0 // GROUP, T.min(kb, KB - 1)]
            if swap_ab:
                T.gemm(b_s, a_s, part, transpose_B=True, clear_accum=True)
            else:
                T.gemm(a_s, b_s, part, transpose_B=True, clear_accum=True)
            if kb < KB:
                if swap_ab:
                    sb = b_scale[n0 // GROUP, kb]
                    for i, j in T.Parallel(block_N, block_M):
                        acc[i, j] += part[i, j] * (a_scale[T.min(m0 + j, M - 1), kb] * sb)
                elif prefetch:
                    for i, j in T.Parallel(block_M, block_N):
                        acc[i, j] += part[i, j] * (sa[i] * sb[0])
                elif uniform_b:
                    sb = b_scale[n0 // GROUP, kb]
                    for i, j in T.Parallel(block_M, block_N):
                        acc[i, j] += part[i, j] * (a_scale[T.min(m0 + i, M - 1), kb] * sb)
                else:
                    for i, j in T.Parallel(block_M, block_N):
                        acc[i, j] += part[i, j] * (a_scale[T.min(m0 + i, M - 1), kb]
                                                   * b_scale[T.min(n0 + j, N - 1) // GROUP, kb])
        if swap_ab:
            for i, j in T.Parallel(block_N, block_M):
                if m0 + j < M and n0 + i < N:
                    if splits == 1:
                        out[m0 + j, n0 + i] = T.cast(acc[i, j], "bfloat16")
                    else:
                        ws[split, m0 + j, n0 + i] = acc[i, j]
        elif splits == 1:
            T.copy(acc, c_s)
            T.copy(c_s, out[m0, n0])
        else:
            T.copy(acc, ws[split, m0:m0 + block_M, n0:n0 + block_N])

    def scale_regs():
        """The prefetched scales: a_scale of the tile's rows (this K block's, and the next's for
        prefetch=2) and the weight block's b_scale; None without prefetch."""
        if not prefetch:
            return None, None, None
        return (T.alloc_fragment((block_M,), "float32"),
                T.alloc_fragment((block_M,), "float32") if prefetch == 2 else None, T.alloc_local((1,), "float32"))

    @T.macro
    def body(a, a_scale, b, b_scale, out, ws):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits,
                      threads=threads) as (bx, by, bz):
            a_s = T.alloc_shared((block_M, block_K), FP8)
            b_s = T.alloc_shared((block_N, block_K), FP8)
            if swap_ab:
                part = T.alloc_fragment((block_N, block_M), "float32")
                acc = T.alloc_fragment((block_N, block_M), "float32")
                tile(a, a_scale, b, b_scale, out, ws, by, bx, bz, a_s, b_s, None, part, acc, None, None, None)
            else:
                c_s = T.alloc_shared((block_M, block_N), "bfloat16")
                part = T.alloc_fragment((block_M, block_N), "float32")
                acc = T.alloc_fragment((block_M, block_N), "float32")
                sa, sa_n, sb = scale_regs()
                T.use_swizzle(panel_size=panel)
                tile(a, a_scale, b, b_scale, out, ws, by, bx, bz, a_s, b_s, c_s, part, acc, sa, sa_n, sb)
        if splits > 1:
            with T.Kernel(T.ceildiv(N, REDUCE_N), T.ceildiv(M, REDUCE_M), threads=128) as (bx, by):
                for i, j in T.Parallel(REDUCE_M, REDUCE_N):
                    r, c = by * REDUCE_M + i, bx * REDUCE_N + j
                    if r < M and c < N:
                        v = T.alloc_var("float32")
                        v = ws[0, r, c]
                        for s in T.unroll(1, splits):
                            v += ws[s, r, c]
                        out[r, c] = T.cast(v, "bfloat16")

    return prim_func(T, body, M, N, K, splits)


def prim_func(T, body, M, N, K, splits: int = 1, sm_count=None):
    """The op's kernel signature around `body(a, a_scale, b, b_scale, out, ws)` (ws None unsplit);
    a persistent kernel also takes the SM count (`sm_count`, the SM_COUNT symbol)."""
    KB = T.ceildiv(K, GROUP)
    A, B = T.Tensor((M, K), FP8), T.Tensor((N, K), FP8)
    SA = T.StridedTensor((M, KB), (T.dynamic("sam"), T.dynamic("sak")), "float32")
    SB = T.Tensor((T.ceildiv(N, GROUP), KB), "float32")
    O, W = T.Tensor((M, N), "bfloat16"), T.Tensor((splits, M, N), "float32")
    if sm_count is not None:
        @T.prim_func
        def fp8_gemm(a: A, a_scale: SA, b: B, b_scale: SB, out: O, SM_COUNT: sm_count):
            body(a, a_scale, b, b_scale, out, None)
    elif splits > 1:
        @T.prim_func
        def fp8_gemm(a: A, a_scale: SA, b: B, b_scale: SB, out: O, ws: W):
            body(a, a_scale, b, b_scale, out, ws)
    else:
        @T.prim_func
        def fp8_gemm(a: A, a_scale: SA, b: B, b_scale: SB, out: O):
            body(a, a_scale, b, b_scale, out, None)
    return fp8_gemm


def ws_kernel(persistent: bool = False, **params):
    """The hand-written warp-specialized tile (kernels_src/fp8_ws.py), dense layout."""
    import tilelang.language as T
    from .fp8_ws import fp8_ws_body

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    sms = T.dynamic("SM_COUNT") if persistent else None
    ws_body = fp8_ws_body(T, "dense", M, N, K, None, sm_count=sms, **params)

    @T.macro
    def body(a, a_scale, b, b_scale, out, ws):
        ws_body(a, a_scale, b, b_scale, None, out)
    return prim_func(T, body, M, N, K, sm_count=sms)


def fp8_gemm_factory(arch: str = "sm_90a", splits: int = 1, shape_class: str = "", mma: str = "wgmma", **params):
    """`shape_class` only names the variant (so `tkreg.explain` shows it); the kernel ignores it.
    mma="ws": the hand-written warp-specialized tile (sm_90a)."""
    if mma == "ws":
        assert arch == "sm_90a" and splits == 1
        return ws_kernel(**params)
    if arch == "sm_100a":
        from .gemm_sm100 import fp8_gemm_tcgen05_kernel
        assert splits == 1
        return fp8_gemm_tcgen05_kernel(**params)
    return fp8_gemm_kernel(splits=splits, **params)


# (name, tile params, rule, priority), as in kernels_src/gemm.py; measured on the H200 beside
# torch._scaled_mm.  M > 128: the hand-written warp-specialized 128x128 tile (kernels_src/fp8_ws.py;
# docs/sweeps/fp8_gemm_ws_pack.py: 8192^3 1146 TFLOP/s, 4096^3 1056, 512 x 8192^2 952, against
# 1102 / 746 / 595 for the pipelined 192x128 tile with scale prefetch it replaced), persistent
# (one CTA a SM: the next tile's loads run under this tile's epilogue; +7% at K = 2048), its scales
# staged in shared memory by the producer (`smem_scales`, docs/sweeps/fp8_ring.py: +5-16%).  The 64-row
# tiles are memory-bound (prefetch gains nothing there).  128x256 spills (two fp32 tiles per
# thread).  Decode M <= 16 swaps A and B (16 tokens on WGMMA's N side) with 16 stages of 64x128
# weight tiles; split-K pays there for N <= 32 * SM_COUNT (few N tiles, long K).  From N = 8192 the
# decode tiles run on the warp-specialized tile in swap-AB form (block k+1's WGMMAs issued before
# block k's promotion; docs/sweeps/fp8_decode_ws.py): M = 1 28672x4096 2909 -> 3418 GB/s of weights,
# 8192^2 2976 -> 3201; with its scales staged in shared memory too (docs/sweeps/fp8_ffma.py: +2-3%)
# it also beats decode-16 at N = 7168 (+4-5%), not decode-16-split at N = 4096 (-2%).
CLASSES = (
    ("decode-ws", dict(mma="ws", swap_ab=True, block_tok=16, block_M=64, consumers=1, producer_regs=0, stages=8,
                       unroll=2, splits=1, smem_scales=True), "M <= 16 and N >= 7168", 65),
    ("decode-16-split", dict(block_M=16, block_N=64, stages=16, threads=128, splits=2, swap_ab=True),
     "M <= 16 and 32 * N <= 1024 * SM_COUNT and K >= 2048", 60),
    ("decode-16", dict(block_M=16, block_N=64, stages=16, threads=128, splits=1, swap_ab=True), "M <= 16", 55),
    ("ws-128", dict(mma="ws", block_M=128, stages=4, consumers=2, unroll=2, persistent=True, panel=16, splits=1,
                    smem_scales=True, producer_regs=40, consumer_regs=232),
     "M > 128 and " + fills(128, 128), 20),
    ("mid-64", dict(block_M=64, block_N=128, stages=4, threads=128, splits=1), fills(64, 128), 10),
    ("small", dict(block_M=64, block_N=64, stages=8, threads=128, splits=1), None, 0),
)

SPECS = (
    OpSpec(
        name="tkreg.fp8_gemm",
        doc="out[M, N] bf16 = DeepGEMM-style block-scaled a[M, K] e4m3 (1x128 scales) @ b[N, K]^T e4m3 "
            "(128x128 scales); K % 16 == 0, N % 8 == 0",
        tensors=(Tensor("a", ("M", "K"), dtypes=(FP8,)),
                 Tensor("a_scale", ("M", "(K + 127) // 128"), dtype="float32", strides=("sam", "sak")),
                 Tensor("b", ("N", "K"), dtype_of="a"),
                 Tensor("b_scale", ("(N + 127) // 128", "(K + 127) // 128"), dtype="float32"),
                 Tensor("out", ("M", "N"), dtype="bfloat16", role="output"),
                 Tensor("ws", ("splits", "M", "N"), dtype="float32", role="scratch")),
        factory=fp8_gemm_factory,
        variants=tuple(Variant(dict(params, shape_class=name), rule=rule, priority=prio, archs=("sm_90a",),
                               pass_configs=WS_PASS_CONFIGS if params.get("mma") == "ws" else ())
                       for name, params, rule, prio in CLASSES)
        + (Variant(dict(block_M=128, block_N=128, stages=4, threads=256, splits=1, shape_class="tcgen05"),
                   archs=("sm_100a",)),),
        reference="tkreg.reference.gemm:fp8_gemm",
    ),
)
