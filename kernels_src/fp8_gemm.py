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
specialized 128x128 tile (kernels_src/fp8_ws.py), 64-row tiles below; decode M <= 64 on the same
warp-specialized tile in swap-AB form (16, 32 or 64 tokens on WGMMA's N side), with split-K (fp32
partials summed in split order by a second kernel: deterministic) when N is small and K long.
sm_100a: the tcgen05 tile (kernels_src/gemm_sm100.py), split-K where its grid leaves SMs idle;
compiled and SASS-checked only.
"""
from tkreg.spec import OpSpec, Tensor, Variant

from .fp8_ws import PASS_CONFIGS as WS_PASS_CONFIGS
from .gemm import fills, reduce_splits, split_k_classes

FP8 = "float8_e4m3fn"
GROUP = 128


def fp8_gemm_kernel(block_M: int, block_N: int, stages: int, threads: int, prefetch: int = 0, panel: int = 10):
    import tilelang.language as T

    block_K = GROUP
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    KB = T.ceildiv(K, GROUP)
    uniform_b = GROUP % block_N == 0     # one weight-block scale per tile and K block
    # prefetch: the promotion's scales are loaded into registers before the WGMMAs are issued
    # (1: this K block's, 2: the next block's, a block ahead), so their global-load latency hides
    # under the tensor-core work instead of stalling the warpgroup after its WGMMA wait.
    assert not prefetch or uniform_b

    @T.macro
    def tile(a, a_scale, b, b_scale, out, m_blk, n_blk, a_s, b_s, c_s, part, acc, sa, sa_n, sb):
        m0, n0 = m_blk * block_M, n_blk * block_N
        T.clear(acc)
        if prefetch == 2:
            for i in T.Parallel(block_M):
                sa_n[i] = a_scale[T.min(m0 + i, M - 1), 0]
        for kb in T.Pipelined(KB, num_stages=stages):
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
            T.gemm(a_s, b_s, part, transpose_B=True, clear_accum=True)
            if kb < KB:
                if prefetch:
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
        T.copy(acc, c_s)
        T.copy(c_s, out[m0, n0])

    def scale_regs():
        """The prefetched scales: a_scale of the tile's rows (this K block's, and the next's for
        prefetch=2) and the weight block's b_scale; None without prefetch."""
        if not prefetch:
            return None, None, None
        return (T.alloc_fragment((block_M,), "float32"),
                T.alloc_fragment((block_M,), "float32") if prefetch == 2 else None, T.alloc_local((1,), "float32"))

    @T.macro
    def body(a, a_scale, b, b_scale, out, ws):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            a_s = T.alloc_shared((block_M, block_K), FP8)
            b_s = T.alloc_shared((block_N, block_K), FP8)
            c_s = T.alloc_shared((block_M, block_N), "bfloat16")
            part = T.alloc_fragment((block_M, block_N), "float32")
            acc = T.alloc_fragment((block_M, block_N), "float32")
            sa, sa_n, sb = scale_regs()
            T.use_swizzle(panel_size=panel)
            tile(a, a_scale, b, b_scale, out, by, bx, a_s, b_s, c_s, part, acc, sa, sa_n, sb)

    return prim_func(T, body, M, N, K)


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


def ws_kernel(persistent: bool = False, splits: int = 1, **params):
    """The hand-written warp-specialized tile (kernels_src/fp8_ws.py), dense layout; splits > 1:
    its split-K form (swap-AB decode) into fp32 partials, then reduce_splits."""
    import tilelang.language as T
    from .fp8_ws import fp8_ws_body

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    sms = T.dynamic("SM_COUNT") if persistent else None
    ws_body = fp8_ws_body(T, "dense", M, N, K, None, sm_count=sms, splits=splits, **params)
    reduce = reduce_splits(T, M, N, splits)

    @T.macro
    def body(a, a_scale, b, b_scale, out, ws):
        if splits > 1:
            ws_body(a, a_scale, b, b_scale, None, ws)
            reduce(ws, None, out)
        else:
            ws_body(a, a_scale, b, b_scale, None, out)
    return prim_func(T, body, M, N, K, splits, sm_count=sms)


def tcgen05_kernel(block_M: int, block_N: int, stages: int, threads: int, splits: int = 1):
    """sm_100a: the tcgen05 tile (kernels_src/gemm_sm100.py); splits > 1: split-K into fp32 partials,
    then reduce_splits."""
    import tilelang.language as T
    from .gemm_sm100 import tcgen05_body

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    tile = tcgen05_body(T, "dense", M, N, K, None, block_M, block_N, GROUP, stages, threads, fp8=True,
                        splits=splits)
    reduce = reduce_splits(T, M, N, splits)

    @T.macro
    def body(a, a_scale, b, b_scale, out, ws):
        if splits > 1:
            tile(a, a_scale, b, b_scale, None, None, ws)
            reduce(ws, None, out)
        else:
            tile(a, a_scale, b, b_scale, None, None, out)
    return prim_func(T, body, M, N, K, splits)


