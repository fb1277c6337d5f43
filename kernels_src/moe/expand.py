"""moe_expand (bf16) and moe_expand_fp8 (e4m3 with 1x128 scales, row- or column-major): each
token's row copied to its k expert-major rows.

One CTA a token, 16-byte vectors: the token's row is read once and written to its k rows with
evict-first stores (the rows are written once and not read back here); E x PAD_SPLIT more CTAs
of the same grid zero the padding rows (one launch, no tail between).  Column-major scales: a
first launch stages them per token in 8-group chunks (the s_tok scratch), then head CTAs of the
rows' grid write them, a thread a row, coalesced along rows while s_tok is still in L2.
Measurements: docs/moe-tuning.md.
"""
from kernels_src.common import FP8, SCALE_GROUP, ST16_CS
from tkreg.spec import OpSpec, Tensor, Variant

from .limits import MAX_K, MOVE_RULE, MOVE_THREADS, REFERENCE

UNROLL = 2              # 16-byte loads a thread issues before its stores
PAD_SPLIT = 8           # CTAs an expert zeroing its padding rows
STAGE_GROUPS = 8        # scale groups a 32-byte chunk of the column-major staging scratch
COL_THREADS = 256       # column-major expand: fewer, longer scale-writing head CTAs (+0.4 points)


