"""MoE expand sweep candidates (session 7, docs/quant-tuning.md): column-major scale passes, bulk and evict-first stores, prefetch (tpb).  Same semantics as kernels_src/moe.py."""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from kernels_src.moe import FP8, K_MAX, PAD_SPLIT, SCALE_GROUPS, MOVE_THREADS

BULK = r"""
__device__ __forceinline__ void tk_fence_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void tk_bulk_store(void* dst, void* src, unsigned n) {
  unsigned s = (unsigned)__cvta_generic_to_shared(src);
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(dst), "r"(s), "r"(n) : "memory"); }
__device__ __forceinline__ void tk_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void tk_bulk_wait() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void tk_st16_cs(void* dst, const void* src) {
  uint4 v = *(const uint4*)src;
  asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory"); }
"""


def expand_cand(dtype: str = "bfloat16", layout: str = "", colmode: str = "split", bulk: int = 0,
                hmax: int = 8192, cs: int = 0, colthreads: int = 256, rpt: int = 4, diag: int = 0, tpb: int = 0, unroll: int = 2, threads: int = MOVE_THREADS, arch: str = ""):
    import tilelang.language as T

    Tn, H, K = T.dynamic("T"), T.dynamic("H"), T.dynamic("K")
    R, E = T.dynamic("R"), T.dynamic("E")
    fp8 = dtype == FP8
    vec = 16 if fp8 else 8
    esz = 1 if fp8 else 2
    span = threads * vec
    SG = SCALE_GROUPS

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
                for c in T.serial(T.ceildiv(H // 128, threads)):
                    g = c * threads + tx
                    if g < H // 128:
                        s_e[row, g] = T.float32(0)

    @T.macro
    def stage(x_scale, s_tok):
        G = H // 128
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

    @T.macro
    def col_rows(r, gb, x_scale, s_tok, slot_of_row, expert_offsets, s_e):
        """row r, groups gb*SG .. +SG"""
        G = H // 128
        sv = T.alloc_local((SG,), "float32")
        n = T.alloc_var("int32")
        tok = T.alloc_var("int32")
        if r < expert_offsets[E]:
            n = slot_of_row[r]
            if n >= 0:
                tok = n // K
                if colmode == "direct":
                    for i in T.unroll(SG):
                        sv[i] = T.float32(0)
                        if gb * SG + i < G:
                            sv[i] = x_scale[tok, gb * SG + i]
                else:
                    for i in T.vectorized(SG):
                        sv[i] = s_tok[gb, tok, i]
            else:
                for i in T.unroll(SG):
                    sv[i] = T.float32(0)
            for i in T.unroll(SG):
                if gb * SG + i < G:
                    s_e[gb * SG + i, r] = sv[i]

    @T.macro
    def col_all(r, s_tok, slot_of_row, expert_offsets, s_e, x_scale=None):
        """row r, every group: one slot load, G/SG independent 32-byte loads, G coalesced stores"""
        G = H // 128
        NG = T.ceildiv(G, SG)
        n = T.alloc_var("int32")
        sv = T.alloc_local((SG,), "float32")
        if r < expert_offsets[E]:
            n = slot_of_row[r]
            for gb in T.serial(NG):
                if n >= 0:
                    if x_scale is not None:
                        for i in T.unroll(SG):
                            sv[i] = T.float32(0)
                            if gb * SG + i < G:
                                sv[i] = x_scale[n // K, gb * SG + i]
                    else:
                        for i in T.vectorized(SG):
                            sv[i] = s_tok[gb, n // K, i]
                else:
                    for i in T.unroll(SG):
                        sv[i] = T.float32(0)
                for i in T.unroll(SG):
                    if gb * SG + i < G:
                        s_e[gb * SG + i, r] = sv[i]

    @T.macro
    def col_tile(b, tx, nthr, s_tok, slot_of_row, expert_offsets, s_e, tile):
        """rows b*ROWS .. +ROWS (ROWS = rpt*nthr): gather 8 groups a row into a shared [8][ROWS] tile,
        then write each group's ROWS-long run of s_e (16-byte stores: long DRAM runs, not 128 B)."""
        G = H // 128
        ROWS = rpt * nthr
        U = expert_offsets[E]
        tok = T.alloc_local((rpt,), "int32")
        sv = T.alloc_local((SG,), "float32")
        ov = T.alloc_local((4,), "float32")
        r0 = b * ROWS
        for i in T.unroll(rpt):
            r = r0 + i * nthr + tx
            tok[i] = -1
            if r < U:
                n = slot_of_row[r]
                if n >= 0:
                    tok[i] = n // K
        for gb in T.serial(T.ceildiv(G, SG)):
            for i in T.unroll(rpt):
                if tok[i] >= 0:
                    for v in T.vectorized(SG):
                        sv[v] = s_tok[gb, tok[i], v]
                else:
                    for v in T.unroll(SG):
                        sv[v] = T.float32(0)
                for v in T.unroll(SG):
                    tile[v, i * nthr + tx] = sv[v]
            T.sync_threads()
            for j in T.unroll(SG * rpt // 4):
                g = j // (rpt // 4)
                c = ((j % (rpt // 4)) * nthr + tx) * 4
                if gb * SG + g < G:
                    if r0 + c + 3 < U:
                        for v in T.vectorized(4):
                            ov[v] = tile[g, c + v]
                        for v in T.vectorized(4):
                            s_e[gb * SG + g, r0 + c + v] = ov[v]
                    else:
                        for v in T.serial(4):
                            if r0 + c + v < U:
                                s_e[gb * SG + g, r0 + c + v] = tile[g, c + v]
            T.sync_threads()

    @T.macro
    def move(t, tx, x, x_scale, row_of_slot, x_e, s_e):
        rows = T.alloc_local((K_MAX,), "int32")
        buf = T.alloc_local((unroll * vec,), dtype)
        for j in T.unroll(K_MAX):
            rows[j] = -1
            if j < K:
                rows[j] = row_of_slot[t, j] if diag != 2 else t * K + j
        for c in T.serial(T.ceildiv(H, span * unroll)):
            for u in T.unroll(unroll):
                col = ((c * unroll + u) * threads + tx) * vec
                if col < H:
                    if diag == 1:
                        for v in T.vectorized(vec):
                            buf[u * vec + v] = T.cast(tx, dtype)
                    else:
                        for v in T.vectorized(vec):
                            buf[u * vec + v] = x[t, col + v]
            for j in T.unroll(K_MAX):
                if rows[j] >= 0:
                    for u in T.unroll(unroll):
                        col = ((c * unroll + u) * threads + tx) * vec
                        if col < H:
                            if cs:
                                T.call_extern("handle", "tk_st16_cs", T.address_of(x_e[rows[j], col]),
                                              T.address_of(buf[u * vec]))
                            else:
                                for v in T.vectorized(vec):
                                    x_e[rows[j], col + v] = buf[u * vec + v]
        if layout == "row":
            for c in T.serial(T.ceildiv(H // 128, threads)):
                g = c * threads + tx
                if g < H // 128:
                    sv = x_scale[t, g]
                    for j in T.unroll(K_MAX):
                        if rows[j] >= 0:
                            s_e[rows[j], g] = sv

    NV = hmax // (threads * vec)     # 16-byte vectors a thread holds: the whole row (H <= hmax)

    @T.macro
    def load_tok(buf, rows, t, tx, x, row_of_slot):
        for j in T.unroll(K_MAX):
            rows[j] = -1
            if j < K and t < Tn:
                rows[j] = row_of_slot[t, j]
        for u in T.unroll(NV):
            col = (u * threads + tx) * vec
            if col < H and t < Tn:
                for v in T.vectorized(vec):
                    buf[u * vec + v] = x[t, col + v]

    @T.macro
    def store_tok(buf, rows, t, tx, x_scale, x_e, s_e):
        for j in T.unroll(K_MAX):
            if rows[j] >= 0:
                for u in T.unroll(NV):
                    col = (u * threads + tx) * vec
                    if col < H:
                        T.call_extern("handle", "tk_st16_cs", T.address_of(x_e[rows[j], col]),
                                      T.address_of(buf[u * vec]))
        if layout == "row":
            if t < Tn:
                for c in T.serial(T.ceildiv(H // 128, threads)):
                    g = c * threads + tx
                    if g < H // 128:
                        sv = x_scale[t, g]
                        for j in T.unroll(K_MAX):
                            if rows[j] >= 0:
                                s_e[rows[j], g] = sv

    @T.macro
    def move_pipe(b, tx, x, x_scale, row_of_slot, x_e, s_e):
        """tokens b*tpb .. +tpb; the next token's row is loaded before the current one is stored
        (loads stall behind the write stream: prefetch hides them)."""
        A = T.alloc_local((NV * vec,), dtype)
        B = T.alloc_local((NV * vec,), dtype)
        ra = T.alloc_local((K_MAX,), "int32")
        rb = T.alloc_local((K_MAX,), "int32")
        t0 = b * tpb
        load_tok(A, ra, t0, tx, x, row_of_slot)
        for i in range(tpb // 2):
            load_tok(B, rb, t0 + 2 * i + 1, tx, x, row_of_slot)
            store_tok(A, ra, t0 + 2 * i, tx, x_scale, x_e, s_e)
            if 2 * i + 2 < tpb:
                load_tok(A, ra, t0 + 2 * i + 2, tx, x, row_of_slot)
            store_tok(B, rb, t0 + 2 * i + 1, tx, x_scale, x_e, s_e)

    @T.macro
    def move_bulk(t, tx, x, x_scale, row_of_slot, x_e, s_e, sbuf):
        """token row -> shared, then one bulk (TMA engine) store per expert row."""
        for c in T.serial(T.ceildiv(H, span)):
            col = (c * threads + tx) * vec
            if col < H:
                for v in T.vectorized(vec):
                    sbuf[col + v] = x[t, col + v]
        T.call_extern("handle", "tk_fence_async")
        T.sync_threads()
        if tx < K:
            r = row_of_slot[t, tx]
            if r >= 0:
                T.call_extern("handle", "tk_bulk_store", T.address_of(x_e[r, 0]), T.address_of(sbuf[0]), H * esz)
            T.call_extern("handle", "tk_bulk_commit")
        if layout == "row":
            for c in T.serial(T.ceildiv(H // 128, threads)):
                g = c * threads + tx
                if g < H // 128:
                    sv = x_scale[t, g]
                    for j in T.unroll(K_MAX):
                        if j < K:
                            rr = row_of_slot[t, j]
                            if rr >= 0:
                                s_e[rr, g] = sv
        if tx < K:
            T.call_extern("handle", "tk_bulk_wait")

    merged = layout == "col" and colmode in ("merged", "direct", "merged_all", "merged_tile", "merged_all_direct")
    if colmode == "merged_tile":
        NC = T.ceildiv(R, rpt * threads)
    elif colmode in ("merged_all", "merged_all_direct"):
        NC = T.ceildiv(R, threads)
    else:
        NC = T.ceildiv(R, threads) * T.ceildiv(H // 128, SG) if merged else 0

    @T.macro
    def body(x, x_scale, row_of_slot, slot_of_row, expert_offsets, counts, x_e, s_e, s_tok):
        if layout == "col" and colmode not in ("direct", "merged_all_direct"):
            stage(x_scale, s_tok)
        if layout == "col" and colmode == "all":
            with T.Kernel(T.ceildiv(R, colthreads), threads=colthreads) as b:
                tx = T.get_thread_binding()
                col_all(b * colthreads + tx, s_tok, slot_of_row, expert_offsets, s_e)
        if layout == "col" and colmode == "tile":
            with T.Kernel(T.ceildiv(R, rpt * colthreads), threads=colthreads) as b:
                tx = T.get_thread_binding()
                tile = T.alloc_shared((SG, rpt * colthreads), "float32")
                col_tile(b, tx, colthreads, s_tok, slot_of_row, expert_offsets, s_e, tile)
        if layout == "col" and colmode == "split":
            with T.Kernel(T.ceildiv(R, threads), T.ceildiv(H // 128, SG), threads=threads) as (b, gb):
                tx = T.get_thread_binding()
                col_rows(b * threads + tx, gb, x_scale, s_tok, slot_of_row, expert_offsets, s_e)
        NT = T.ceildiv(Tn, tpb) if tpb else Tn
        with T.Kernel(NC + NT + E * PAD_SPLIT, threads=threads, prelude=BULK if (bulk or cs) else None) as t:
            T.assume(H % vec == 0)
            tx = T.get_thread_binding()
            sbuf = T.alloc_shared((hmax,), dtype) if bulk else None
            tile = T.alloc_shared((SG, rpt * threads), "float32") if colmode == "merged_tile" else None
            if colmode == "merged_tile" and t < NC:
                col_tile(t, tx, threads, s_tok, slot_of_row, expert_offsets, s_e, tile)
            elif colmode == "merged_all" and t < NC:
                col_all(t * threads + tx, s_tok, slot_of_row, expert_offsets, s_e)
            elif colmode == "merged_all_direct" and t < NC:
                col_all(t * threads + tx, s_tok, slot_of_row, expert_offsets, s_e, x_scale)
            elif merged and t < NC:
                nb = T.ceildiv(R, threads)
                col_rows((t % nb) * threads + tx, t // nb, x_scale, s_tok, slot_of_row, expert_offsets, s_e)
            elif t < NC + NT:
                if tpb:
                    move_pipe(t - NC, tx, x, x_scale, row_of_slot, x_e, s_e)
                elif bulk:
                    move_bulk(t - NC, tx, x, x_scale, row_of_slot, x_e, s_e, sbuf)
                else:
                    move(t - NC, tx, x, x_scale, row_of_slot, x_e, s_e)
            else:
                q = t - NC - NT
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
    sxt, sxg = T.dynamic("sxt"), T.dynamic("sxg")
    XS = T.StridedTensor((Tn, H // 128), (sxt, sxg), "float32")
    SE = T.Tensor((R, H // 128) if layout == "row" else (H // 128, (R + 3) // 4 * 4), "float32")
    if layout == "row":
        @T.prim_func
        def moe_expand_fp8(x: X, x_scale: XS, row_of_slot: RS, slot_of_row: SR, expert_offsets: OFF, counts: CNT,
                           x_e: XE, s_e: SE):
            body(x, x_scale, row_of_slot, slot_of_row, expert_offsets, counts, x_e, s_e, None)
        return moe_expand_fp8

    @T.prim_func
    def moe_expand_fp8_colmajor(x: X, x_scale: XS, row_of_slot: RS, slot_of_row: SR, expert_offsets: OFF,
                                counts: CNT, x_e: XE, s_e: SE,
                                s_tok: T.Tensor((T.ceildiv(H // 128, SCALE_GROUPS), Tn, SCALE_GROUPS), "float32")):
        body(x, x_scale, row_of_slot, slot_of_row, expert_offsets, counts, x_e, s_e, s_tok)
    return moe_expand_fp8_colmajor
