"""Split-K: where a grid of whole-K tiles leaves SMs idle, each tile's K blocks are cut into
`splits` runs (grid z), each written as fp32 partials into the op's workspace[splits, M, N]; a
second kernel sums them in split order (deterministic) and rounds once.  tkreg.gemm and
tkreg.fp8_gemm on sm_100a (`split_k_classes`), and tkreg.fp8_gemm's swap-AB decode tile on sm_90a
(its own classes, kernels_src/gemm/fp8.py).
"""
from .classes import tile_count

REDUCE_M, REDUCE_N = 4, 256   # the reduce kernel's CTA tile


def reduce_splits(T, M, N, splits: int, dtype: str = "bfloat16", bias: bool = False):
    """The split-K epilogue kernel, a macro `reduce(workspace, bias or None, out)`: out =
    dtype(workspace[0] + workspace[1] + ... (+ bias)), summed in split order."""
    @T.macro
    def reduce(workspace, bias_, out):
        with T.Kernel(T.ceildiv(N, REDUCE_N), T.ceildiv(M, REDUCE_M), threads=128) as (bx, by):
            for i, j in T.Parallel(REDUCE_M, REDUCE_N):
                r, c = by * REDUCE_M + i, bx * REDUCE_N + j
                if r < M and c < N:
                    v = T.alloc_var("float32")
                    v = workspace[0, r, c]
                    for s in T.unroll(1, splits):
                        v += workspace[s, r, c]
                    if bias:
                        v += T.cast(bias_[c], "float32")
                    out[r, c] = T.cast(v, dtype)
    return reduce


def split_k_classes(tile: dict) -> tuple:
    """sm_100a's tiles are 128 x 128 at least, so a decode or narrow shape leaves most SMs idle
    (N = 4096: 32 tiles for 148 SMs): split K into the most of 8, 4 or 2 runs whose CTAs still fit
    in one wave, each run at least 1024 deep.  6 stages: more weight bytes in flight per SM.  Never
    run (no Blackwell GPU): the split counts come from this arithmetic, not a measurement."""
    return tuple((f"split-{s}", dict(tile, stages=6, splits=s),
                  f"{s} * {tile_count(128, 128)} <= SM_COUNT and K >= {s * 1024}", 40 + s) for s in (8, 4, 2))
