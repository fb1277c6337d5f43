"""bf16/fp16 GEMM: out[M, N] = a[M, K] @ b[N, K]^T (+ bias[N]), fp32 accumulation, rounded once.

M, N, K are run-time sizes.  Every variant loads tiles with TMA (zero-filled out of bounds, so any
M, N, K work; TMA needs 16-byte row strides, so K and N must be multiples of 8).  Where 128-row
tiles fill the SMs, the hand-written warp-specialized persistent tile (tiles/warp_specialized.py:
a producer warpgroup, two 64-row consumers, the next tile's loads under this tile's epilogue);
elsewhere a pipelined WGMMA K loop that tilelang warp-specializes, after tilelang's Hopper GEMM
example.  Shape classes (`CLASSES`, measured on the H200 beside cuBLAS, docs/gemm-tuning.md;
`tkreg.explain` shows which one a call gets):
  decode M <= 32   swap-AB: the tile computes out^T = b @ a^T, so 64 weight rows fill WGMMA's M
                   side and the 16 or 32 tokens its N side; 8 stages of 64x128 weight tiles keep
                   ~128 KB in flight per SM.  Streams the weights at 88-95% of copy bandwidth.
  decode M <= 64   64x64 tiles (64x256 when N >= 16384), 6 stages.
  large / mid      warp-specialized 128-row tiles, N width 256, 224, 128 or 112: the one whose
                   grid wastes least of its last wave (`classes.best_width`; e.g. N = 7168 at
                   M = 512-2048 takes 224: 32 tiles a row block, not 28 that leave a quarter of a
                   wave idle); below that 64x128x128, then 64x64 (tilelang's pipelined loop).
Split-K lost to these at every decode shape on sm_90a (the reduce pass costs more than the extra
CTAs give), so sm_90a has none.  sm_100a gets tcgen05 + tensor-memory kernels instead
(tiles/tcgen05.py: 128-row tiles, 128x256 where the grid fills the SMs, else 128x128, split-K where
even those leave SMs idle); compiled and SASS-checked, never run.
"""
from kernels_src.common import DTYPES
from tkreg.spec import OpSpec, Tensor, Variant

from .classes import best_width, fills
from .split_k import reduce_splits, split_k_classes
from .tiles import PASS_CONFIGS


