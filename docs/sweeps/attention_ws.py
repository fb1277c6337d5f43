"""NOT SHIPPED: a Hopper flash attention forward, FlashAttention-3 style (after TileOPs'
`gqa_fwd_ws.py`), kept as the starting point for the next attention pass.  It is correct (varlen
bit-identical to fixed-length, every sweep check passed) but measured slower than the shipped
kernel on the H200: 280-357 TFLOP/s at d128 against 431-509 (docs/attention-tuning.md).  The
difference from TileOPs' kernel is persistence: TileOPs keeps 132 CTAs and overlaps one tile's
epilogue with the next tile's loads; this one launches a CTA per 128 query rows.

One CTA = 128 query rows of one head, three warpgroups:
  producer  (threads 0-127)    TMA-loads K and V tiles into two-slot rings (mbarriers full/empty);
  consumers (128-255, 256-383) 64 query rows each: S = Q K^T and O += P V on WGMMA, issued async.
Two overlaps hide the softmax: inside a consumer, S of tile n is issued together with P V of tile
n - 1, and the softmax of tile n runs while that P V is in flight; across consumers, named barriers
1 and 2 make them take turns issuing WGMMAs ("ping-pong"), so one's softmax covers the other's
matmuls.  Masks (causal, the sequence tail) are applied to S only on tiles that need them.
Semantics, masks and varlen addressing as kernels_src/attention.py describes.
"""
LOG2E = 1.4426950408889634
MASKED = -1e30
# tilelang's automatic __syncthreads would deadlock inside warpgroup-divergent code: the kernel
# places its own barriers.  exp2 -> ex2.approx.
PASS_CONFIGS = {"tl.disable_thread_storage_sync": True, "tl.enable_fast_math": True}


