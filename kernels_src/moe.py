"""MoE routing: top-k gating (plain and DeepSeek-V3 group-limited), the expert-major mapping,
expand (tokens -> expert-major rows) and combine (weighted sum back), expert counts.

Semantics (TileKernels', made deterministic; shared with tkreg/reference/moe.py):
  scoring (int code; the typed functions take names): 0 none, 1 softmax over E (exp(x - max) / sum),
    2 sigmoid 1 / (1 + exp(-x)), 3 sqrtsoftplus sqrt(x > 20 ? x : log1p(exp(x))); fp32 math, IEEE
    division, precise expf/log1pf/sqrtf (no fast math).
  selection key = score + bias[e] (bias shifts selection only); descending, ties -> lower index.
  group-limited: group score = sum of the group's top-2 keys; the topk_groups best groups
    (ties -> lower group) are kept, the others' keys become -inf; then top-k over all E.
  weights = the unbiased scores of the chosen experts; renormalize: w / max(sum_j w_j, 1e-20) with
    the sum in slot order; then * routed_scaling_factor.  Shared experts (group-limited only) are
    appended as ids E .. E+S-1 with weight 1; a token whose mask is False gets ids -1, weights 0.
  mapping: rows of expert e are expert_offsets[e] .. expert_offsets[e] + counts[e] - 1, in
    ascending token * k + slot (the same on every GPU), then -1 padding up to the aligned offset
    expert_offsets[e + 1]; R = T*k + min(E, T*k) * (alignment - 1) rows are allocated (the
    tight bound: only experts that got a token pad).  Ids outside [0, E) are skipped.
  expand: x_e[r] = x[slot_of_row[r] // k]; padding rows inside [0, expert_offsets[E]) are zero
    (scales too); rows past expert_offsets[E] are not written.
  combine: out[t] = bf16(sum_j w[t, j] * y_e[row_of_slot[t, j]] (+ shared[t])), fp32 products and
    sums rounded separately (no FMA), in slot order; rows of -1 are skipped.

Kernels (thread-level, no tensor cores):
  gate: one warp per token, 4 (8) tokens per CTA; lane l holds experts l, l + 32, ... (emax / 32
    per lane: variants for E <= 128, <= 256 (group-limited) and <= 512); k rounds of a lane-local
    argmax + a 5-step (key, id, weight) butterfly.
  mapping: one 1024-thread CTA (deterministic by construction, no order-dependent atomics): a
    per-warp histogram over 32 contiguous slices of the T*k slots, a scan over warps and experts,
    then each warp places its slice in order (match_any + popc ranks within each 32-slot round).
  expand/combine: one CTA per token, 16-byte vectors; expand reads the token once and writes its
    k rows (evict-first stores), and E x 8 more CTAs of the same grid zero the padding rows;
    column-major fp8 scales: a first launch stages them per token in 8-group chunks (scratch),
    then the head CTAs of the rows' grid write them a thread per row (coalesced along rows);
    combine reads the k rows (k <= 8: a variant with half the registers, evict-first stores).
  expert_counts: a zeroing kernel, then shared-memory histograms of 4096 slots per CTA added with
    global atomics (sums of counts do not depend on their order).
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

FP8 = "float8_e4m3fn"
E_MAX, K_MAX = 512, 16
GATE_WARPS = 4
MAP_THREADS = 1024
MAP_WARPS = MAP_THREADS // 32
MAP_UNROLL = 4
PAD_SPLIT = 8       # CTAs per expert zeroing its padding rows
SCALE_GROUPS = 8    # scale groups per 32-byte chunk of the column-major staging scratch
MOVE_THREADS = 128
COL_THREADS = 256   # column-major expand: fewer, longer scale-writing head CTAs (measured +0.4 points)
# 16-byte store, evict-first (expand's rows are written once and not read back: +0.5-1 point)
STORE_CS = r"""
__device__ __forceinline__ void tk_st16_cs(void* dst, const void* src) {
  uint4 v = *(const uint4*)src;
  asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory"); }
"""
COUNT_SLOTS = 4096  # slots per expert_counts CTA
SCORINGS = {"none": 0, "softmax": 1, "sigmoid": 2, "sqrtsoftplus": 3}
_REF = "tkreg.reference.moe:"


def gate_kernel(dtype: str, grouped: int = 0, warps: int = GATE_WARPS, emax: int = E_MAX):
    """scores[T, E] -> topk_idx, topk_weights [T, k (+ num_shared)]; see the module docstring.
    emax: the largest E served (emax / 32 experts per lane; a smaller emax unrolls less)."""
    import tilelang.language as T

    PER_LANE = emax // 32

    f32 = "float32"
    Tn, E = T.dynamic("T"), T.dynamic("E")
    KS = T.dynamic("n_out" if grouped else "k")   # output width: k, or k + shared experts
    NEG = T.infinity(f32) * T.float32(-1)

    @T.macro
    def grouped_mask(key, valid, lane, n_groups, topk_groups):
        """Keys of experts outside the topk_groups best groups (top-2 sums) -> -inf."""
        gs = E // n_groups
        grp = T.alloc_local((PER_LANE,), "int32")
        m1 = T.alloc_var(f32)
        m2 = T.alloc_var(f32)
        o1 = T.alloc_var(f32)
        o2 = T.alloc_var(f32)
        mys = T.alloc_var(f32)
        rank = T.alloc_var("int32")
        for i in T.unroll(PER_LANE):
            grp[i] = (i * 32 + lane) // gs
        mys = NEG
        for g in T.serial(n_groups):
            m1 = NEG
            m2 = NEG
            for i in T.unroll(PER_LANE):
                if (valid >> T.uint32(i)) & T.uint32(1) != T.uint32(0) and grp[i] == g:
                    if key[i] > m1:
                        m2 = m1
                        m1 = key[i]
                    elif key[i] > m2:
                        m2 = key[i]
            for o in T.unroll(5):
                o1 = T.shfl_xor(m1, 16 >> o)
                o2 = T.shfl_xor(m2, 16 >> o)
                m2 = T.max(T.min(m1, o1), T.max(m2, o2))
                m1 = T.max(m1, o1)
            if lane == g:
                mys = m1 + m2
        rank = 0
        for g in T.serial(n_groups):
            o1 = T.shfl_sync(mys, g)
            if o1 > mys or (o1 == mys and g < lane):
                rank = rank + 1
        keep = T.cast(T.ballot_sync(lane < n_groups and rank < topk_groups), "uint32")
        for i in T.unroll(PER_LANE):
            if (keep >> T.cast(grp[i], "uint32")) & T.uint32(1) == T.uint32(0):
                key[i] = NEG

    @T.macro
    def body(scores, bias, mask, topk_idx, topk_weights, scoring, renormalize, routed_scaling_factor, k,
             n_groups, topk_groups):
        with T.Kernel(T.ceildiv(Tn, warps), threads=warps * 32) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            t = bx * warps + tx // 32
            sc = T.alloc_local((PER_LANE,), f32)     # scores (unbiased)
            key = T.alloc_local((PER_LANE,), f32)    # selection keys
            valid = T.alloc_var("uint32")
            red = T.alloc_var(f32)
            bv = T.alloc_var(f32)
            bi = T.alloc_var("int32")
            bw = T.alloc_var(f32)
            ov = T.alloc_var(f32)
            oi = T.alloc_var("int32")
            ow = T.alloc_var(f32)
            myidx = T.alloc_var("int32")
            myw = T.alloc_var(f32)
            tot = T.alloc_var(f32)
            if t < Tn:                                # warp-uniform
                valid = T.uint32(0)
                for i in T.unroll(PER_LANE):
                    e = i * 32 + lane
                    if e < E:
                        sc[i] = T.cast(scores[t, e], f32)
                        valid = valid | (T.uint32(1) << T.uint32(i))
                    else:
                        sc[i] = NEG
                if scoring == 1:                      # softmax: max, exp, sum, divide
                    red = NEG
                    for i in T.unroll(PER_LANE):
                        red = T.max(red, sc[i])
                    for o in T.unroll(5):
                        red = T.max(red, T.shfl_xor(red, 16 >> o))
                    for i in T.unroll(PER_LANE):
                        if (valid >> T.uint32(i)) & T.uint32(1) != T.uint32(0):
                            sc[i] = T.exp(sc[i] - red)
                        else:
                            sc[i] = T.float32(0)
                    tot = T.float32(0)
                    for i in T.unroll(PER_LANE):
                        tot = tot + sc[i]
                    for o in T.unroll(5):
                        tot = tot + T.shfl_xor(tot, 16 >> o)
                    for i in T.unroll(PER_LANE):
                        sc[i] = T.ieee_fdiv(sc[i], tot)
                elif scoring == 2:                    # sigmoid
                    for i in T.unroll(PER_LANE):
                        sc[i] = T.ieee_fdiv(T.float32(1), T.float32(1) + T.exp(-sc[i]))
                elif scoring == 3:                    # sqrt(softplus), torch's threshold 20
                    for i in T.unroll(PER_LANE):
                        sc[i] = T.sqrt(T.if_then_else(sc[i] > T.float32(20), sc[i], T.log1p(T.exp(sc[i]))))
                for i in T.unroll(PER_LANE):
                    e = i * 32 + lane
                    if T.isnullptr(bias.data) or e >= E:
                        key[i] = sc[i]
                    else:
                        key[i] = sc[i] + bias[e]
                if grouped:
                    grouped_mask(key, valid, lane, n_groups, topk_groups)
                myidx = -1
                myw = T.float32(0)
                for j in T.serial(k):                 # k rounds of argmax
                    bv = NEG
                    bi = -1
                    bw = T.float32(0)
                    for i in T.unroll(PER_LANE):      # ascending ids: strict > keeps the lower
                        if (valid >> T.uint32(i)) & T.uint32(1) != T.uint32(0):
                            if bi < 0 or key[i] > bv:
                                bv = key[i]
                                bi = i * 32 + lane
                                bw = sc[i]
                    for o in T.unroll(5):
                        ov = T.shfl_xor(bv, 16 >> o)
                        oi = T.shfl_xor(bi, 16 >> o)
                        ow = T.shfl_xor(bw, 16 >> o)
                        if oi >= 0 and (bi < 0 or ov > bv or (ov == bv and oi < bi)):
                            bv = ov
                            bi = oi
                            bw = ow
                    if lane == j:
                        myidx = bi
                        myw = bw
                    if bi >= 0 and bi % 32 == lane:
                        valid = valid & ~(T.uint32(1) << T.cast(bi // 32, "uint32"))
                tot = T.float32(0)
                for j in T.serial(k):                 # slot order
                    tot = tot + T.shfl_sync(myw, j)
                if renormalize:
                    myw = T.ieee_fdiv(myw, T.max(tot, T.float32(1e-20)))
                myw = myw * routed_scaling_factor
                if grouped:
                    if lane >= k and lane < KS:
                        myidx = E + lane - k
                        myw = T.float32(1)
                    if not T.isnullptr(mask.data):
                        if not mask[t]:
                            myidx = -1
                            myw = T.float32(0)
                if lane < KS:
                    topk_idx[t, lane] = myidx
                    topk_weights[t, lane] = myw

    Sc = T.Tensor((Tn, E), dtype)
    B = T.Tensor((E,), f32)
    Idx, W = T.Tensor((Tn, KS), "int32"), T.Tensor((Tn, KS), f32)
    if grouped:
        @T.prim_func
        def group_limited_topk_gate(scores: Sc, bias: B, mask: T.Tensor((Tn,), "bool"), topk_idx: Idx,
                                    topk_weights: W, k: T.int32, n_groups: T.int32, topk_groups: T.int32,
                                    scoring: T.int32, renormalize: T.bool, routed_scaling_factor: T.float32):
            body(scores, bias, mask, topk_idx, topk_weights, scoring, renormalize, routed_scaling_factor, k,
                 n_groups, topk_groups)
        return group_limited_topk_gate

    @T.prim_func
    def topk_gate(scores: Sc, bias: B, topk_idx: Idx, topk_weights: W, scoring: T.int32,
                  renormalize: T.bool, routed_scaling_factor: T.float32):
        body(scores, bias, None, topk_idx, topk_weights, scoring, renormalize, routed_scaling_factor, KS, 1, 1)
    return topk_gate


def mapping_kernel(threads: int = MAP_THREADS, unroll: int = MAP_UNROLL):
    """topk_idx[T, K] -> expert_offsets[E + 1], counts[E], slot_of_row[R], row_of_slot[T, K]."""
    import tilelang.language as T

    Tn, K = T.dynamic("T"), T.dynamic("K")
    E, R = T.dynamic("E"), T.dynamic("R")   # R: the typed function's padded bound (a rule checks it)
    N = Tn * K
    W = threads // 32
    ROUND = 32 * unroll

    @T.prim_func
    def moe_mapping(topk_idx: T.Tensor((Tn, K), "int32"), expert_offsets: T.Tensor((E + 1,), "int32"),
                    counts: T.Tensor((E,), "int32"), slot_of_row: T.Tensor((R,), "int32"),
                    row_of_slot: T.Tensor((Tn, K), "int32"), alignment: T.int32):
        with T.Kernel(1, threads=threads) as _:
            tx = T.get_thread_binding()
            lane = tx % 32
            w = tx // 32
            cnt = T.alloc_shared((W, E_MAX), "int32")     # per warp: count, then its first row
            scan = T.alloc_shared((2, E_MAX), "int32")
            ids = T.alloc_local((unroll,), "int32")
            run = T.alloc_var("int32")
            al = T.alloc_var("int32")
            v = T.alloc_var("int32")
            base = T.alloc_var("int32")
            L = T.ceildiv(T.ceildiv(N, W), ROUND) * ROUND      # slots per warp slice
            start = w * L
            for i in T.serial(W * E_MAX // threads):
                cnt[(i * threads + tx) // E_MAX, (i * threads + tx) % E_MAX] = 0
            for it in T.serial(T.ceildiv(R, threads)):
                if it * threads + tx < R:
                    slot_of_row[it * threads + tx] = -1
            T.sync_threads()
            # 1. per-warp histograms
            for it in T.serial(L // 32):
                n = start + it * 32 + lane
                if n < N:
                    v = topk_idx[n // K, n % K]
                    if v >= 0 and v < E:
                        T.atomic_add(cnt[w, v], 1)
            T.sync_threads()
            # 2. per expert: each warp's first rank, the count, the aligned exclusive scan
            al = 0
            if tx < E:
                run = 0
                for ww in T.unroll(W):
                    v = cnt[ww, tx]
                    cnt[ww, tx] = run
                    run = run + v
                counts[tx] = run
                al = (run + alignment - 1) // alignment * alignment
            if tx < E_MAX:
                scan[0, tx] = al
            for d in T.unroll(9):                        # Hillis-Steele over 512 entries
                T.sync_threads()
                if tx < E_MAX:
                    v = scan[d % 2, tx]
                    if tx >= (1 << d):
                        v = v + scan[d % 2, tx - (1 << d)]
                    scan[(d + 1) % 2, tx] = v
            T.sync_threads()
            if tx < E:
                base = scan[1, tx] - al
                expert_offsets[tx] = base
                if tx == E - 1:
                    expert_offsets[E] = scan[1, tx]
                for ww in T.unroll(W):
                    cnt[ww, tx] = cnt[ww, tx] + base
            T.sync_threads()
            # 3. each warp places its slice in slot order
            for it in T.serial(L // ROUND):
                for u in T.unroll(unroll):
                    n = start + it * ROUND + u * 32 + lane
                    ids[u] = -1
                    if n < N:
                        ids[u] = topk_idx[n // K, n % K]
                        if ids[u] < 0 or ids[u] >= E:
                            ids[u] = -1
                for u in T.unroll(unroll):
                    n = start + it * ROUND + u * 32 + lane
                    peers = T.match_any_sync(ids[u])
                    rank = T.cast(T.popcount(peers & ((T.uint32(1) << T.cast(lane, "uint32")) - T.uint32(1))), "int32")
                    base = 0
                    if ids[u] >= 0:
                        base = cnt[w, ids[u]]
                    T.sync_warp()
                    if ids[u] >= 0 and rank == 0:
                        cnt[w, ids[u]] = base + T.cast(T.popcount(peers), "int32")
                    T.sync_warp()
                    if n < N:
                        if ids[u] >= 0:
                            row_of_slot[n // K, n % K] = base + rank
                            slot_of_row[base + rank] = n
                        else:
                            row_of_slot[n // K, n % K] = -1

    return moe_mapping


def expand_kernel(dtype: str = "bfloat16", layout: str = "", unroll: int = 2, threads: int = 0):
    """x[T, H] -> x_e[R, H] expert-major (fp8: with its 1x128 scales); see the module docstring."""
    import tilelang.language as T
    threads = threads or (COL_THREADS if layout == "col" else MOVE_THREADS)

    Tn, H, K = T.dynamic("T"), T.dynamic("H"), T.dynamic("K")
    R, E = T.dynamic("R"), T.dynamic("E")
    fp8 = dtype == FP8
    vec = 16 if fp8 else 8          # 16 bytes per thread per load
    span = threads * vec
    SG = SCALE_GROUPS

    @T.macro
    def pad_rows(p, e, tx, counts, expert_offsets, x_e, s_e):
        """Zero expert e's padding rows offsets[e] + counts[e] + p, + PAD_SPLIT, .. < offsets[e + 1]
        (row-major scales too)."""
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
    def stage_scales(x_scale, s_tok):
        """Column-major scales, step 1 (its own launch): the strided x_scale staged as
        s_tok[g // 8, t, g % 8] (a thread per token and 8 groups: one 32-byte store, coalesced
        across tokens), so step 2 loads 8 of a row's scales in one 32-byte L2 sector."""
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
    def row_scales(r, s_tok, slot_of_row, expert_offsets, s_e):
        """Column-major scales, step 2 (the head CTAs of the rows' grid, while s_tok is in L2, so
        its 33 MB of stores overlap the rows' stream): a thread per row writes s_e[g, r] for every
        g (0 for padding), coalesced along r.  (A per-token scatter writes a sector per value; a
        separate launch after the rows reads s_tok from DRAM; one before them costs its own tail.)"""
        G = H // 128
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

    @T.macro
    def move(t, tx, x, x_scale, row_of_slot, x_e, s_e):
        """Token t's row to its k expert-major rows (and its row-major scales)."""
        rows = T.alloc_local((K_MAX,), "int32")
        buf = T.alloc_local((unroll * vec,), dtype)
        for j in T.unroll(K_MAX):
            rows[j] = -1
            if j < K:
                rows[j] = row_of_slot[t, j]
        for c in T.serial(T.ceildiv(H, span * unroll)):
            for u in T.unroll(unroll):
                col = ((c * unroll + u) * threads + tx) * vec
                if col < H:
                    for v in T.vectorized(vec):
                        buf[u * vec + v] = x[t, col + v]
            for j in T.unroll(K_MAX):
                if rows[j] >= 0:
                    for u in T.unroll(unroll):
                        col = ((c * unroll + u) * threads + tx) * vec
                        if col < H:   # streaming stores: the rows are not read back here
                            T.call_extern("handle", "tk_st16_cs", T.address_of(x_e[rows[j], col]),
                                          T.address_of(buf[u * vec]))
        if layout == "row":
            for c in T.serial(T.ceildiv(H // 128, threads)):
                g = c * threads + tx
                if g < H // 128:
                    sv = x_scale[t, g]
                    for j in T.unroll(K_MAX):
                        if rows[j] >= 0:
                            s_e[rows[j], g] = sv

    NC = T.ceildiv(R, threads) if layout == "col" else 0    # head CTAs writing column-major scales

    @T.macro
    def body(x, x_scale, row_of_slot, slot_of_row, expert_offsets, counts, x_e, s_e, s_tok):
        if layout == "col":
            stage_scales(x_scale, s_tok)
        # the padding rows' CTAs ride in the same grid, after the tokens': one launch, no tail between
        with T.Kernel(NC + Tn + E * PAD_SPLIT, threads=threads, prelude=STORE_CS) as t:
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


def combine_kernel(unroll: int = 1, kmax: int = K_MAX, threads: int = MOVE_THREADS, cs: int = 0):
    """y_e[R, H] -> out[T, H] = sum_j w[t, j] * y_e[row_of_slot[t, j]] (+ shared[t]), fp32, bf16 out.

    A CTA per token, 16-byte vectors; a thread issues the loads of `unroll` chunks (kmax rows each)
    before it sums the first; kmax: the largest k the variant serves (registers: kmax x unroll
    vectors); cs: evict-first stores."""
    import tilelang.language as T

    Tn, H, K, R = T.dynamic("T"), T.dynamic("H"), T.dynamic("K"), T.dynamic("R")
    vec, dt, f32 = 8, "bfloat16", "float32"
    span = threads * vec * unroll

    @T.prim_func
    def moe_combine(y_e: T.Tensor((R, H), dt), row_of_slot: T.Tensor((Tn, K), "int32"),
                    topk_weights: T.Tensor((Tn, K), f32), shared: T.Tensor((Tn, H), dt),
                    out: T.Tensor((Tn, H), dt)):
        with T.Kernel(Tn, threads=threads, **(dict(prelude=STORE_CS) if cs else {})) as t:
            T.assume(H % vec == 0)
            tx = T.get_thread_binding()
            rows = T.alloc_local((kmax,), "int32")
            wts = T.alloc_local((kmax,), f32)
            yv = T.alloc_local((unroll * kmax * vec,), dt)
            sv = T.alloc_local((unroll * vec,), dt)
            acc = T.alloc_local((vec,), f32)
            ov = T.alloc_local((vec,), dt)
            for j in T.unroll(kmax):
                rows[j] = -1
                wts[j] = T.float32(0)
                if j < K:
                    rows[j] = row_of_slot[t, j]
                    wts[j] = topk_weights[t, j]
            for c in T.serial(T.ceildiv(H, span)):
                for u in T.unroll(unroll):                # every load first
                    col = ((c * unroll + u) * threads + tx) * vec
                    if col < H:
                        for j in T.unroll(kmax):
                            if rows[j] >= 0:
                                for v in T.vectorized(vec):
                                    yv[(u * kmax + j) * vec + v] = y_e[rows[j], col + v]
                        if not T.isnullptr(shared.data):
                            for v in T.vectorized(vec):
                                sv[u * vec + v] = shared[t, col + v]
                for u in T.unroll(unroll):
                    col = ((c * unroll + u) * threads + tx) * vec
                    if col < H:
                        for v in T.unroll(vec):
                            acc[v] = T.float32(0)
                        for j in T.unroll(kmax):
                            if rows[j] >= 0:
                                for v in T.unroll(vec):
                                    acc[v] = T.ieee_add(acc[v], T.ieee_mul(wts[j], T.cast(yv[(u * kmax + j) * vec + v], f32)))
                        if not T.isnullptr(shared.data):
                            for v in T.unroll(vec):
                                acc[v] = T.ieee_add(acc[v], T.cast(sv[u * vec + v], f32))
                        for v in T.unroll(vec):
                            ov[v] = T.cast(acc[v], dt)
                        if cs:
                            T.call_extern("handle", "tk_st16_cs", T.address_of(out[t, col]), T.address_of(ov[0]))
                        else:
                            for v in T.vectorized(vec):
                                out[t, col + v] = ov[v]

    return moe_combine


def counts_kernel(threads: int = 256):
    """topk_idx[T, K] -> counts[E] int32 (ids outside [0, E) skipped)."""
    import tilelang.language as T

    Tn, K, E = T.dynamic("T"), T.dynamic("K"), T.dynamic("E")
    N = Tn * K
    per = COUNT_SLOTS // threads

    @T.prim_func
    def expert_counts(topk_idx: T.Tensor((Tn, K), "int32"), counts: T.Tensor((E,), "int32")):
        with T.Kernel(1, threads=E_MAX) as _:
            tx = T.get_thread_binding()
            if tx < E:
                counts[tx] = 0
        with T.Kernel(T.ceildiv(N, COUNT_SLOTS), threads=threads) as b:
            tx = T.get_thread_binding()
            h = T.alloc_shared((E_MAX,), "int32")
            v = T.alloc_var("int32")
            for i in T.serial(E_MAX // threads):
                h[i * threads + tx] = 0
            T.sync_threads()
            for i in T.unroll(per):
                n = b * COUNT_SLOTS + i * threads + tx
                if n < N:
                    v = topk_idx[n // K, n % K]
                    if v >= 0 and v < E:
                        T.atomic_add(h[v], 1)
            T.sync_threads()
            for i in T.serial(E_MAX // threads):
                e = i * threads + tx
                if e < E:
                    if h[e] > 0:
                        T.atomic_add(counts[e], h[e])

    return expert_counts


# ---- specs ----------------------------------------------------------------------------------
GATE_DTYPES = ("float32", "bfloat16")
_GATE_RULE = f"E <= {E_MAX} and k >= 1 and k <= {K_MAX} and k <= E"
_GROUPED_RULE = _GATE_RULE + (" and n_groups >= 1 and n_groups <= 32 and E % n_groups == 0 and E // n_groups >= 2"
                              " and topk_groups >= 1 and topk_groups <= n_groups and n_out >= k and n_out <= 32")


def _gate_scalars(default_scoring, default_renorm):
    return (Scalar("scoring", "int32", SCORINGS[default_scoring]), Scalar("renormalize", "bool", default_renorm),
            Scalar("routed_scaling_factor", "float32", 1.0))


def _gate_outputs(ks):
    return (Tensor("topk_idx", ("T", ks), dtype="int32", role="output"),
            Tensor("topk_weights", ("T", ks), dtype="float32", role="output"))


_MOVE_RULE = "K <= 16"
MAP_R = "R == T * K + min(E, T * K) * (alignment - 1)"   # the padded bound (tilelang cannot solve it)
_MAP_IN = (Tensor("row_of_slot", ("T", "K"), dtype="int32"), Tensor("slot_of_row", ("R",), dtype="int32"),
           Tensor("expert_offsets", ("E + 1",), dtype="int32"), Tensor("counts", ("E",), dtype="int32"))


def _expand_fp8_spec(name, layout):
    s_e = ("R", "H // 128") if layout == "row" else ("H // 128", "(R + 3) // 4 * 4")
    return OpSpec(
        name=name,
        doc="x[T, H] e4m3 + x_scale[T, H // 128] fp32 (any strides) -> x_e[R, H] e4m3, s_e "
            + ("[R, H // 128] (row-major)" if layout == "row" else "[H // 128, ceil(R / 4) * 4] (column-major)")
            + "; H % 128 == 0",
        tensors=(Tensor("x", ("T", "H"), dtypes=(FP8,)),
                 Tensor("x_scale", ("T", "H // 128"), dtype="float32", strides=("sxt", "sxg")))
        + _MAP_IN
        + (Tensor("x_e", ("R", "H"), dtype_of="x", role="output"),
           Tensor("s_e", s_e, dtype="float32", role="output"))
        + ((Tensor("s_tok", (f"(H // 128 + {SCALE_GROUPS - 1}) // {SCALE_GROUPS}", "T", SCALE_GROUPS),
                   dtype="float32", role="scratch"),) if layout == "col" else ()),
        factory=expand_kernel,
        variants=(Variant(dict(dtype=FP8, layout=layout), rule=f"H % 128 == 0 and E <= 65535 and {_MOVE_RULE}"),),
        reference=_REF + name.split(".")[1], backward=None)


SPECS = (
    OpSpec(
        name="tkreg.topk_gate",
        doc="scores[T, E] (fp32/bf16, E <= 512) -> top-k expert ids [T, k] int32 (descending, ties to the "
            "lower id) and fp32 weights; scoring 0 none / 1 softmax / 2 sigmoid / 3 sqrtsoftplus, optional "
            "selection bias[E] fp32",
        tensors=(Tensor("scores", ("T", "E"), dtypes=GATE_DTYPES),
                 Tensor("bias", ("E",), dtype="float32", optional=True)) + _gate_outputs("k"),
        scalars=(Scalar("k", "int32"),) + _gate_scalars("softmax", False),
        factory=gate_kernel,
        # E <= 128 (Qwen, Mixtral, Llama 4) unrolls 4 experts per lane instead of 16: 2.2x at T = 16384
        variants=tuple(v for d in GATE_DTYPES for v in (
            Variant(dict(dtype=d, emax=128, warps=8), rule=_GATE_RULE + " and E <= 128", priority=1),
            Variant(dict(dtype=d), rule=_GATE_RULE))),
        reference=_REF + "topk_gate"),
    OpSpec(
        name="tkreg.group_limited_topk_gate",
        doc="DeepSeek-V3 routing: top-k over the topk_groups groups (of E / n_groups experts) with the best "
            "top-2 biased sums; n_out - k shared experts appended (ids E.., weight 1); mask[T] False -> ids -1",
        tensors=(Tensor("scores", ("T", "E"), dtypes=GATE_DTYPES),
                 Tensor("bias", ("E",), dtype="float32", optional=True),
                 Tensor("mask", ("T",), dtype="bool", optional=True)) + _gate_outputs("n_out"),
        scalars=(Scalar("k", "int32"), Scalar("n_groups", "int32"), Scalar("topk_groups", "int32"),
                 Scalar("n_out", "int32")) + _gate_scalars("sigmoid", True),
        factory=gate_kernel,
        variants=tuple(v for d in GATE_DTYPES for v in (      # E <= 256 (DeepSeek-V3): 8 experts per lane
            Variant(dict(dtype=d, grouped=1, emax=256), rule=_GROUPED_RULE + " and E <= 256", priority=1),
            Variant(dict(dtype=d, grouped=1), rule=_GROUPED_RULE))),
        reference=_REF + "group_limited_topk_gate"),
    OpSpec(
        name="tkreg.moe_mapping",
        doc="topk_idx[T, K] int32 -> expert_offsets[E + 1] (aligned), counts[E], slot_of_row[R] (-1 padding), "
            "row_of_slot[T, K]; R = T*K + min(E, T*K) * (alignment - 1); canonical in-segment order",
        tensors=(Tensor("topk_idx", ("T", "K"), dtype="int32"),
                 Tensor("expert_offsets", ("E + 1",), dtype="int32", role="output"),
                 Tensor("counts", ("E",), dtype="int32", role="output"),
                 Tensor("slot_of_row", ("R",), dtype="int32", role="output"),
                 Tensor("row_of_slot", ("T", "K"), dtype="int32", role="output")),
        scalars=(Scalar("E", "int32"), Scalar("alignment", "int32"), Scalar("R", "int32")),
        factory=mapping_kernel,
        # every barrier is written out: tilelang's sync pass would add two per placing round
        variants=(Variant({}, rule=f"E >= 1 and E <= {E_MAX} and alignment >= 1 and {MAP_R}",
                          pass_configs={"tl.disable_thread_storage_sync": True,
                                        "tl.disable_safe_memory_legalize": True}),),
        reference=_REF + "moe_mapping"),
    OpSpec(
        name="tkreg.moe_expand",
        doc="x[T, H] bf16 -> x_e[R, H] in expert-major order (padding rows zero, rows past "
            "expert_offsets[E] unwritten); H % 8 == 0",
        tensors=(Tensor("x", ("T", "H"), dtypes=("bfloat16",)),) + _MAP_IN
        + (Tensor("x_e", ("R", "H"), dtype_of="x", role="output"),),
        factory=expand_kernel,
        variants=(Variant(dict(dtype="bfloat16"), rule=f"H % 8 == 0 and E <= 65535 and {_MOVE_RULE}"),),
        reference=_REF + "moe_expand", backward="tkreg.ops.moe:ExpandBackward"),
    _expand_fp8_spec("tkreg.moe_expand_fp8", "row"),
    _expand_fp8_spec("tkreg.moe_expand_fp8_colmajor", "col"),
    OpSpec(
        name="tkreg.moe_combine",
        doc="y_e[R, H] bf16 -> out[T, H] = bf16(sum_j topk_weights[t, j] * y_e[row_of_slot[t, j]] (+ shared[t])), "
            "fp32 in slot order; H % 8 == 0",
        tensors=(Tensor("y_e", ("R", "H"), dtypes=("bfloat16",)),
                 Tensor("row_of_slot", ("T", "K"), dtype="int32"),
                 Tensor("topk_weights", ("T", "K"), dtype="float32"),
                 Tensor("shared", ("T", "H"), dtype_of="y_e", optional=True),
                 Tensor("out", ("T", "H"), dtype_of="y_e", role="output")),
        factory=combine_kernel,
        # k <= 8 (DeepSeek-V3's 8): half the registers, 5 CTAs/SM instead of 3, evict-first stores,
        # 1.11-1.16x the k <= 16 kernel on the H200; up to 128 tokens (at most a CTA an SM) 256
        # threads, 1.39x at 64 tokens (docs/sweeps/moe_combine.py)
        variants=(Variant(dict(kmax=8, threads=256), rule="H % 8 == 0 and K <= 8 and T <= 128", priority=2),
                  Variant(dict(kmax=8, cs=1), rule="H % 8 == 0 and K <= 8", priority=1),
                  Variant({}, rule=f"H % 8 == 0 and {_MOVE_RULE}")),
        reference=_REF + "moe_combine", backward="tkreg.ops.moe:CombineBackward"),
    OpSpec(
        name="tkreg.expert_counts",
        doc="topk_idx[T, K] int32 -> tokens per expert [E] int32 (ids outside [0, E) skipped)",
        tensors=(Tensor("topk_idx", ("T", "K"), dtype="int32"),
                 Tensor("counts", ("E",), dtype="int32", role="output")),
        scalars=(Scalar("E", "int32"),),
        factory=counts_kernel,
        variants=(Variant({}, rule=f"E >= 1 and E <= {E_MAX}"),),
        reference=_REF + "expert_counts"),
)
