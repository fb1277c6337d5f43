"""FP8 block-scaled GEMM (DeepSeek-V3 / DeepGEMM semantics):

    out[M, N] = sum over 128-wide K blocks kb of  (a[:, kb] @ b[:, kb]^T) * a_scale[:, kb] * b_scale[n // 128, kb]

a[M, K], b[N, K] e4m3; a_scale[M, ceil(K/128)] fp32 (1x128 activation groups), read through its
strides so both tkreg's row-major scales and DeepGEMM's column-major TMA-aligned layout (the view
`s.t()[:M]` the `_colmajor` quant ops return) work without a copy; power-of-two (UE8M0) scales
are fp32 values like any other.  b_scale[ceil(N/128), ceil(K/128)] fp32 (128x128 weight blocks).
Each 128-wide K block is one WGMMA chain into a fresh fp32 fragment, promoted into the running
fp32 accumulator with both scales (the "2xAcc" scheme: WGMMA's fp8 accumulator keeps ~14 bits,
so accumulating all of K in it loses accuracy).  bf16 out.  K % 16 == 0 and N % 8 == 0 (TMA rows).
Shape classes (`CLASSES`, measured on the H200 beside torch._scaled_mm, docs/gemm-tuning.md):
M > 128 on the persistent hand-written warp-specialized 128x128 tile
(tiles/fp8_warp_specialized.py), 64-row pipelined tiles below; decode M <= 64 on the same
warp-specialized tile in swap-AB form (16, 32 or 64 tokens on WGMMA's N side), with split-K (fp32
partials summed in split order by a second kernel: deterministic) when N is small and K long.
sm_100a: the tcgen05 tile (tiles/tcgen05.py), split-K where its grid leaves SMs idle; compiled and
SASS-checked only.
"""
from kernels_src.common import FP8, SCALE_GROUP
from tkreg.spec import OpSpec, Tensor, Variant

from .classes import fills
from .split_k import reduce_splits, split_k_classes
from .tiles import PASS_CONFIGS