def attention_ws_kernel(dim: int, varlen: bool, block_N: int = 128, dtype: str = "bfloat16"):
    import tilelang
    import tilelang.language as T

    f32, D, half = "float32", dim, 64
    block_M = 2 * half
    HQ, HK = T.dynamic("HQ"), T.dynamic("HK")
    sqs, sqh, sks, skh, svs, svh = (T.dynamic(n) for n in ("sqs", "sqh", "sks", "skh", "svs", "svh"))
    full_row = T.GemmWarpPolicy.FullRow

    @T.macro
    def load_tile(src, b, hk, k0, t, slot0, slot1, slot, bar):
        if slot == 0:
            if varlen:
                T.tma_copy(src[k0 + t * block_N:k0 + (t + 1) * block_N, hk, :], slot0, barrier=bar)
            else:
                T.tma_copy(src[b, t * block_N:(t + 1) * block_N, hk, :], slot0, barrier=bar)
        else:
            if varlen:
                T.tma_copy(src[k0 + t * block_N:k0 + (t + 1) * block_N, hk, :], slot1, barrier=bar)
            else:
                T.tma_copy(src[b, t * block_N:(t + 1) * block_N, hk, :], slot1, barrier=bar)
        T.barrier_arrive(bar)

    @T.macro
    def qk(q_s, k0_s, k1_s, acc_s, slot):
        if slot == 0:
            T.wgmma_gemm(q_s, k0_s, acc_s, transpose_B=True, policy=full_row, clear_accum=True)
        else:
            T.wgmma_gemm(q_s, k1_s, acc_s, transpose_B=True, policy=full_row, clear_accum=True)

    @T.macro
    def pv(acc_p, v0_s, v1_s, acc_o, slot):
        if slot == 0:
            T.wgmma_gemm(acc_p, v0_s, acc_o, policy=full_row)
        else:
            T.wgmma_gemm(acc_p, v1_s, acc_o, policy=full_row)

    @T.macro
    def stats(acc_s, m, m_prev, rescale, row_sum, l, t, rows0, off, Sk, causal, scale):
        # Online-softmax statistics of tile t; touches neither acc_o nor acc_p, so it runs while
        # the previous tile's P V is still in flight.  Only tiles that need a mask get one: the
        # sequence tail, and for causal the band around the diagonal.
        if (t + 1) * block_N > Sk or (causal and (t + 1) * block_N - 1 > rows0 + off):
            for i, j in T.Parallel(half, block_N):
                acc_s[i, j] = T.if_then_else(
                    t * block_N + j >= Sk or (causal and rows0 + i + off < t * block_N + j), MASKED, acc_s[i, j])
        T.copy(m, m_prev)
        T.reduce_max(acc_s, m, dim=1, clear=False)
        for i in T.Parallel(half):
            rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
        for i, j in T.Parallel(half, block_N):
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
        T.reduce_sum(acc_s, row_sum, dim=1)
        for i in T.Parallel(half):
            l[i] = l[i] * rescale[i] + row_sum[i]

    @T.macro
    def consumer(q, out, lse, b, h, hk, q0, rows0, Sq, Sk, off, n_tiles, causal, scale,
                 q_s, k0_s, k1_s, v0_s, v1_s, k_full, k_empty, v_full, v_empty, q_full, mine, other):
        acc_s = T.alloc_fragment((half, block_N), f32)
        acc_p = T.alloc_fragment((half, block_N), dtype)
        acc_o = T.alloc_fragment((half, D), f32)
        m = T.alloc_fragment((half,), f32)
        m_prev = T.alloc_fragment((half,), f32)
        rescale = T.alloc_fragment((half,), f32)
        row_sum = T.alloc_fragment((half,), f32)
        l = T.alloc_fragment((half,), f32)
        if varlen:
            T.tma_copy(q[q0 + rows0:q0 + rows0 + half, h, :], q_s, barrier=q_full)
        else:
            T.tma_copy(q[b, rows0:rows0 + half, h, :], q_s, barrier=q_full)
        T.barrier_arrive(q_full)
        T.barrier_wait(q_full, 0)
        T.clear(acc_o)
        T.clear(l)
        T.fill(m, MASKED)
        for t in T.serial(n_tiles):
            T.barrier_wait(k_full, t % 2)
            T.sync_threads(barrier_id=mine, arrive_count=256)        # my turn to issue
            qk(q_s, k0_s, k1_s, acc_s, t % 2)
            if t == 0:
                T.named_barrier_arrive(other, 256)
                T.wait_wgmma(0)
                T.warpgroup_fence_operand(acc_s, num_regs=half * block_N // 128)
                T.barrier_arrive(k_empty)
                stats(acc_s, m, m_prev, rescale, row_sum, l, t, rows0, off, Sk, causal, scale)
            else:
                T.barrier_wait(v_full, (t - 1) % 2)
                pv(acc_p, v0_s, v1_s, acc_o, (t - 1) % 2)
                T.named_barrier_arrive(other, 256)
                T.wait_wgmma(1)                                      # S done, P V still running
                T.warpgroup_fence_operand(acc_s, num_regs=half * block_N // 128)
                T.barrier_arrive(k_empty)
                stats(acc_s, m, m_prev, rescale, row_sum, l, t, rows0, off, Sk, causal, scale)
                T.wait_wgmma(0)                                      # P V done: acc_p and acc_o free
                T.warpgroup_fence_operand(acc_o, num_regs=half * D // 128)
                T.barrier_arrive(v_empty)
                for i, j in T.Parallel(half, D):
                    acc_o[i, j] *= rescale[i]
            T.copy(acc_s, acc_p)
        if n_tiles > 0:
            T.barrier_wait(v_full, (n_tiles - 1) % 2)
            pv(acc_p, v0_s, v1_s, acc_o, (n_tiles - 1) % 2)
            T.wait_wgmma(0)
            T.warpgroup_fence_operand(acc_o, num_regs=half * D // 128)
            T.barrier_arrive(v_empty)
        # rows that see no key: 0 and lse -inf (causal: i + off < 0; else Sk == 0)
        for i, j in T.Parallel(half, D):
            acc_o[i, j] = T.if_then_else(l[i] > 0 and (not causal or rows0 + i + off >= 0), acc_o[i, j] / l[i], 0)
        for i in T.Parallel(half):
            if rows0 + i < Sq:
                v_ = T.if_then_else(l[i] > 0 and (not causal or rows0 + i + off >= 0),
                                    (T.log2(l[i]) + m[i] * scale) / LOG2E, -T.infinity(f32))
                if varlen:
                    lse[h, q0 + rows0 + i] = v_
                else:
                    lse[b, h, rows0 + i] = v_
        T.copy(acc_o, q_s)
        T.fence_proxy_async()                                   # smem writes -> the TMA store
        T.sync_threads(barrier_id=mine + 2, arrive_count=128)   # this warpgroup only (PASS_CONFIGS)
        if varlen:
            for i, j in T.Parallel(half, D):
                if rows0 + i < Sq:
                    out[q0 + rows0 + i, h, j] = q_s[i, j]
        else:
            T.copy(q_s, out[b, rows0:rows0 + half, h, :])

    @T.macro
    def body(q, k, v, out, lse, causal, softmax_scale, bx, h, b, Sq, Sk, q0, k0):
        q1_s = T.alloc_shared((half, D), dtype)
        q2_s = T.alloc_shared((half, D), dtype)
        k0_s = T.alloc_shared((block_N, D), dtype)
        k1_s = T.alloc_shared((block_N, D), dtype)
        v0_s = T.alloc_shared((block_N, D), dtype)
        v1_s = T.alloc_shared((block_N, D), dtype)
        k_full = T.alloc_barrier(arrive_count=128)
        k_empty = T.alloc_barrier(arrive_count=256)
        v_full = T.alloc_barrier(arrive_count=128)
        v_empty = T.alloc_barrier(arrive_count=256)
        q1_full = T.alloc_barrier(arrive_count=128)
        q2_full = T.alloc_barrier(arrive_count=128)
        T.annotate_layout({q1_s: tilelang.layout.make_swizzled_layout(q1_s),
                           q2_s: tilelang.layout.make_swizzled_layout(q2_s)})
        T.sync_threads()
        hk = h // (HQ // HK)
        r0 = bx * block_M
        off = Sk - Sq
        scale = T.if_then_else(softmax_scale > 0, softmax_scale, T.rsqrt(T.cast(D, f32))) * LOG2E
        # every warpgroup walks the same tiles (the ping-pong needs equal counts)
        n_tiles = T.if_then_else(causal, T.max(T.min(T.ceildiv(Sk, block_N), T.ceildiv(r0 + block_M + off, block_N)), 0),
                                 T.ceildiv(Sk, block_N))
        tx = T.get_thread_binding()
        if tx < 128:
            T.dec_max_nreg(24)
            for t in T.serial(n_tiles):
                T.barrier_wait(k_empty, (t + 1) % 2)
                load_tile(k, b, hk, k0, t, k0_s, k1_s, t % 2, k_full)
                if t > 0:
                    T.barrier_wait(v_empty, t % 2)
                    load_tile(v, b, hk, k0, t - 1, v0_s, v1_s, (t - 1) % 2, v_full)
            if n_tiles > 0:
                T.barrier_wait(v_empty, n_tiles % 2)
                load_tile(v, b, hk, k0, n_tiles - 1, v0_s, v1_s, (n_tiles - 1) % 2, v_full)
        elif tx < 256:
            T.inc_max_nreg(240)
            T.named_barrier_arrive(1, 256)                              # consumer 1 goes first
            consumer(q, out, lse, b, h, hk, q0, r0, Sq, Sk, off, n_tiles, causal, scale,
                     q1_s, k0_s, k1_s, v0_s, v1_s, k_full, k_empty, v_full, v_empty, q1_full, 1, 2)
        else:
            T.inc_max_nreg(240)
            consumer(q, out, lse, b, h, hk, q0, r0 + half, Sq, Sk, off, n_tiles, causal, scale,
                     q2_s, k0_s, k1_s, v0_s, v1_s, k_full, k_empty, v_full, v_empty, q2_full, 2, 1)

    if varlen:
        TQ, TK, NB = T.dynamic("TQ"), T.dynamic("TK"), T.dynamic("NB")

        @T.prim_func
        def flash_attention_varlen(q: T.StridedTensor((TQ, HQ, D), (sqs, sqh, 1), dtype),
                                   k: T.StridedTensor((TK, HK, D), (sks, skh, 1), dtype),
                                   v: T.StridedTensor((TK, HK, D), (svs, svh, 1), dtype),
                                   cu_seqlens_q: T.Tensor((NB,), "int32"), cu_seqlens_k: T.Tensor((NB,), "int32"),
                                   out: T.Tensor((TQ, HQ, D), dtype), lse: T.Tensor((HQ, TQ), f32),
                                   max_seqlen_q: T.int32, causal: T.bool, softmax_scale: T.float32):
            with T.Kernel(T.ceildiv(max_seqlen_q, block_M), HQ, NB - 1, threads=384) as (bx, h, b):
                q0, k0 = cu_seqlens_q[b], cu_seqlens_k[b]
                Sq, Sk = cu_seqlens_q[b + 1] - q0, cu_seqlens_k[b + 1] - k0
                if bx * block_M < Sq:
                    body(q, k, v, out, lse, causal, softmax_scale, bx, h, b, Sq, Sk, q0, k0)
        return flash_attention_varlen

    B, Sq, Sk = T.dynamic("B"), T.dynamic("Sq"), T.dynamic("Sk")
    sqb, skb, svb = T.dynamic("sqb"), T.dynamic("skb"), T.dynamic("svb")

    @T.prim_func
    def flash_attention(q: T.StridedTensor((B, Sq, HQ, D), (sqb, sqs, sqh, 1), dtype),
                        k: T.StridedTensor((B, Sk, HK, D), (skb, sks, skh, 1), dtype),
                        v: T.StridedTensor((B, Sk, HK, D), (svb, svs, svh, 1), dtype),
                        out: T.Tensor((B, Sq, HQ, D), dtype), lse: T.Tensor((B, HQ, Sq), f32),
                        causal: T.bool, softmax_scale: T.float32):
        with T.Kernel(T.ceildiv(Sq, block_M), HQ, B, threads=384) as (bx, h, b):
            body(q, k, v, out, lse, causal, softmax_scale, bx, h, b, Sq, Sk, 0, 0)
    return flash_attention