def pipelined_body(T, M, N, K, block_M: int, block_N: int, block_K: int, stages: int, threads: int,
                   swap_ab: bool = False, bias: bool = False, dtype: str = "bfloat16", swiglu: bool = False):
    """The pipelined tile (T.Pipelined K loop, WGMMA), a macro `body(a, b, bias or None, out)`;
    swap_ab: out^T = b @ a^T (decode); swiglu: out[M, N / 2] pairs b's interleaved gate / up rows
    (tiles.swiglu_column) through the SwiGLU epilogue (tkreg.gemm_swiglu, kernels_src/gemm/swiglu.py)."""
    from .tiles import GROUP, swiglu_column, swiglu_value
    assert not (bias and swiglu)

    def out_column(n):
        """out's column of accumulator column n (a tile's first)."""
        return n // 2 if swiglu else n

    @T.macro
    def body(a, b, bias_, out):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            m0, n0 = by * block_M, bx * block_N
            a_s = T.alloc_shared((block_M, block_K), dtype)
            b_s = T.alloc_shared((block_N, block_K), dtype)
            if swap_ab:
                acc = T.alloc_fragment((block_N, block_M), "float32")
                T.clear(acc)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                    T.copy(a[m0, k * block_K], a_s)
                    T.copy(b[n0, k * block_K], b_s)
                    T.gemm(b_s, a_s, acc, transpose_B=True)
                if swiglu:
                    gate = T.alloc_fragment((block_N // 2, block_M), "float32")
                    for i, j in T.Parallel(block_N // 2, block_M):
                        gate[i, j] = acc[swiglu_column(i), j]
                    for i, j in T.Parallel(block_N // 2, block_M):
                        if m0 + j < M and n0 // 2 + i < N // 2:
                            out[m0 + j, n0 // 2 + i] = swiglu_value(T, gate[i, j], acc[swiglu_column(i) + GROUP, j], dtype)
                else:
                    for i, j in T.Parallel(block_N, block_M):
                        if m0 + j < M and n0 + i < N:
                            if bias:
                                out[m0 + j, n0 + i] = T.cast(acc[i, j] + T.cast(bias_[n0 + i], "float32"), dtype)
                            else:
                                out[m0 + j, n0 + i] = T.cast(acc[i, j], dtype)
            else:
                c_s = T.alloc_shared((block_M, out_column(block_N)), dtype)
                acc = T.alloc_fragment((block_M, block_N), "float32")
                T.use_swizzle(panel_size=10)
                T.clear(acc)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                    T.copy(a[m0, k * block_K], a_s)
                    T.copy(b[n0, k * block_K], b_s)
                    T.gemm(a_s, b_s, acc, transpose_B=True)
                if swiglu:
                    gate = T.alloc_fragment((block_M, block_N // 2), "float32")
                    for i, j in T.Parallel(block_M, block_N // 2):
                        gate[i, j] = acc[i, swiglu_column(j)]
                    for i, j in T.Parallel(block_M, block_N // 2):
                        c_s[i, j] = swiglu_value(T, gate[i, j], acc[i, swiglu_column(j) + GROUP], dtype)
                else:
                    if bias:
                        for i, j in T.Parallel(block_M, block_N):
                            acc[i, j] += T.cast(bias_[T.min(n0 + j, N - 1)], "float32")
                    T.copy(acc, c_s)
                T.copy(c_s, out[m0, out_column(n0)])  # TMA store, clipped at the edges

    return body


def gemm_kernel(block_M: int, block_N: int, block_K: int, stages: int, threads: int,
                swap_ab: bool = False, bias: bool = False, dtype: str = "bfloat16"):
    """The pipelined tile (`pipelined_body`) in the op's signature."""
    import tilelang.language as T

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    body = pipelined_body(T, M, N, K, block_M, block_N, block_K, stages, threads, swap_ab, bias, dtype)
    return gemm_prim_func(T, body, M, N, K, dtype, bias)


def gemm_prim_func(T, body, M, N, K, dtype: str, bias: bool, sm_count=None, splits: int = 1):
    """The op's kernel signature around `body(a, b, bias or None, out)` (Hopper and Blackwell); a
    persistent kernel also takes the SM count (`sm_count`, the SM_COUNT symbol); a split-K kernel
    (`splits` > 1) its fp32 partials: `body(a, b, bias or None, out, workspace)`."""
    A, B, O = T.Tensor((M, K), dtype), T.Tensor((N, K), dtype), T.Tensor((M, N), dtype)
    W = T.Tensor((splits, M, N), "float32")
    if sm_count is not None and bias:
        @T.prim_func
        def gemm(a: A, b: B, bias: T.Tensor((N,), dtype), out: O, SM_COUNT: sm_count):
            body(a, b, bias, out)
    elif sm_count is not None:
        @T.prim_func
        def gemm(a: A, b: B, out: O, SM_COUNT: sm_count):
            body(a, b, None, out)
    elif splits > 1 and bias:
        @T.prim_func
        def gemm(a: A, b: B, bias: T.Tensor((N,), dtype), out: O, workspace: W):
            body(a, b, bias, out, workspace)
    elif splits > 1:
        @T.prim_func
        def gemm(a: A, b: B, out: O, workspace: W):
            body(a, b, None, out, workspace)
    elif bias:
        @T.prim_func
        def gemm(a: A, b: B, bias: T.Tensor((N,), dtype), out: O):
            body(a, b, bias, out)
    else:
        @T.prim_func
        def gemm(a: A, b: B, out: O):
            body(a, b, None, out)
    return gemm


def warp_specialized_kernel(block_N: int, stages: int, epilogue_cols: int, bias: bool = False,
                            dtype: str = "bfloat16"):
    """The hand-written warp-specialized persistent tile (tiles/warp_specialized.py), dense layout."""
    import tilelang.language as T
    from .tiles.warp_specialized import warp_specialized_body

    M, N, K, sms = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("SM_COUNT")
    tile = warp_specialized_body(T, M, N, K, sms, block_N, stages, epilogue_cols, bias, dtype)

    @T.macro
    def body(a, b, bias_, out):
        tile(a, b, bias_, None, out)
    return gemm_prim_func(T, body, M, N, K, dtype, bias, sm_count=sms)


def tcgen05_kernel(block_M: int, block_N: int, block_K: int, stages: int, threads: int,
                   bias: bool = False, dtype: str = "bfloat16", splits: int = 1):
    """sm_100a: the tcgen05 tile (tiles/tcgen05.py); splits > 1: split-K into the fp32 workspace,
    then split_k.reduce_splits (which adds the bias)."""
    import tilelang.language as T
    from .tiles.tcgen05 import tcgen05_body

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    tile = tcgen05_body(T, "dense", M, N, K, None, block_M, block_N, block_K, stages, threads, dtype,
                        bias=bias and splits == 1, splits=splits)
    if splits == 1:
        @T.macro
        def body(a, b, bias_, out):
            tile(a, None, b, None, bias_, None, out)
    else:
        reduce = reduce_splits(T, M, N, splits, dtype, bias)

        @T.macro
        def body(a, b, bias_, out, workspace):
            tile(a, None, b, None, None, None, workspace)
            reduce(workspace, bias_, out)
    return gemm_prim_func(T, body, M, N, K, dtype, bias, splits=splits)


def gemm_factory(arch: str = "sm_90a", shape_class: str = "", mma: str = "wgmma", splits: int = 1, **params):
    """`shape_class` only names the variant.  mma="warp_specialized": the hand-written
    warp-specialized persistent tile (sm_90a).  sm_100a: the tcgen05 tile, split-K where
    splits > 1."""
    if arch == "sm_100a":
        return tcgen05_kernel(splits=splits, **params)
    assert splits == 1
    if mma == "warp_specialized":
        return warp_specialized_kernel(**params)
    return gemm_kernel(**params)


CLASSES = (
    ("decode-wide", dict(block_M=64, block_N=256, block_K=64, stages=4, threads=256),
     "M <= 64 and N >= 16384", 70),
    ("decode-16", dict(block_M=16, block_N=64, block_K=128, stages=8, threads=128, swap_ab=True),
     "M <= 16", 60),
    ("decode-32", dict(block_M=32, block_N=64, block_K=128, stages=8, threads=128, swap_ab=True),
     "M <= 32", 50),
    ("large", dict(mma="warp_specialized", block_N=256, stages=4, epilogue_cols=128), best_width(256), 30),
    ("large-224", dict(mma="warp_specialized", block_N=224, stages=4, epilogue_cols=32), best_width(224), 29),
    ("mid-128", dict(mma="warp_specialized", block_N=128, stages=6, epilogue_cols=128), best_width(128), 20),
    ("mid-112", dict(mma="warp_specialized", block_N=112, stages=6, epilogue_cols=112), best_width(112), 19),
    ("mid-64", dict(block_M=64, block_N=128, block_K=128, stages=4, threads=128), fills(64, 128), 10),
    ("small", dict(block_M=64, block_N=64, block_K=128, stages=6, threads=128), None, 0),
)
SM100_SMALL = dict(block_M=128, block_N=128, block_K=64, stages=4, threads=128, splits=1)
SM100_CLASSES = (
    ("large", dict(SM100_SMALL, block_N=256), fills(128, 256), 30),
    ("small", SM100_SMALL, None, 0),
) + split_k_classes(SM100_SMALL)


def shape_variants(classes, arch: str) -> tuple:
    """One variant per (class, dtype, bias or not) for `arch`; the bias ones are picked by `has_bias`."""
    out = []
    for name, params, rule, priority in classes:
        for dtype in DTYPES:
            for b in (False, True):
                has = "has_bias" if b else "not has_bias"
                out.append(Variant(dict(params, dtype=dtype, bias=b, shape_class=name, splits=params.get("splits", 1)),
                                   rule=f"{has} and ({rule})" if rule else has, priority=priority, archs=(arch,),
                                   pass_configs=PASS_CONFIGS if params.get("mma") == "warp_specialized" else ()))
    return tuple(out)


SPECS = (
    OpSpec(
        name="tkreg.gemm",
        doc="out[M, N] = a[M, K] @ b[N, K]^T (+ bias[N]) (a Linear layer), fp32 accumulation",
        tensors=(Tensor("a", ("M", "K"), dtypes=DTYPES),
                 Tensor("b", ("N", "K"), dtype_of="a"),
                 Tensor("bias", ("N",), dtype_of="a", optional=True),
                 Tensor("out", ("M", "N"), dtype_of="a", role="output"),
                 Tensor("workspace", ("splits", "M", "N"), dtype="float32", role="scratch")),
        factory=gemm_factory,
        variants=shape_variants(CLASSES, "sm_90a") + shape_variants(SM100_CLASSES, "sm_100a"),
        reference="tkreg.reference.gemm:gemm",
        backward="tkreg.ops.gemm:GemmGrad",
    ),
)
