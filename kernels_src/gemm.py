"""bf16/fp16 GEMM: out[M, N] = a[M, K] @ b[N, K]^T (+ bias[N]), fp32 accumulation, rounded once.

M, N, K are run-time sizes.  Every variant loads tiles with TMA (zero-filled out of bounds, so any
M, N, K work; TMA needs 16-byte row strides, so K and N must be multiples of 8).  Where 128-row
tiles fill the SMs, the hand-written warp-specialized persistent tile (kernels_src/gemm_ws.py: a
producer warpgroup, two 64-row consumers, the next tile's loads under this tile's epilogue);
elsewhere a pipelined WGMMA K loop that tilelang warp-specializes, after tilelang's Hopper GEMM
example.  Shape classes (`CLASSES`, measured on the H200 beside cuBLAS, see BENCHMARKS.md;
`tkreg.explain` shows which one a call gets):
  decode M <= 32   swap-AB: the tile computes out^T = b @ a^T, so 64 weight rows fill WGMMA's M
                   side and the 16 or 32 tokens its N side; 8 stages of 64x128 weight tiles keep
                   ~128 KB in flight per SM.  Streams the weights at 88-95% of copy bandwidth
                   (a 64-row token tile instead wastes TMA work on out-of-bounds rows: 60-80%).
  decode M <= 64   64x64 tiles (64x256 when N >= 16384), 6 stages.
  large / mid      warp-specialized 128-row tiles, N width 256, 224, 128 or 112: the one whose
                   grid wastes least of its last wave (`best_width`; e.g. N = 7168 at M = 512-2048
                   takes 224: 32 tiles a row block, not 28 that leave a quarter of a wave idle);
                   below that 64x128x128, then 64x64 (tilelang's pipelined loop).
On sm_90a split-K was measured too and lost to these at every decode shape (the reduce pass costs
more than the extra CTAs give), so it has none.
sm_100a gets tcgen05 + tensor-memory kernels instead (kernels_src/gemm_sm100.py: 128-row tiles,
128x256 where the grid fills the SMs, else 128x128, split-K where even those leave SMs idle:
`split_k_classes`); compiled and SASS-checked, never run here.
"""
from tkreg.spec import OpSpec, Tensor, Variant

from .gemm_ws import PASS_CONFIGS as WS_PASS_CONFIGS

DTYPES = ("bfloat16", "float16")


def gemm_kernel(block_M: int, block_N: int, block_K: int, stages: int, threads: int,
                swap_ab: bool = False, bias: bool = False, dtype: str = "bfloat16"):
    import tilelang.language as T

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")

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
                for i, j in T.Parallel(block_N, block_M):
                    if m0 + j < M and n0 + i < N:
                        if bias:
                            out[m0 + j, n0 + i] = T.cast(acc[i, j] + T.cast(bias_[n0 + i], "float32"), dtype)
                        else:
                            out[m0 + j, n0 + i] = T.cast(acc[i, j], dtype)
            else:
                c_s = T.alloc_shared((block_M, block_N), dtype)
                acc = T.alloc_fragment((block_M, block_N), "float32")
                T.use_swizzle(panel_size=10)
                T.clear(acc)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                    T.copy(a[m0, k * block_K], a_s)
                    T.copy(b[n0, k * block_K], b_s)
                    T.gemm(a_s, b_s, acc, transpose_B=True)
                if bias:
                    for i, j in T.Parallel(block_M, block_N):
                        acc[i, j] += T.cast(bias_[T.min(n0 + j, N - 1)], "float32")
                T.copy(acc, c_s)
                T.copy(c_s, out[m0, n0])  # TMA store, clipped at the edges

    return gemm_prim_func(T, body, M, N, K, dtype, bias)


def gemm_prim_func(T, body, M, N, K, dtype: str, bias: bool, sm_count=None, splits: int = 1):
    """The op's kernel signature around `body(a, b, bias or None, out)` (Hopper and Blackwell); a
    persistent kernel also takes the SM count (`sm_count`, the SM_COUNT symbol); a split-K kernel
    (`splits` > 1) its fp32 partials: `body(a, b, bias or None, out, ws)`."""
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
        def gemm(a: A, b: B, bias: T.Tensor((N,), dtype), out: O, ws: W):
            body(a, b, bias, out, ws)
    elif splits > 1:
        @T.prim_func
        def gemm(a: A, b: B, out: O, ws: W):
            body(a, b, None, out, ws)
    elif bias:
        @T.prim_func
        def gemm(a: A, b: B, bias: T.Tensor((N,), dtype), out: O):
            body(a, b, bias, out)
    else:
        @T.prim_func
        def gemm(a: A, b: B, out: O):
            body(a, b, None, out)
    return gemm


