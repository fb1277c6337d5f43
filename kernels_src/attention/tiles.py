"""What the three flash attention kernels share (prefill.py's tiled kernel, warp_specialized.py on
sm_90a, tcgen05.py on sm_100a): the ops' signatures and the one-CTA-a-row-block grid, where a Q or
K/V tile lies (fixed-length [B, S, H, D] or varlen-packed [T, H, D]), how many K/V tiles a block of
query rows sees, the mask of a tile's scores, and the softmax scale and lse in the exp2 domain.
"""
LOG2E = 1.4426950408889634
MASKED = -1e30   # not -inf: a row masked in a whole tile must not give exp2(-inf + inf) = NaN

# exp2 -> ex2.approx (the build passes nvcc --use_fast_math for it): 2 ulp, far inside the accuracy bar
FAST_EXP = {"tl.enable_fast_math": True}
# the warp-specialized kernels: tilelang's automatic __syncthreads would deadlock in their
# role-divergent code, so it is off (they place their own barriers)
WARP_SPECIALIZED_PASS_CONFIGS = {"tl.disable_thread_storage_sync": True, "tl.enable_fast_math": True}


def fixed_types(T, HQ, HK, D: int, dtype: str):
    """Run-time sizes and buffer types of the fixed-length op's signature: (B, Sq, Sk, q, k, v, out,
    lse).  q/k/v may be strided views (only the head dim must be contiguous)."""
    B, Sq, Sk = T.dynamic("B"), T.dynamic("Sq"), T.dynamic("Sk")
    sqb, sqs, sqh, skb, sks, skh, svb, svs, svh = (T.dynamic(n) for n in (
        "sqb", "sqs", "sqh", "skb", "sks", "skh", "svb", "svs", "svh"))
    return (B, Sq, Sk, T.StridedTensor((B, Sq, HQ, D), (sqb, sqs, sqh, 1), dtype),
            T.StridedTensor((B, Sk, HK, D), (skb, sks, skh, 1), dtype),
            T.StridedTensor((B, Sk, HK, D), (svb, svs, svh, 1), dtype),
            T.Tensor((B, Sq, HQ, D), dtype), T.Tensor((B, HQ, Sq), "float32"))


def varlen_types(T, HQ, HK, D: int, dtype: str):
    """Run-time sizes and buffer types of the varlen op's packed tensors: (TQ, TK, NB, q, k, v, out,
    lse); cu_seqlens_q / cu_seqlens_k are int32 [NB]."""
    TQ, TK, NB = T.dynamic("TQ"), T.dynamic("TK"), T.dynamic("NB")
    sqs, sqh, sks, skh, svs, svh = (T.dynamic(n) for n in ("sqs", "sqh", "sks", "skh", "svs", "svh"))
    return (TQ, TK, NB, T.StridedTensor((TQ, HQ, D), (sqs, sqh, 1), dtype),
            T.StridedTensor((TK, HK, D), (sks, skh, 1), dtype), T.StridedTensor((TK, HK, D), (svs, svh, 1), dtype),
            T.Tensor((TQ, HQ, D), dtype), T.Tensor((HQ, TQ), "float32"))


def grid_prim_func(T, body, varlen: bool, HQ, HK, D: int, dtype: str, block_M: int, threads: int):
    """The tiled and tcgen05 kernels' grid: (row blocks, HQ, batch) CTAs, each running
    body(q, k, v, out, lse, causal, softmax_scale, bx, h, b, Sq, Sk, q0, k0) (q0 / k0: the
    sequence's first packed row, varlen; else 0).  HQ / HK: the factory's own symbols, the ones its
    body names (T.dynamic makes a new variable per call).  Varlen: packed [total, H, D] with int32
    cu_seqlens; CTAs past their sequence's end exit at once."""
    if varlen:
        TQ, TK, NB, Q, K, V, O, LSE = varlen_types(T, HQ, HK, D, dtype)

        @T.prim_func
        def flash_attention_varlen(q: Q, k: K, v: V, cu_seqlens_q: T.Tensor((NB,), "int32"),
                                   cu_seqlens_k: T.Tensor((NB,), "int32"), out: O, lse: LSE,
                                   max_seqlen_q: T.int32, causal: T.bool, softmax_scale: T.float32):
            with T.Kernel(T.ceildiv(max_seqlen_q, block_M), HQ, NB - 1, threads=threads) as (bx, h, b):
                q0, k0 = cu_seqlens_q[b], cu_seqlens_k[b]
                Sq, Sk = cu_seqlens_q[b + 1] - q0, cu_seqlens_k[b + 1] - k0
                if bx * block_M < Sq:
                    body(q, k, v, out, lse, causal, softmax_scale, bx, h, b, Sq, Sk, q0, k0)
        return flash_attention_varlen

    B, Sq, Sk, Q, K, V, O, LSE = fixed_types(T, HQ, HK, D, dtype)

    @T.prim_func
    def flash_attention(q: Q, k: K, v: V, out: O, lse: LSE, causal: T.bool, softmax_scale: T.float32):
        with T.Kernel(T.ceildiv(Sq, block_M), HQ, B, threads=threads) as (bx, h, b):
            body(q, k, v, out, lse, causal, softmax_scale, bx, h, b, Sq, Sk, 0, 0)
    return flash_attention


