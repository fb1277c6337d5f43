"""Grouped GEMMs for MoE experts: out rows of expert e = a rows of e @ b[e]^T, fp32 accumulation.

Two layouts, each in bf16/fp16 and in FP8 block-scaled form (DeepGEMM semantics, as
kernels_src/gemm/fp8.py: e4m3 inputs, a_scale per 1x128 activation group read through its
strides, b_scale[E, ceil(N/128), ceil(K/128)] per 128x128 weight block, bf16 out):

  contiguous  a[M, K], b[E, N, K], group_offsets[E + 1] int32 -> out[M, N].  Rows of expert e are
              a[offsets[e]:offsets[e + 1]].  Every segment starts at a multiple of ALIGN = 128
              rows (DeepGEMM's `get_m_alignment_for_contiguous_layout`; tkreg's routing pads each
              expert's segment to it), so a 128-row tile never straddles two experts; offsets[E]
              may be anything <= M and the last segment may end anywhere.  Grid: N tiles x
              ceil(M / block_M) M tiles; each M tile finds its expert by binary search over the
              offsets (<= 12 L1-resident loads; E <= 4095).  Tiles in no segment (past
              offsets[E], or empty experts' nothing) run no K loop and store nothing.
  masked      a[E, Mmax, K], b[E, N, K], counts[E] int32 -> out[E, Mmax, N] (DeepEP low-latency
              output): grid N tiles x M tiles x E; a CTA whose first row is >= counts[e] (clamped
              to [0, Mmax]) runs no K loop and stores nothing, so the work follows the counts on
              the device and a CUDA graph replays with changed counts.

Output rows outside every segment (contiguous: past offsets[E] or before offsets[0]; masked: rows
>= counts[e]) are never written: they keep whatever the output buffer held (torch.empty garbage
when tkreg allocates it).  Full tiles store through TMA; a segment's last, partial tile stores
element by element under a row mask.  a, b and out are read/written by TMA only (3-D boxes for
b[e] and the masked a/out), so b may exceed 2^31 elements (index64); the partial-tile stores
index out with int32 (variant rule: out's element count < 2^31).

bf16/fp16 tiles follow kernels_src/gemm/dense.py (TMA loads, T.Pipelined K loop warp-specialized
by tilelang, WGMMA): masked 128x256x64 (4 stages), or 64x128 with Mmax <= 64; contiguous 128x128x128
below the SMs' fill, and where 128x256 tiles cover the SMs the dense op's hand-written
warp-specialized persistent tile (tiles/warp_specialized.py), which finds each tile's expert with
`expert_macro`.  FP8 on sm_90a: the dense op's hand-written warp-specialized tile
(tiles/fp8_warp_specialized.py, which promotes block k under block k+1's WGMMAs), 128 rows, or 64
for masked Mmax <= 64.  sm_100a: tcgen05 + TMEM for every dtype (tiles/tcgen05.py, 128-row tiles);
compiled and SASS-checked, never run.
"""
from kernels_src.common import DTYPES, FP8, SCALE_GROUP
from tkreg.spec import OpSpec, Tensor, Variant

from .tiles import PASS_CONFIGS

ALIGN = 128      # contiguous layout: every expert segment starts at a multiple of this
LOG_E = 12       # binary-search depth: E <= 2^12 - 1 experts
INT32_MAX = 2**31 - 1


def expert_macro(T, contiguous: bool, M, E):
    """macro(groups, m0, bz, e, hi, valid): the expert e of the tile whose first row is m0 (masked:
    expert bz), the end `hi` of its rows, and valid = 1 when the tile holds any of them."""
    @T.macro
    def expert_of(groups, m0, bz, e: T.Ref, hi: T.Ref, valid: T.Ref):
        if contiguous:
            # The expert holding row m0: the largest e with offsets[e] <= m0 (binary lifting).
            e = 0
            for bit in T.unroll(LOG_E):
                if e + (1 << (LOG_E - 1 - bit)) <= E:
                    if groups[e + (1 << (LOG_E - 1 - bit))] <= m0:
                        e = e + (1 << (LOG_E - 1 - bit))
            valid = T.if_then_else(T.And(e < E, groups[0] <= m0), 1, 0)
            hi = groups[T.min(e + 1, E)]
        else:
            e = bz
            hi = T.max(T.min(groups[bz], M), 0)
            valid = T.if_then_else(m0 < hi, 1, 0)
    return expert_of