REDUCE_M, REDUCE_N = 4, 256


def reduce_splits(T, M, N, splits: int, dtype: str = "bfloat16", bias: bool = False):
    """The split-K epilogue kernel, a macro `reduce(ws, bias or None, out)`: out = dtype(ws[0] +
    ws[1] + ... (+ bias)), summed in split order (deterministic)."""
    @T.macro
    def reduce(ws, bias_, out):
        with T.Kernel(T.ceildiv(N, REDUCE_N), T.ceildiv(M, REDUCE_M), threads=128) as (bx, by):
            for i, j in T.Parallel(REDUCE_M, REDUCE_N):
                r, c = by * REDUCE_M + i, bx * REDUCE_N + j
                if r < M and c < N:
                    v = T.alloc_var("float32")
                    v = ws[0, r, c]
                    for s in T.unroll(1, splits):
                        v += ws[s, r, c]
                    if bias:
                        v += T.cast(bias_[c], "float32")
                    out[r, c] = T.cast(v, dtype)
    return reduce


def ws_kernel(bias: bool = False, dtype: str = "bfloat16", **params):
    """The hand-written warp-specialized persistent tile (kernels_src/gemm_ws.py), dense layout."""
    import tilelang.language as T
    from .gemm_ws import gemm_ws_body

    M, N, K, sms = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("SM_COUNT")
    ws_body = gemm_ws_body(T, M, N, K, sms, bias=bias, dtype=dtype, **params)

    @T.macro
    def body(a, b, bias_, out):
        ws_body(a, b, bias_, None, out)
    return gemm_prim_func(T, body, M, N, K, dtype, bias, sm_count=sms)


def tcgen05_kernel(block_M: int, block_N: int, block_K: int, stages: int, threads: int,
                   bias: bool = False, dtype: str = "bfloat16", splits: int = 1):
    """sm_100a: the tcgen05 tile (kernels_src/gemm_sm100.py); splits > 1: split-K into fp32 partials,
    then reduce_splits (which adds the bias)."""
    import tilelang.language as T
    from .gemm_sm100 import tcgen05_body

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
        def body(a, b, bias_, out, ws):
            tile(a, None, b, None, None, None, ws)
            reduce(ws, bias_, out)
    return gemm_prim_func(T, body, M, N, K, dtype, bias, splits=splits)


def gemm_factory(arch: str = "sm_90a", shape_class: str = "", mma: str = "wgmma", splits: int = 1, **params):
    """`shape_class` only names the variant (so `tkreg.explain` shows it); the kernel ignores it.
    mma="ws": the hand-written warp-specialized persistent tile (kernels_src/gemm_ws.py, sm_90a).
    splits > 1: split-K (sm_100a only)."""
    if arch == "sm_100a":
        return tcgen05_kernel(splits=splits, **params)
    assert splits == 1
    if mma == "ws":
        return ws_kernel(**params)
    return gemm_kernel(**params)


def _tiles(bm: int, bn: int) -> str:
    return f"((M + {bm - 1}) // {bm}) * ((N + {bn - 1}) // {bn})"


def fills(bm: int, bn: int) -> str:
    """Rule: a grid of bm x bn tiles covers at least 3/4 of the SMs (fp8_gemm's classes use it too)."""
    return f"4 * {_tiles(bm, bn)} >= 3 * SM_COUNT"


# The warp-specialized tiles' N widths and their efficiency per tile (%, relative to 256; measured
# on the H200 where wave counts tie, docs/gemm-tuning.md).  A shape gets the width whose useful
# fraction of the issued waves, times that efficiency, is highest: useful / issued work is
# M N / (rounds * SM_COUNT * 128 * w) with rounds = ceil(tiles / SM_COUNT), so width w beats v when
# k_w * rounds_v * v >= k_v * rounds_w * w (e.g. N = 7168: 224-wide tiles at M = 512-2048, where 256
# leaves a quarter of the last wave idle).
WS_WIDTHS = {256: 100, 224: 97, 128: 90, 112: 87}