def _move(T, H, K, dtype, layout, vec, threads):
    """Macro: token t's row to its k expert-major rows (and its row-major scales)."""
    span = threads * vec

    @T.macro
    def move(t, tx, x, x_scale, row_of_slot, x_e, s_e):
        rows = T.alloc_local((MAX_K,), "int32")
        buf = T.alloc_local((UNROLL * vec,), dtype)
        for j in T.unroll(MAX_K):
            rows[j] = -1
            if j < K:
                rows[j] = row_of_slot[t, j]
        for c in T.serial(T.ceildiv(H, span * UNROLL)):
            for u in T.unroll(UNROLL):
                col = ((c * UNROLL + u) * threads + tx) * vec
                if col < H:
                    for v in T.vectorized(vec):
                        buf[u * vec + v] = x[t, col + v]
            for j in T.unroll(MAX_K):
                if rows[j] >= 0:
                    for u in T.unroll(UNROLL):
                        col = ((c * UNROLL + u) * threads + tx) * vec
                        if col < H:   # streaming stores: the rows are not read back here
                            T.call_extern("handle", "tk_st16_cs", T.address_of(x_e[rows[j], col]),
                                          T.address_of(buf[u * vec]))
        if layout == "row":
            for c in T.serial(T.ceildiv(H // SCALE_GROUP, threads)):
                g = c * threads + tx
                if g < H // SCALE_GROUP:
                    sv = x_scale[t, g]
                    for j in T.unroll(MAX_K):
                        if rows[j] >= 0:
                            s_e[rows[j], g] = sv

    return move


def _pad_rows(T, H, layout, vec, threads):
    """Macro: zero expert e's padding rows offsets[e] + counts[e] + p, + PAD_SPLIT, .. <
    offsets[e + 1] (row-major scales too)."""
    span = threads * vec

    @T.macro
    def pad_rows(p, e, tx, counts, expert_offsets, x_e, s_e):
        zero = T.alloc_local((vec,), x_e.dtype)
        for v in T.vectorized(vec):
            zero[v] = T.cast(0, x_e.dtype)
        lo = expert_offsets[e] + counts[e]
        hi = expert_offsets[e + 1]
        for r in T.serial(T.ceildiv(T.max(hi - lo - p, 0), PAD_SPLIT)):
            row = lo + p + r * PAD_SPLIT
            for c in T.serial(T.ceildiv(H, span)):
                col = (c * threads + tx) * vec
                if col < H:
                    for v in T.vectorized(vec):
                        x_e[row, col + v] = zero[v]
            if layout == "row":
                for c in T.serial(T.ceildiv(H // SCALE_GROUP, threads)):
                    g = c * threads + tx
                    if g < H // SCALE_GROUP:
                        s_e[row, g] = T.float32(0)

    return pad_rows


def _stage_scales(T, Tn, H, threads):
    """Macro, column-major scales step 1 (its own launch): the strided x_scale staged as
    s_tok[g // 8, t, g % 8] (a thread a token and 8 groups: one 32-byte store, coalesced across
    tokens), so step 2 loads 8 of a row's scales in one 32-byte L2 sector."""
    SG = STAGE_GROUPS

    @T.macro
    def stage_scales(x_scale, s_tok):
        G = H // SCALE_GROUP
        with T.Kernel(T.ceildiv(Tn, threads), T.ceildiv(G, SG), threads=threads) as (b, gb):
            tx = T.get_thread_binding()
            sv = T.alloc_local((SG,), "float32")
            t = b * threads + tx
            if t < Tn:
                for i in T.unroll(SG):
                    sv[i] = T.float32(0)
                    if gb * SG + i < G:
                        sv[i] = x_scale[t, gb * SG + i]
                for i in T.vectorized(SG):
                    s_tok[gb, t, i] = sv[i]

    return stage_scales


def _row_scales(T, H, K, E):
    """Macro, column-major scales step 2 (the head CTAs of the rows' grid, while s_tok is in L2, so
    its 33 MB of stores overlap the rows' stream): a thread a row writes s_e[g, r] for every g (0
    for padding), coalesced along r.  (A per-token scatter writes a sector a value; a separate
    launch after the rows reads s_tok from DRAM; one before them costs its own tail.)"""
    SG = STAGE_GROUPS

    @T.macro
    def row_scales(r, s_tok, slot_of_row, expert_offsets, s_e):
        G = H // SCALE_GROUP
        n = T.alloc_var("int32")
        sv = T.alloc_local((SG,), "float32")
        if r < expert_offsets[E]:
            n = slot_of_row[r]
            for gb in T.serial(T.ceildiv(G, SG)):
                if n >= 0:
                    for i in T.vectorized(SG):
                        sv[i] = s_tok[gb, n // K, i]
                else:
                    for i in T.unroll(SG):
                        sv[i] = T.float32(0)
                for i in T.unroll(SG):
                    if gb * SG + i < G:
                        s_e[gb * SG + i, r] = sv[i]

    return row_scales


def expand_kernel(dtype: str = "bfloat16", layout: str = ""):
    """x[T, H] -> x_e[R, H] expert-major (fp8: with its 1x128 scales, layout "row" or "col")."""
    import tilelang.language as T
    threads = COL_THREADS if layout == "col" else MOVE_THREADS

    Tn, H, K = T.dynamic("T"), T.dynamic("H"), T.dynamic("K")
    R, E = T.dynamic("R"), T.dynamic("E")
    fp8 = dtype == FP8
    vec = 16 if fp8 else 8          # 16 bytes a thread a load
    move = _move(T, H, K, dtype, layout, vec, threads)
    pad_rows = _pad_rows(T, H, layout, vec, threads)
    stage_scales = _stage_scales(T, Tn, H, threads)
    row_scales = _row_scales(T, H, K, E)
    NC = T.ceildiv(R, threads) if layout == "col" else 0    # head CTAs writing column-major scales

    @T.macro
    def body(x, x_scale, row_of_slot, slot_of_row, expert_offsets, counts, x_e, s_e, s_tok):
        if layout == "col":
            stage_scales(x_scale, s_tok)
        # the padding rows' CTAs ride in the same grid, after the tokens': one launch, no tail between
        with T.Kernel(NC + Tn + E * PAD_SPLIT, threads=threads, prelude=ST16_CS) as t:
            T.assume(H % vec == 0)
            tx = T.get_thread_binding()
            if layout == "col" and t < NC:
                row_scales(t * threads + tx, s_tok, slot_of_row, expert_offsets, s_e)
            elif t < NC + Tn:
                move(t - NC, tx, x, x_scale, row_of_slot, x_e, s_e)
            else:
                q = t - NC - Tn
                pad_rows(q % PAD_SPLIT, q // PAD_SPLIT, tx, counts, expert_offsets, x_e, s_e)

    X = T.Tensor((Tn, H), dtype)
    RS, SR = T.Tensor((Tn, K), "int32"), T.Tensor((R,), "int32")
    OFF, CNT = T.Tensor((E + 1,), "int32"), T.Tensor((E,), "int32")
    XE = T.Tensor((R, H), dtype)
    if not fp8:
        @T.prim_func
        def moe_expand(x: X, row_of_slot: RS, slot_of_row: SR, expert_offsets: OFF, counts: CNT, x_e: XE):
            body(x, None, row_of_slot, slot_of_row, expert_offsets, counts, x_e, None, None)
        return moe_expand
    G = H // SCALE_GROUP
    sxt, sxg = T.dynamic("sxt"), T.dynamic("sxg")
    XS = T.StridedTensor((Tn, G), (sxt, sxg), "float32")
    SE = T.Tensor((R, G) if layout == "row" else (G, (R + 3) // 4 * 4), "float32")

    if layout == "row":
        @T.prim_func
        def moe_expand_fp8(x: X, x_scale: XS, row_of_slot: RS, slot_of_row: SR, expert_offsets: OFF, counts: CNT,
                           x_e: XE, s_e: SE):
            body(x, x_scale, row_of_slot, slot_of_row, expert_offsets, counts, x_e, s_e, None)
        return moe_expand_fp8

    @T.prim_func
    def moe_expand_fp8_colmajor(x: X, x_scale: XS, row_of_slot: RS, slot_of_row: SR, expert_offsets: OFF,
                                counts: CNT, x_e: XE, s_e: SE,
                                s_tok: T.Tensor((T.ceildiv(G, STAGE_GROUPS), Tn, STAGE_GROUPS), "float32")):
        body(x, x_scale, row_of_slot, slot_of_row, expert_offsets, counts, x_e, s_e, s_tok)
    return moe_expand_fp8_colmajor


# ---- specs ----------------------------------------------------------------------------------
G_SHAPE = f"H // {SCALE_GROUP}"      # scale groups a row
_ROUTING = (Tensor("row_of_slot", ("T", "K"), dtype="int32"), Tensor("slot_of_row", ("R",), dtype="int32"),
            Tensor("expert_offsets", ("E + 1",), dtype="int32"), Tensor("counts", ("E",), dtype="int32"))


def _expand_fp8_spec(name, layout):
    s_e = ("R", G_SHAPE) if layout == "row" else (G_SHAPE, "(R + 3) // 4 * 4")
    return OpSpec(
        name=name,
        doc="x[T, H] e4m3 + x_scale[T, H // 128] fp32 (any strides) -> x_e[R, H] e4m3, s_e "
            + ("[R, H // 128] (row-major)" if layout == "row" else "[H // 128, ceil(R / 4) * 4] (column-major)")
            + "; H % 128 == 0",
        tensors=(Tensor("x", ("T", "H"), dtypes=(FP8,)),
                 Tensor("x_scale", ("T", G_SHAPE), dtype="float32", strides=("sxt", "sxg")))
        + _ROUTING
        + (Tensor("x_e", ("R", "H"), dtype_of="x", role="output"),
           Tensor("s_e", s_e, dtype="float32", role="output"))
        + ((Tensor("s_tok", (f"({G_SHAPE} + {STAGE_GROUPS - 1}) // {STAGE_GROUPS}", "T", STAGE_GROUPS),
                   dtype="float32", role="scratch"),) if layout == "col" else ()),
        factory=expand_kernel,
        variants=(Variant(dict(dtype=FP8, layout=layout),
                          rule=f"H % {SCALE_GROUP} == 0 and E <= 65535 and {MOVE_RULE}"),),
        reference=REFERENCE + name.split(".")[1], backward=None)


SPECS = (
    OpSpec(
        name="tkreg.moe_expand",
        doc="x[T, H] bf16 -> x_e[R, H] in expert-major order (padding rows zero, rows past "
            "expert_offsets[E] unwritten); H % 8 == 0",
        tensors=(Tensor("x", ("T", "H"), dtypes=("bfloat16",)),) + _ROUTING
        + (Tensor("x_e", ("R", "H"), dtype_of="x", role="output"),),
        factory=expand_kernel,
        variants=(Variant(dict(dtype="bfloat16"), rule=f"H % 8 == 0 and E <= 65535 and {MOVE_RULE}"),),
        reference=REFERENCE + "moe_expand", backward="tkreg.ops.moe:ExpandBackward"),
    _expand_fp8_spec("tkreg.moe_expand_fp8", "row"),
    _expand_fp8_spec("tkreg.moe_expand_fp8_colmajor", "col"),
)