def fp8_gemm_factory(arch: str = "sm_90a", splits: int = 1, shape_class: str = "", mma: str = "wgmma", **params):
    """`shape_class` only names the variant (so `tkreg.explain` shows it); the kernel ignores it.
    mma="ws": the hand-written warp-specialized tile (sm_90a)."""
    if mma == "ws":
        assert arch == "sm_90a"
        return ws_kernel(splits=splits, **params)
    if arch == "sm_100a":
        return tcgen05_kernel(splits=splits, **params)
    assert splits == 1, "split-K: the warp-specialized decode tile only"
    return fp8_gemm_kernel(**params)


# (name, tile params, rule, priority), as in kernels_src/gemm.py; measured on the H200 beside
# torch._scaled_mm.  M > 128: the hand-written warp-specialized 128x128 tile (kernels_src/fp8_ws.py;
# docs/sweeps/fp8_gemm_ws_pack.py: 8192^3 1146 TFLOP/s, 4096^3 1056, 512 x 8192^2 952, against
# 1102 / 746 / 595 for the pipelined 192x128 tile with scale prefetch it replaced), persistent
# (one CTA a SM: the next tile's loads run under this tile's epilogue; +7% at K = 2048), its scales
# staged in shared memory by the producer (`smem_scales`, docs/sweeps/fp8_ring.py: +5-16%).  The 64-row
# tiles are memory-bound (prefetch gains nothing there).  128x256 spills (two fp32 tiles per
# thread).  Decode swaps A and B (the tokens on WGMMA's N side) on the warp-specialized tile
# (block k+1's WGMMAs issued before block k's promotion; docs/sweeps/fp8_decode_ws.py): M = 1
# 28672x4096 2909 -> 3418 GB/s of weights, 8192^2 2976 -> 3201 against the pipelined swap-AB tile;
# with its scales staged in shared memory too (docs/sweeps/fp8_ffma.py) +2-3% more.
DWS = dict(mma="ws", swap_ab=True, block_tok=16, block_M=64, consumers=1, producer_regs=0, stages=8, unroll=2,
           splits=1, smem_scales=True)
# decode-ws with 32 / 64 tokens a tile for 16 < M <= 64 (docs/sweeps/fp8_decode_split.py, weight GB/s:
# M = 32 at 28672x4096 2991 -> 3362, 8192^2 2678 -> 2942; M = 64 8192^2 2596 -> 2866, 4096^2 1410 ->
# 1566; bit for bit the 64-row tiles' result), and split-K where N alone leaves SMs idle and K is long
# (N <= 32 * SM_COUNT, K >= 8192): 3 splits of 16 tokens 2429 -> 2839 at M = 1 4096x14336, 2 splits of
# 32 tokens 1759 -> 2250 at M = 64.  Split-K lost at K <= 4096 (its reduce kernel, a second launch,
# costs ~3 µs: crossover ~26 MB of weights at N = 4096) and wherever N fills the SMs; the 64-token
# tile past N = 64 * SM_COUNT (one CTA a SM: 149 registers, 128 KB of ring; mid-64 reads 2925
# against 2594 at 28672x4096).  decode-16 (the pipelined swap-AB tile) lost to decode-ws everywhere
# measured (M = 8 5120^2 1999 against 2183) and is gone.
SMALL_N = "32 * N <= 1024 * SM_COUNT and K >= 8192"
CLASSES = (
    ("decode-ws-split", dict(DWS, splits=3, stages=6), f"M <= 16 and {SMALL_N}", 60),
    ("decode-ws", DWS, "M <= 16", 55),
    ("decode-ws-32-split", dict(DWS, block_tok=32, splits=2), f"M <= 64 and {SMALL_N}", 52),
    ("decode-ws-64", dict(DWS, block_tok=64), "M > 32 and M <= 64 and 32 * N > 1024 * SM_COUNT and N <= 64 * SM_COUNT",
     51),
    ("decode-ws-32", dict(DWS, block_tok=32), "M <= 32 or (M <= 64 and 32 * N <= 1024 * SM_COUNT)", 50),
    ("ws-128", dict(mma="ws", block_M=128, stages=4, consumers=2, unroll=2, persistent=True, panel=16, splits=1,
                    smem_scales=True, producer_regs=40, consumer_regs=232),
     "M > 128 and " + fills(128, 128), 20),
    ("mid-64", dict(block_M=64, block_N=128, stages=4, threads=128, splits=1), fills(64, 128), 10),
    ("small", dict(block_M=64, block_N=64, stages=8, threads=128, splits=1), None, 0),
)

# sm_100a: the tcgen05 tile (kernels_src/gemm_sm100.py), split-K where its grid leaves SMs idle
# (gemm.split_k_classes: never run, the split counts are arithmetic).
SM100_TILE = dict(block_M=128, block_N=128, stages=4, threads=256, splits=1)
SM100_CLASSES = (("tcgen05", SM100_TILE, None, 0),) + split_k_classes(SM100_TILE)

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
        + tuple(Variant(dict(params, shape_class=name), rule=rule, priority=prio, archs=("sm_100a",))
                for name, params, rule, prio in SM100_CLASSES),
        reference="tkreg.reference.gemm:fp8_gemm",
    ),
)