def _rounds(bm: int, bn: int) -> str:
    return f"(({_tiles(bm, bn)} + SM_COUNT - 1) // SM_COUNT)"


def best_width(w: int) -> str:
    """Rule: the 128-row WS tile of width w fills the SMs and has the best score of WS_WIDTHS."""
    return " and ".join([fills(128, w)] + [f"{WS_WIDTHS[w] * v} * {_rounds(128, v)} >= {WS_WIDTHS[v] * w} * {_rounds(128, w)}"
                                           for v in WS_WIDTHS if v != w])


WS = dict(mma="ws", block_M=128, block_K=64, panel=10)
# (name, tile params, rule, priority): higher priority is tried first; the last has no rule.
CLASSES = (
    ("decode-wide", dict(block_M=64, block_N=256, block_K=64, stages=4, threads=256),
     "M <= 64 and N >= 16384", 70),
    ("decode-16", dict(block_M=16, block_N=64, block_K=128, stages=8, threads=128, swap_ab=True),
     "M <= 16", 60),
    ("decode-32", dict(block_M=32, block_N=64, block_K=128, stages=8, threads=128, swap_ab=True),
     "M <= 32", 50),
    ("large", dict(WS, block_N=256, stages=4, epi=128), best_width(256), 30),
    ("large-224", dict(WS, block_N=224, stages=4, epi=32), best_width(224), 29),
    ("mid-128", dict(WS, block_N=128, stages=6, epi=128), best_width(128), 20),
    ("mid-112", dict(WS, block_N=112, stages=6, epi=112), best_width(112), 19),
    ("mid-64", dict(block_M=64, block_N=128, block_K=128, stages=4, threads=128), fills(64, 128), 10),
    ("small", dict(block_M=64, block_N=64, block_K=128, stages=6, threads=128), None, 0),
)
SM100_SMALL = dict(block_M=128, block_N=128, block_K=64, stages=4, threads=128, splits=1)


def split_k_classes(tile: dict) -> tuple:
    """sm_100a's tiles are 128 x 128 at least, so a decode or narrow shape leaves most SMs idle
    (N = 4096: 32 tiles for 148 SMs): split K into the most of 8, 4 or 2 runs whose CTAs still fit
    in one wave, each run at least 1024 deep (fp32 partials, then gemm.reduce_splits).  6 stages:
    more weight bytes in flight per SM.  Never run (no Blackwell GPU): the split counts come from
    this arithmetic, not a measurement."""
    return tuple((f"split-{s}", dict(tile, stages=6, splits=s),
                  f"{s} * {_tiles(128, 128)} <= SM_COUNT and K >= {s * 1024}", 40 + s) for s in (8, 4, 2))


SM100_CLASSES = (
    ("large", dict(SM100_SMALL, block_N=256), fills(128, 256), 30),
    ("small", SM100_SMALL, None, 0),
) + split_k_classes(SM100_SMALL)


def shape_variants(classes, arch: str, dtypes=DTYPES, bias=(False, True)) -> tuple:
    """One variant per (class, dtype, bias or not) for `arch`; the bias ones are picked by `has_bias`."""
    out = []
    for name, params, rule, priority in classes:
        for dtype in dtypes:
            for b in bias:
                has = "has_bias" if b else "not has_bias"
                out.append(Variant(dict(params, dtype=dtype, bias=b, shape_class=name, splits=params.get("splits", 1)),
                                   rule=f"{has} and ({rule})" if rule else has, priority=priority,
                                   archs=(arch,), pass_configs=WS_PASS_CONFIGS if params.get("mma") == "ws" else ()))
    return tuple(out)


SPECS = (
    OpSpec(
        name="tkreg.gemm",
        doc="out[M, N] = a[M, K] @ b[N, K]^T (+ bias[N]) (a Linear layer), fp32 accumulation",
        tensors=(Tensor("a", ("M", "K"), dtypes=DTYPES),
                 Tensor("b", ("N", "K"), dtype_of="a"),
                 Tensor("bias", ("N",), dtype_of="a", optional=True),
                 Tensor("out", ("M", "N"), dtype_of="a", role="output"),
                 Tensor("ws", ("splits", "M", "N"), dtype="float32", role="scratch")),
        factory=gemm_factory,
        variants=shape_variants(CLASSES, "sm_90a") + shape_variants(SM100_CLASSES, "sm_100a"),
        reference="tkreg.reference.gemm:gemm",
    ),
)