def fp8_warp_specialized_kernel(layout: str, persistent: bool = False, **params):
    """FP8, both layouts, on the hand-written warp-specialized tile (tiles/fp8_warp_specialized.py);
    persistent: contiguous only."""
    import tilelang.language as T
    from .tiles.fp8_warp_specialized import fp8_warp_specialized_body

    M, N, K, E = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("E")
    contiguous = layout == "contiguous"
    sms = T.dynamic("SM_COUNT") if persistent else None
    body = fp8_warp_specialized_body(T, layout, M, N, K, E, expert_of=expert_macro(T, contiguous, M, E),
                                     sm_count=sms, **params)
    return prim_func(T, body, contiguous, M, N, K, E, FP8, "bfloat16", True, sm_count=sms)


def warp_specialized_kernel(layout: str, block_N: int, stages: int, epilogue_cols: int, dtype: str):
    """bf16/fp16 contiguous grouped GEMM on the dense op's warp-specialized persistent tile
    (tiles/warp_specialized.py): each tile finds its expert with `expert_macro`."""
    import tilelang.language as T
    from .tiles.warp_specialized import warp_specialized_body

    assert layout == "contiguous"
    M, N, K, E, sms = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("E"), T.dynamic("SM_COUNT")
    tile = warp_specialized_body(T, M, N, K, sms, block_N, stages, epilogue_cols, False, dtype,
                                 expert_of=expert_macro(T, True, M, E))

    @T.macro
    def body(a, a_scale, b, b_scale, groups, out):
        tile(a, b, None, groups, out)
    return prim_func(T, body, True, M, N, K, E, dtype, dtype, False, sm_count=sms)


def tcgen05_kernel(layout: str, fp8: bool, block_M: int, block_N: int, stages: int, threads: int,
                   block_K: int = SCALE_GROUP, dtype: str = "bfloat16"):
    """sm_100a, both layouts and every dtype: the tcgen05 tile (tiles/tcgen05.py, 128 rows); each
    tile finds its expert with `expert_macro`."""
    import tilelang.language as T
    from .tiles.tcgen05 import tcgen05_body

    M, N, K, E = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("E")
    contiguous = layout == "contiguous"
    tile = tcgen05_body(T, layout, M, N, K, E, block_M, block_N, block_K, stages, threads, dtype, fp8=fp8,
                        expert_of=expert_macro(T, contiguous, M, E))

    @T.macro
    def body(a, a_scale, b, b_scale, groups, out):
        tile(a, a_scale, b, b_scale, None, groups, out)
    in_dt, out_dt = (FP8, "bfloat16") if fp8 else (dtype, dtype)
    return prim_func(T, body, contiguous, M, N, K, E, in_dt, out_dt, fp8)