def fp8_gemm_kernel(block_M: int, block_N: int, stages: int, threads: int):
    """The pipelined tile (T.Pipelined K loop, WGMMA), block_N dividing 128: one weight-block scale
    per tile and K block."""
    import tilelang.language as T

    block_K = SCALE_GROUP
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    KB = T.ceildiv(K, SCALE_GROUP)
    assert SCALE_GROUP % block_N == 0

    @T.macro
    def tile(a, a_scale, b, b_scale, out, m_blk, n_blk, a_s, b_s, c_s, part, acc):
        m0, n0 = m_blk * block_M, n_blk * block_N
        T.clear(acc)
        for kb in T.Pipelined(KB, num_stages=stages):
            T.copy(a[m0, kb * block_K], a_s)
            T.copy(b[n0, kb * block_K], b_s)
            T.gemm(a_s, b_s, part, transpose_B=True, clear_accum=True)
            if kb < KB:
                sb = b_scale[n0 // SCALE_GROUP, kb]
                for i, j in T.Parallel(block_M, block_N):
                    acc[i, j] += part[i, j] * (a_scale[T.min(m0 + i, M - 1), kb] * sb)
        T.copy(acc, c_s)
        T.copy(c_s, out[m0, n0])

    @T.macro
    def body(a, a_scale, b, b_scale, out, workspace):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            a_s = T.alloc_shared((block_M, block_K), FP8)
            b_s = T.alloc_shared((block_N, block_K), FP8)
            c_s = T.alloc_shared((block_M, block_N), "bfloat16")
            part = T.alloc_fragment((block_M, block_N), "float32")
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.use_swizzle(panel_size=10)
            tile(a, a_scale, b, b_scale, out, by, bx, a_s, b_s, c_s, part, acc)

    return prim_func(T, body, M, N, K)


def prim_func(T, body, M, N, K, splits: int = 1, sm_count=None):
    """The op's kernel signature around `body(a, a_scale, b, b_scale, out, workspace)` (workspace
    None unsplit); a persistent kernel also takes the SM count (`sm_count`, the SM_COUNT symbol)."""
    KB = T.ceildiv(K, SCALE_GROUP)
    A, B = T.Tensor((M, K), FP8), T.Tensor((N, K), FP8)
    SA = T.StridedTensor((M, KB), (T.dynamic("sam"), T.dynamic("sak")), "float32")
    SB = T.Tensor((T.ceildiv(N, SCALE_GROUP), KB), "float32")
    O, W = T.Tensor((M, N), "bfloat16"), T.Tensor((splits, M, N), "float32")
    if sm_count is not None:
        @T.prim_func
        def fp8_gemm(a: A, a_scale: SA, b: B, b_scale: SB, out: O, SM_COUNT: sm_count):
            body(a, a_scale, b, b_scale, out, None)
    elif splits > 1:
        @T.prim_func
        def fp8_gemm(a: A, a_scale: SA, b: B, b_scale: SB, out: O, workspace: W):
            body(a, a_scale, b, b_scale, out, workspace)
    else:
        @T.prim_func
        def fp8_gemm(a: A, a_scale: SA, b: B, b_scale: SB, out: O):
            body(a, a_scale, b, b_scale, out, None)
    return fp8_gemm


def warp_specialized_kernel(persistent: bool = False, splits: int = 1, **params):
    """The hand-written warp-specialized tile (tiles/fp8_warp_specialized.py), dense layout;
    splits > 1: its split-K form (swap-AB decode) into the fp32 workspace, then reduce_splits."""
    import tilelang.language as T
    from .tiles.fp8_warp_specialized import fp8_warp_specialized_body

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    sms = T.dynamic("SM_COUNT") if persistent else None
    tile = fp8_warp_specialized_body(T, "dense", M, N, K, None, sm_count=sms, splits=splits, **params)
    reduce = reduce_splits(T, M, N, splits)

    @T.macro
    def body(a, a_scale, b, b_scale, out, workspace):
        if splits > 1:
            tile(a, a_scale, b, b_scale, None, workspace)
            reduce(workspace, None, out)
        else:
            tile(a, a_scale, b, b_scale, None, out)
    return prim_func(T, body, M, N, K, splits, sm_count=sms)


def tcgen05_kernel(block_M: int, block_N: int, stages: int, threads: int, splits: int = 1):
    """sm_100a: the tcgen05 tile (tiles/tcgen05.py); splits > 1: split-K into the fp32 workspace,
    then reduce_splits."""
    import tilelang.language as T
    from .tiles.tcgen05 import tcgen05_body

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    tile = tcgen05_body(T, "dense", M, N, K, None, block_M, block_N, SCALE_GROUP, stages, threads, fp8=True,
                        splits=splits)
    reduce = reduce_splits(T, M, N, splits)

    @T.macro
    def body(a, a_scale, b, b_scale, out, workspace):
        if splits > 1:
            tile(a, a_scale, b, b_scale, None, None, workspace)
            reduce(workspace, None, out)
        else:
            tile(a, a_scale, b, b_scale, None, None, out)
    return prim_func(T, body, M, N, K, splits)


def fp8_gemm_factory(arch: str = "sm_90a", splits: int = 1, shape_class: str = "", mma: str = "wgmma", **params):
    """`shape_class` only names the variant.  mma="warp_specialized": the hand-written
    warp-specialized tile (sm_90a)."""
    if mma == "warp_specialized":
        assert arch == "sm_90a"
        return warp_specialized_kernel(splits=splits, **params)
    if arch == "sm_100a":
        return tcgen05_kernel(splits=splits, **params)
    assert splits == 1, "split-K: the warp-specialized decode tile only"
    return fp8_gemm_kernel(**params)


# M > 128: the persistent warp-specialized 128x128 tile, its block scales staged in shared memory by
# the producer (4096^3: 1056 TFLOP/s against 746 for the pipelined 192x128 tile it replaced).  The
# 64-row pipelined tiles below it are memory-bound.  Decode (M <= 64) swaps A and B on the
# warp-specialized tile: one 64-weight-row consumer, the tokens on WGMMA's N side, 8 stages, block
# k+1's WGMMAs issued before block k's promotion; 16 tokens a tile for M <= 16, 32 or 64 above.
# Split-K (3 runs of 16 tokens, 2 of 32) only where N alone leaves SMs idle and K is long
# (N <= 32 * SM_COUNT, K >= 8192: below that the reduce kernel's extra launch costs more than the
# extra CTAs give); the 64-token tile only up to N = 64 * SM_COUNT (one CTA a SM, mid-64 is faster
# past it).  Measurements: docs/gemm-tuning.md.
DECODE = dict(mma="warp_specialized", swap_ab=True, block_tokens=16, block_M=64, producer_registers=0, stages=8,
              splits=1)
SMALL_N = "32 * N <= 1024 * SM_COUNT and K >= 8192"
CLASSES = (
    ("decode-split", dict(DECODE, splits=3, stages=6), f"M <= 16 and {SMALL_N}", 60),
    ("decode", DECODE, "M <= 16", 55),
    ("decode-32-split", dict(DECODE, block_tokens=32, splits=2), f"M <= 64 and {SMALL_N}", 52),
    ("decode-64", dict(DECODE, block_tokens=64),
     "M > 32 and M <= 64 and 32 * N > 1024 * SM_COUNT and N <= 64 * SM_COUNT", 51),
    ("decode-32", dict(DECODE, block_tokens=32), "M <= 32 or (M <= 64 and 32 * N <= 1024 * SM_COUNT)", 50),
    ("large", dict(mma="warp_specialized", block_M=128, stages=4, persistent=True, panel=16, splits=1),
     "M > 128 and " + fills(128, 128), 20),
    ("mid-64", dict(block_M=64, block_N=128, stages=4, threads=128, splits=1), fills(64, 128), 10),
    ("small", dict(block_M=64, block_N=64, stages=8, threads=128, splits=1), None, 0),
)

# sm_100a: the tcgen05 tile, split-K where its grid leaves SMs idle (split_k.split_k_classes).
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
                 Tensor("workspace", ("splits", "M", "N"), dtype="float32", role="scratch")),
        factory=fp8_gemm_factory,
        variants=tuple(Variant(dict(params, shape_class=name), rule=rule, priority=prio, archs=("sm_90a",),
                               pass_configs=PASS_CONFIGS if params.get("mma") == "warp_specialized" else ())
                       for name, params, rule, prio in CLASSES)
        + tuple(Variant(dict(params, shape_class=name), rule=rule, priority=prio, archs=("sm_100a",))
                for name, params, rule, prio in SM100_CLASSES),
        reference="tkreg.reference.gemm:fp8_gemm",
    ),
)