def kv_tile(src, varlen: bool, block_N: int, b, k0, t, h):
    """K/V tile t (block_N keys of KV head h): from row k0 of a packed tensor, or of batch b."""
    if varlen:
        return src[k0 + t * block_N:k0 + (t + 1) * block_N, h, :]
    return src[b, t * block_N:(t + 1) * block_N, h, :]


def q_tile(q, varlen: bool, rows: int, b, h, q0, rows0):
    """`rows` query rows of head h from row rows0 of the sequence (packed from q0, or batch b)."""
    if varlen:
        return q[q0 + rows0:q0 + rows0 + rows, h, :]
    return q[b, rows0:rows0 + rows, h, :]


def tiles_seen(T, block_N: int, causal, r0, rows: int, Sq, Sk):
    """The K/V tiles query rows r0 .. r0 + rows - 1 see: every tile, or under the (bottom-right
    aligned) causal mask those up to the last row's diagonal."""
    return T.if_then_else(causal, T.max(T.min(T.ceildiv(Sk, block_N), T.ceildiv(r0 + rows + Sk - Sq, block_N)), 0),
                          T.ceildiv(Sk, block_N))


def tile_masker(T, rows: int, block_N: int):
    """Macro mask(acc, t, rows0, off, Sk, causal): scores of keys past Sk, and under the causal mask
    of keys past a row's diagonal (query i sees keys j <= i + off, off = Sk - Sq), become MASKED;
    only tile t's that need it (the sequence tail, the causal diagonal band) are touched."""
    @T.macro
    def mask(acc, t, rows0, off, Sk, causal):
        if (t + 1) * block_N > Sk or (causal and (t + 1) * block_N - 1 > rows0 + off):
            for i, j in T.Parallel(rows, block_N):
                acc[i, j] = T.if_then_else(
                    t * block_N + j >= Sk or (causal and rows0 + i + off < t * block_N + j), MASKED, acc[i, j])
    return mask


def log2_scale(T, softmax_scale, D: int):
    """The softmax scale times log2(e) (the kernels run exp2); softmax_scale 0 means 1 / sqrt(D)."""
    return T.if_then_else(softmax_scale > 0, softmax_scale, T.rsqrt(T.cast(D, "float32"))) * LOG2E


def lse_value(T, seen, l, m, scale):
    """A row's natural-log lse from its running sum l and max m (raw scores, `scale` = log2_scale);
    -inf for a row that saw no key."""
    return T.if_then_else(seen, (T.log2(l) + m * scale) / LOG2E, -T.infinity("float32"))


def saw_a_key(T, l, causal, row, off):
    """Whether query `row` saw any key: under the causal mask exactly the rows with row + off >= 0
    (they all see key 0, in the first tile); else every row, unless Sk = 0 (then no tile ran: l = 0)."""
    return T.And(l > 0, T.Or(T.Not(causal), row + off >= 0))


def lse_writer(T, varlen: bool, rows: int):
    """Macro write(lse, l, m, scale, causal, b, h, q0, rows0, off, Sq): the lse of query rows
    rows0 .. rows0 + rows - 1 below Sq, from their fragments l and m (one entry a row)."""
    @T.macro
    def write(lse, l, m, scale, causal, b, h, q0, rows0, off, Sq):
        for i in T.Parallel(rows):
            if rows0 + i < Sq:
                v_ = lse_value(T, saw_a_key(T, l[i], causal, rows0 + i, off), l[i], m[i], scale)
                if varlen:
                    lse[h, q0 + rows0 + i] = v_
                else:
                    lse[b, h, rows0 + i] = v_
    return write


def softmax_update(T, rows: int, block_N: int):
    """Macro update(acc, m, m_prev, rescale, row_sum, l, scale), once the running max m of a tile's
    rows is known: rescale = exp2 of the old max minus the new (scaled), acc's scores -> P = their
    exp2 against m, and l -> l * rescale + P's row sums."""
    @T.macro
    def update(acc, m, m_prev, rescale, row_sum, l, scale):
        for i in T.Parallel(rows):
            rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
        for i, j in T.Parallel(rows, block_N):
            acc[i, j] = T.exp2(acc[i, j] * scale - m[i] * scale)
        T.reduce_sum(acc, row_sum, dim=1)
        for i in T.Parallel(rows):
            l[i] = l[i] * rescale[i] + row_sum[i]
    return update


def output_writer(T, varlen: bool, rows: int, D: int):
    """Macro store(out, o_s, b, h, q0, rows0, Sq): a tile's output rows from shared memory, those
    below Sq: row by row into the packed tensor (varlen: never past the sequence), else one TMA
    store (clipped at Sq)."""
    @T.macro
    def store(out, o_s, b, h, q0, rows0, Sq):
        if varlen:
            for i, j in T.Parallel(rows, D):
                if rows0 + i < Sq:
                    out[q0 + rows0 + i, h, j] = o_s[i, j]
        else:
            T.copy(o_s, out[b, rows0:rows0 + rows, h, :])
    return store