def pipelined_body(T, contiguous: bool, M, E, cols, red, b_rows_are_cols: bool, store, block_M: int,
                   block_N: int, block_K: int, stages: int, threads: int, dtype: str, store_empty: bool = False):
    """Macro body(a, b, groups, out) on the pipelined tile (T.Pipelined loop of TMA loads, WGMMA):
    the tile of out rows m0 .. (expert e's, found by `expert_macro`) x out columns n0 .. (of
    `cols`) accumulates a rows @ b[e] over `red`; b[e] is [cols, red] (b_rows_are_cols: the
    forward's, read transposed) or [red, cols].  Then store(acc, c_s, out, e, m0, n0, hi, valid,
    bz): only for tiles that hold a segment row, unless store_empty (those have a cleared acc)."""
    expert_of = expert_macro(T, contiguous, M, E)

    @T.macro
    def body(a, b, groups, out):
        with T.Kernel(T.ceildiv(cols, block_N), T.ceildiv(M, block_M), 1 if contiguous else E,
                      threads=threads) as (bx, by, bz):
            a_s = T.alloc_shared((block_M, block_K), dtype)
            b_s = T.alloc_shared((block_N, block_K) if b_rows_are_cols else (block_K, block_N), dtype)
            c_s = T.alloc_shared((block_M, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            e = T.alloc_var("int32")
            hi = T.alloc_var("int32")
            valid = T.alloc_var("int32")
            T.use_swizzle(panel_size=10)
            m0, n0 = by * block_M, bx * block_N
            expert_of(groups, m0, bz, e, hi, valid)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(red, block_K) * valid, num_stages=stages):
                if contiguous:
                    T.copy(a[m0, k * block_K], a_s)
                else:
                    T.copy(a[e, m0, k * block_K], a_s)
                if b_rows_are_cols:
                    T.copy(b[e, n0, k * block_K], b_s)
                    T.gemm(a_s, b_s, acc, transpose_B=True)
                else:
                    T.copy(b[e, k * block_K, n0], b_s)
                    T.gemm(a_s, b_s, acc)
            if store_empty or valid > 0:
                store(acc, c_s, out, e, m0, n0, hi, valid, bz)

    return body


def grouped_kernel(layout: str, block_M: int, block_N: int, block_K: int, stages: int, threads: int, dtype: str):
    """bf16/fp16, both layouts, on the pipelined tile (`pipelined_body`)."""
    import tilelang.language as T

    contiguous = layout == "contiguous"
    assert ALIGN % block_M == 0
    M, N, K, E = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("E")

    @T.macro
    def store(acc, c_s, out, e, m0, n0, hi, valid: T.Ref, bz):
        """acc -> out: TMA when all the tile's rows are < hi, else row-masked element stores."""
        if m0 + block_M <= hi:
            T.copy(acc, c_s)
            if contiguous:
                T.copy(c_s, out[m0, n0])
            else:
                T.copy(c_s, out[e, m0, n0])
        else:
            for i, j in T.Parallel(block_M, block_N):
                if m0 + i < hi and n0 + j < N:
                    if contiguous:
                        out[m0 + i, n0 + j] = T.cast(acc[i, j], dtype)
                    else:
                        out[e, m0 + i, n0 + j] = T.cast(acc[i, j], dtype)

    tile = pipelined_body(T, contiguous, M, E, N, K, True, store, block_M, block_N, block_K, stages, threads, dtype)

    @T.macro
    def body(a, a_scale, b, b_scale, groups, out):
        tile(a, b, groups, out)

    return prim_func(T, body, contiguous, M, N, K, E, dtype, dtype, False)


def prim_func(T, body, contiguous: bool, M, N, K, E, in_dtype: str, out_dtype: str, fp8: bool, sm_count=None):
    """The op's kernel signature around `body(a, a_scale, b, b_scale, groups, out)` (no scales: None);
    a persistent kernel (bf16 or FP8, contiguous) also takes the SM count (`sm_count`, the SM_COUNT
    symbol)."""
    KB = T.ceildiv(K, SCALE_GROUP)
    if contiguous:
        A, O, G = T.Tensor((M, K), in_dtype), T.Tensor((M, N), out_dtype), T.Tensor((E + 1,), "int32")
        SA = T.StridedTensor((M, KB), (T.dynamic("sam"), T.dynamic("sak")), "float32")
    else:
        A, O, G = T.Tensor((E, M, K), in_dtype), T.Tensor((E, M, N), out_dtype), T.Tensor((E,), "int32")
        SA = T.StridedTensor((E, M, KB), (T.dynamic("sae"), T.dynamic("sam"), T.dynamic("sak")), "float32")
    B = T.Tensor((E, N, K), in_dtype)
    SB = T.Tensor((E, T.ceildiv(N, SCALE_GROUP), KB), "float32")
    assert sm_count is None or contiguous
    if not fp8 and sm_count is not None:
        @T.prim_func
        def grouped_gemm(a: A, b: B, group_offsets: G, out: O, SM_COUNT: sm_count):
            body(a, None, b, None, group_offsets, out)
        return grouped_gemm
    if fp8 and sm_count is not None:
        @T.prim_func
        def fp8_grouped_gemm(a: A, a_scale: SA, b: B, b_scale: SB, group_offsets: G, out: O, SM_COUNT: sm_count):
            body(a, a_scale, b, b_scale, group_offsets, out)
        return fp8_grouped_gemm
    if fp8 and contiguous:
        @T.prim_func
        def fp8_grouped_gemm(a: A, a_scale: SA, b: B, b_scale: SB, group_offsets: G, out: O):
            body(a, a_scale, b, b_scale, group_offsets, out)
        return fp8_grouped_gemm
    if fp8:
        @T.prim_func
        def fp8_grouped_gemm_masked(a: A, a_scale: SA, b: B, b_scale: SB, counts: G, out: O):
            body(a, a_scale, b, b_scale, counts, out)
        return fp8_grouped_gemm_masked
    if contiguous:
        @T.prim_func
        def grouped_gemm(a: A, b: B, group_offsets: G, out: O):
            body(a, None, b, None, group_offsets, out)
        return grouped_gemm

    @T.prim_func
    def grouped_gemm_masked(a: A, b: B, counts: G, out: O):
        body(a, None, b, None, counts, out)
    return grouped_gemm_masked


def factory(arch: str = "sm_90a", shape_class: str = "", mma: str = "wgmma", **params):
    """`shape_class` only names the variant.  mma="warp_specialized": the hand-written sm_90a tiles;
    mma="tcgen05": the sm_100a kernel (`tcgen05_kernel`)."""
    if mma == "tcgen05":
        return tcgen05_kernel(**params)
    if mma == "warp_specialized":
        assert arch == "sm_90a"
        return fp8_warp_specialized_kernel(**params) if params.pop("fp8") else warp_specialized_kernel(**params)
    assert not params.pop("fp8"), "FP8: the warp-specialized (sm_90a) or tcgen05 (sm_100a) tile"
    return grouped_kernel(**params)


def _fills(bm: int, bn: int) -> str:
    """Rule: a grid of bm x bn tiles of out[M, N] covers at least 3/4 of the SMs (the contiguous
    grid is M / block_M tiles whatever the expert count)."""
    return f"4 * (((M + {bm - 1}) // {bm}) * ((N + {bn - 1}) // {bn})) >= 3 * SM_COUNT"


# (name, tile, rule, priority) per layout, as in kernels_src/gemm/classes.py.  Masked: Mmax (a
# capacity, not the counts) picks the row tile.
LARGE = dict(block_M=128, block_N=256, block_K=64, stages=4, threads=256)
MID = dict(block_M=128, block_N=128, block_K=128, stages=3, threads=256)
SMALL = dict(block_M=64, block_N=128, block_K=128, stages=4, threads=128)
# Contiguous large: the dense op's warp-specialized persistent 128x256 tile, +2-11% over the
# pipelined LARGE tile on every contiguous case measured (docs/gemm-tuning.md).
WARP_SPECIALIZED_LARGE = dict(mma="warp_specialized", block_N=256, stages=4, epilogue_cols=128)
BF16_CLASSES = {
    "contiguous": (("large", WARP_SPECIALIZED_LARGE, _fills(128, 256), 10), ("mid", MID, None, 0)),
    "masked": (("large", LARGE, "M > 64", 10), ("small", SMALL, None, 0)),
}
# FP8, sm_90a: the warp-specialized tile, its scales staged in the ring by the producer; contiguous
# runs persistent (one CTA a SM: the next tile's loads under this tile's epilogue); masked takes
# the 128-row tile, or one 64-row consumer with 8 stages for Mmax <= 64 (DeepEP low-latency
# counts: 3-9% more weight bandwidth than the pipelined 64x128 tile it replaced).  sm_100a: the
# dense op's tcgen05 tile for every count: 128 rows (one TMEM lane a row), so Mmax <= 64 leaves half
# the MMA rows empty (TMA zero-fills them) - the weight stream, not the MMA, bounds those.
FP8_LARGE = dict(mma="warp_specialized", block_M=128, stages=4)
FP8_SMALL = dict(mma="warp_specialized", block_M=64, stages=8)
FP8_TCGEN05 = dict(block_M=128, block_N=128, stages=4, threads=256, mma="tcgen05")
FP8_CLASSES = {      # per arch
    "sm_90a": {"contiguous": (("persistent", dict(FP8_LARGE, persistent=True), None, 0),),
               "masked": (("large", FP8_LARGE, "M > 64", 10), ("small", FP8_SMALL, None, 0))},
    "sm_100a": {"contiguous": (("tcgen05", FP8_TCGEN05, None, 0),), "masked": (("tcgen05", FP8_TCGEN05, None, 0),)},
}
# sm_100a bf16/fp16: tcgen05 kernels, 128-row tiles only (one TMEM lane per row), as the dense op's.
SM100_CLASSES = {
    "contiguous": (("large", dict(block_M=128, block_N=256, block_K=64, stages=4, threads=128),
                    _fills(128, 256), 10),
                   ("mid", dict(block_M=128, block_N=128, block_K=64, stages=4, threads=128), None, 0)),
    "masked": (("mid", dict(block_M=128, block_N=128, block_K=64, stages=4, threads=128), None, 0),),
}
OUT32 = {"contiguous": f"M * N <= {INT32_MAX}", "masked": f"E * M * N <= {INT32_MAX}"}


def _variants(classes, layout: str, dtypes, fp8: bool, archs: tuple, **extra) -> tuple:
    out = []
    for name, params, rule, prio in classes[layout]:
        for dt in dtypes:
            p = dict(params, layout=layout, shape_class=name, fp8=fp8, **extra)
            if not fp8:
                p["dtype"] = dt
            full = f"E <= {2**LOG_E - 1} and {OUT32[layout]}" + (f" and ({rule})" if rule else "")
            out.append(Variant(p, rule=full, priority=prio, archs=archs,
                               pass_configs=PASS_CONFIGS if p.get("mma") == "warp_specialized" else ()))
    return tuple(out)


def _tensors(layout: str, fp8: bool) -> tuple:
    contiguous = layout == "contiguous"
    rows = ("M",) if contiguous else ("E", "M")
    dt = dict(dtypes=(FP8,)) if fp8 else dict(dtypes=DTYPES)
    ts = [Tensor("a", rows + ("K",), **dt)]
    if fp8:
        strides = ("sam", "sak") if contiguous else ("sae", "sam", "sak")
        ts.append(Tensor("a_scale", rows + ("(K + 127) // 128",), dtype="float32", strides=strides))
    ts.append(Tensor("b", ("E", "N", "K"), dtype_of="a"))
    if fp8:
        ts.append(Tensor("b_scale", ("E", "(N + 127) // 128", "(K + 127) // 128"), dtype="float32"))
    ts.append(Tensor("group_offsets", ("E + 1",), dtype="int32") if contiguous
              else Tensor("counts", ("E",), dtype="int32"))
    ts.append(Tensor("out", rows + ("N",), dtype="bfloat16" if fp8 else None,
                     dtype_of=None if fp8 else "a", role="output"))
    return tuple(ts)


_DOCS = {
    "grouped_gemm": "contiguous MoE grouped GEMM: out[M, N] rows offsets[e]:offsets[e+1] = a rows @ b[e]^T; "
                    "segments start at multiples of 128; K, N % 8 == 0",
    "grouped_gemm_masked": "masked MoE grouped GEMM: out[e, :counts[e]] = a[e, :counts[e]] @ b[e]^T; "
                           "rows >= counts[e] untouched; K, N % 8 == 0",
    "fp8_grouped_gemm": "contiguous FP8 block-scaled grouped GEMM (1x128 a scales, 128x128 b scales) -> bf16; "
                        "segments start at multiples of 128; K % 16 == 0, N % 8 == 0",
    "fp8_grouped_gemm_masked": "masked FP8 block-scaled grouped GEMM -> bf16; rows >= counts[e] untouched; "
                               "K % 16 == 0, N % 8 == 0",
}


def _spec(name: str, layout: str, fp8: bool) -> OpSpec:
    if fp8:
        variants = sum((_variants(classes, layout, (FP8,), True, (arch,)) for arch, classes in FP8_CLASSES.items()), ())
    else:
        variants = (_variants(BF16_CLASSES, layout, DTYPES, False, ("sm_90a",))
                    + _variants(SM100_CLASSES, layout, DTYPES, False, ("sm_100a",), mma="tcgen05"))
    return OpSpec(name=f"tkreg.{name}", doc=_DOCS[name], tensors=_tensors(layout, fp8), factory=factory,
                  variants=variants,
                  reference=f"tkreg.reference.gemm:{name}", index64=True,
                  backward=None if fp8 else "tkreg.ops.grouped_gradients:GroupedGemm"
                  + ("Grad" if layout == "contiguous" else "MaskedGrad"))


SPECS = (
    _spec("grouped_gemm", "contiguous", False),
    _spec("grouped_gemm_masked", "masked", False),
    _spec("fp8_grouped_gemm", "contiguous", True),
    _spec("fp8_grouped_gemm_masked", "masked", True),
)
