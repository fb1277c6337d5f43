"""Flash attention forward, FlashAttention-3 style, with a hand-written producer/consumer split
(sm_90a).  Same semantics as kernels_src/attention.py (masks, GQA, varlen addressing, lse, rows
that see no key); this module only schedules the work differently.

One CTA = 128 query rows of one head, 384 threads in three warpgroups:
  producer  (threads 0-127, setmaxnreg 24): for tile t, slot s = t % stages, phase j = t // stages:
      wait kempty[s] parity (j + 1) & 1; TMA K(t) -> k_s[s]; all 128 arrive kfull[s] (+ the bytes)
      wait vempty[s] parity (j + 1) & 1; TMA V(t) -> v_s[s]; all 128 arrive vfull[s]
  consumer c (threads 128(c+1).., setmaxnreg 240): query rows r0 + 64c, its own Q tile.
      tile 0:   wait kfull; [turn]; S = Q K(0)^T; [pass the turn]; wait S; release K(0);
                softmax stats of S; P = bf16(S)
      tile t:   wait kfull[t]; [turn]; S = Q K(t)^T and O += P V(t-1) issued back to back;
                [pass the turn]; wait_group 1 (S done); release K(t); softmax stats of S (under
                the P V still running); wait_group 0; release V(t-1); O *= exp2(m_old - m_new);
                P = bf16(S)
      end:      O += P V(n-1); wait; release; O / l -> q's smem tile -> TMA store; lse.
Two overlaps hide the softmax (FA3's): inside a warpgroup, the softmax of tile t runs while P V of
tile t-1 is in flight; across the two consumers, named barriers 1 and 2 hand the turn to issue
WGMMAs back and forth ("ping-pong"), so one's softmax runs under the other's matmuls.  Masks are
applied only to tiles that need one (the sequence tail; causal: the diagonal band).
The softmax is the critical path, so its row statistics are latency-shaped (`tree`): tilelang's
reduce gives each thread one chain of 32 dependent FMNMX (and FADD) a row, plus quad shuffles for
the sum every tile; with tree = 8 each row's max and sum run as two chains a thread (column classes
j % 8, four independent chains in flight), and the sum stays partial per thread until the
epilogue: +3-10% at d128 (round 7).  `lazy` (FlashAttention-4): a row's running max stays stale
unless it grew by more than 2^lazy (P <= 2^lazy, exact after the final O / l), and O's rescale runs
behind a branch only when one of the thread's rows moved: +1-3% at d64, slower at d128 (round 8).

Barriers: kfull/vfull[s] count 128 (the producer warpgroup) + TMA bytes; kempty/vempty[s] count 256
(both consumers).  Parity is unambiguous: the producer cannot refill slot s for tile t + stages
before both consumers released tile t, and a consumer waits tile t's phase only after releasing
tile t - stages's (every consumer releases K(t) before waiting K(t+1), V(t-1) before V(t)).
Progress needs stages >= 2: a consumer waiting for K(t+1) or V(t) has released K(t) and V(t-1),
which is all the producer needs to load them into the slots of tiles t+1-stages.  Ping-pong counts: consumer 1 arrives once on barrier 1 up front; each turn is one
sync (128 own threads) + one arrive (128 of the other) = 256.  Both consumers walk the same tile
count, so the turns pair up; the last arrive is left over at exit.
tilelang's automatic __syncthreads is off (tl.disable_thread_storage_sync): it would deadlock in
warpgroup-divergent code.  Grid form (sweeps only): O is staged in the consumer's own Q tile.

Three consumers (`consumers=3`, persistent only; FlashAttention-3's d64 tile): 192 query rows, 512
threads, setmaxnreg 24 / 160; the WGMMA turn goes round a ring (consumer c waits on named barrier
1 + c and passes to 1 + (c + 1) % 3), so two consumers' matmuls run under each one's softmax; the
empty barriers count 384.  Every shared buffer is bound to a name of its own (the build checks
it): list elements came out unnamed, and tilelang then resolved the epilogue's O copy to a Q tile
(the 2-consumer varlen kernel broke too).  Every role sits in one if / elif / else chain on the
thread index: a build with the third consumer in a later sibling `if` (its buffers unnamed as well)
had its Q / O tiles at the same bytes as the others'.

Persistent form (what ships, fixed lengths and varlen): min(items, SM_COUNT) CTAs, work item =
(row-block pair, head, batch), CTA bx takes items bx, bx + grid, ...; an item is row block p then nmb - 1 - p, so under a
causal mask every item costs the same (a stride over single row blocks gave some CTAs 20% more
work: 132 CTAs over 32 row blocks).  Producer and consumers walk the same tile list and count the
K/V tiles done (g), so the rings' slots and phases run on across tiles exactly as within one; the
ping-pong turns pair up per tile as above.  Each consumer loads the next tile's Q as soon as its
last Q K^T is done (after a warpgroup barrier: every warp's WGMMAs have read Q), so it arrives
under this tile's epilogue, and stages O in its own buffer; the epilogue starts with the
warpgroup's named barrier, so no thread overwrites o_s before the previous tile's TMA store,
waited by its issuing thread, has read it.  Varlen: the items are (pair slot, head), sequence b
owning the slots from cu_seqlens_q[b] // 256 + b on (`locate_varlen`), so the host knows the item
count (TQ // 256 + batch) and no CTA is launched for the rows a short sequence lacks; the grid form
launched ceil(max_seqlen / 128) row blocks for every sequence.  Measured on the H200
(docs/attention-tuning.md, BENCHMARKS.md): d128 577-652 TFLOP/s, 0.96-1.04x cuDNN SDPA; d64 on
three consumers +8-9% over two (round 10).
"""
from .attention_tiles import (MASKED, fixed_types, grid_prim_func, kv_tile, log2_scale, lse_writer, q_tile,
                              saw_a_key, tile_masker, tiles_seen)

PASS_CONFIGS = {"tl.disable_thread_storage_sync": True, "tl.enable_fast_math": True}


def attention_ws_kernel(dim: int, varlen: bool, block_N: int = 128, stages: int = 2, dtype: str = "bfloat16",
                        persistent: bool = False, tree: int = 0, lazy: int = 0, consumers: int = 2, order: int = 0):
    """persistent: min(items, SM_COUNT) CTAs walk the (row-block pair, head, batch) work items, so the
    next tile's K/V loads and Q run under this tile's epilogue.  tree: column classes a row for the
    softmax's max / sum chains (0: tilelang's reduce).  lazy: FlashAttention-4's lazy rescale, the
    running max kept unless it grew by more than 2^lazy (0: off).  consumers: 64-row consumer
    warpgroups a CTA (3: FlashAttention-3's 192-row tile for d64, persistent only, 160 registers
    each), taking the WGMMA turn in a ring."""
    import tilelang
    import tilelang.language as T

    assert stages >= 2 and consumers in (2, 3) and (persistent or consumers == 2)
    f32, D, half, nc = "float32", dim, 64, consumers
    block_M = nc * half
    threads = 128 * (nc + 1)
    nreg = {2: 240, 3: 160}[nc]   # setmaxnreg: 128 x 24 + 128 nc x nreg <= 64K
    HQ, HK = T.dynamic("HQ"), T.dynamic("HK")
    full_row = T.GemmWarpPolicy.FullRow
    nreg_s, nreg_o = half * block_N // 128, half * D // 128

    mask = tile_masker(T, half, block_N)
    write_lse = lse_writer(T, varlen, half)

    def rows(src, b, k0, t, hk):
        return kv_tile(src, varlen, block_N, b, k0, t, hk)

    def q_rows(q, b, h, q0, rows0):
        return q_tile(q, varlen, half, b, h, q0, rows0)

    def tiles_of(causal, r0, Sq, Sk):
        # K/V tiles row block r0 sees; every warpgroup walks the same count (the ping-pong pairs turns)
        return tiles_seen(T, block_N, causal, r0, block_M, Sq, Sk)

    @T.macro
    def producer(k, v, b, hk, k0, n_tiles, g, k_s, v_s, kfull, kempty, vfull, vempty):
        # g: K/V tiles this CTA loaded before (persistent: the rings' slots and phases run on)
        for t in T.serial(n_tiles):
            s = (g + t) % stages
            par = ((g + t) // stages + 1) % 2
            T.mbarrier_wait_parity(kempty[s], par)
            T.tma_copy(rows(k, b, k0, t, hk), k_s[s, :, :], barrier=kfull[s])
            T.barrier_arrive(kfull[s])
            T.mbarrier_wait_parity(vempty[s], par)
            T.tma_copy(rows(v, b, k0, t, hk), v_s[s, :, :], barrier=vfull[s])
            T.barrier_arrive(vfull[s])

    @T.macro
    def stats(acc_s, m, m_prev, rescale, row_sum, l, mp, t, rows0, off, Sk, causal, scale):
        # online-softmax statistics of tile t; touches neither acc_o nor acc_p (P V may be running)
        mask(acc_s, t, rows0, off, Sk, causal)
        T.copy(m, m_prev)
        if tree:   # `tree` column classes a row: independent max / sum chains, the sum's shuffles at the end
            T.fill(mp, MASKED)
            for i, j in T.Parallel(half, block_N):
                mp[i, j % tree] = T.max(mp[i, j % tree], acc_s[i, j])
            T.reduce_max(mp, m, dim=1, clear=False)
        else:
            T.reduce_max(acc_s, m, dim=1, clear=False)
        if lazy:   # FlashAttention-4: keep a stale max unless it grew by more than 2^lazy (P <= 2^lazy)
            for i in T.Parallel(half):
                m[i] = T.if_then_else((m[i] - m_prev[i]) * scale > lazy, m[i], m_prev[i])
        for i in T.Parallel(half):
            rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
        for i, j in T.Parallel(half, block_N):
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
        if tree:   # row_sum: the running partial sums of each column class
            for i, j in T.Parallel(half, tree):
                row_sum[i, j] *= rescale[i]
            for i, j in T.Parallel(half, block_N):
                row_sum[i, j % tree] += acc_s[i, j]
        else:
            T.reduce_sum(acc_s, row_sum, dim=1)
            for i in T.Parallel(half):
                l[i] = l[i] * rescale[i] + row_sum[i]

    @T.macro
    def mainloop(fr, rows0, Sk, off, n_tiles, g, causal, scale, q_s, k_s, v_s, kfull, kempty, vfull, vempty,
                 mine, other):
        # S = Q K^T and softmax of every tile, O += P V of all but the last; Q is free afterwards
        acc_s, acc_p, acc_o, m, m_prev, rescale, row_sum, l, mp = fr
        T.clear(acc_o)
        T.clear(row_sum if tree else l)
        T.fill(m, MASKED)
        for t in T.serial(n_tiles):
            s = (g + t) % stages
            T.mbarrier_wait_parity(kfull[s], ((g + t) // stages) % 2)
            T.sync_threads(barrier_id=mine, arrive_count=256)        # my turn to issue
            T.wgmma_gemm(q_s, k_s[s, :, :], acc_s, transpose_B=True, policy=full_row, clear_accum=True)
            if t == 0:
                T.named_barrier_arrive(other, 256)
                T.wait_wgmma(0)
                T.warpgroup_fence_operand(acc_s, num_regs=nreg_s)
                T.barrier_arrive(kempty[s])
                stats(acc_s, m, m_prev, rescale, row_sum, l, mp, t, rows0, off, Sk, causal, scale)
            else:
                sp = (g + t - 1) % stages
                T.mbarrier_wait_parity(vfull[sp], ((g + t - 1) // stages) % 2)
                T.wgmma_gemm(acc_p, v_s[sp, :, :], acc_o, policy=full_row)
                T.named_barrier_arrive(other, 256)
                T.wait_wgmma(1)                                      # S done, P V still running
                T.warpgroup_fence_operand(acc_s, num_regs=nreg_s)
                T.barrier_arrive(kempty[s])
                stats(acc_s, m, m_prev, rescale, row_sum, l, mp, t, rows0, off, Sk, causal, scale)
                T.wait_wgmma(0)                                      # P V done: acc_p and acc_o free
                T.warpgroup_fence_operand(acc_o, num_regs=nreg_o)
                T.barrier_arrive(vempty[sp])
                if lazy:   # a branch, not predicated FMULs: skipped when no row of this thread moved
                    need = T.alloc_var("int32", init=0)
                    for i in T.Parallel(half):
                        if rescale[i] != 1:
                            need = 1
                    if need:
                        for i, j in T.Parallel(half, D):
                            acc_o[i, j] *= rescale[i]
                else:
                    for i, j in T.Parallel(half, D):
                        acc_o[i, j] *= rescale[i]
            T.copy(acc_s, acc_p)

    @T.macro
    def epilogue(fr, out, lse, b, h, q0, rows0, Sq, off, n_tiles, g, causal, scale, o_s, v_s, vfull, vempty, bar):
        # the last tile's P V, then O / l -> o_s -> TMA store, and lse
        acc_s, acc_p, acc_o, m, m_prev, rescale, row_sum, l, mp = fr
        if n_tiles > 0:
            sp = (g + n_tiles - 1) % stages
            T.mbarrier_wait_parity(vfull[sp], ((g + n_tiles - 1) // stages) % 2)
            T.wgmma_gemm(acc_p, v_s[sp, :, :], acc_o, policy=full_row)
            T.wait_wgmma(0)
            T.warpgroup_fence_operand(acc_o, num_regs=nreg_o)
            T.barrier_arrive(vempty[sp])
        if tree:
            T.reduce_sum(row_sum, l, dim=1)
        # rows that see no key: 0 and lse -inf (causal: i + off < 0; else Sk == 0)
        for i, j in T.Parallel(half, D):
            acc_o[i, j] = T.if_then_else(saw_a_key(T, l[i], causal, rows0 + i, off), acc_o[i, j] / l[i], 0)
        write_lse(lse, l, m, scale, causal, b, h, q0, rows0, off, Sq)
        if persistent:   # the previous tile's TMA store (waited by its issuing thread) has read o_s
            T.sync_threads(barrier_id=bar, arrive_count=128)
        T.copy(acc_o, o_s)
        T.fence_proxy_async()                                   # smem writes -> the TMA store
        T.sync_threads(barrier_id=bar, arrive_count=128)        # this warpgroup only
        if varlen:
            for i, j in T.Parallel(half, D):
                if rows0 + i < Sq:
                    out[q0 + rows0 + i, h, j] = o_s[i, j]
        else:
            T.copy(o_s, out[b, rows0:rows0 + half, h, :])

    def fragments():
        return (T.alloc_fragment((half, block_N), f32),   # acc_s: S, then P in fp32
                T.alloc_fragment((half, block_N), dtype),  # acc_p: P for the P V WGMMA
                T.alloc_fragment((half, D), f32),          # acc_o
                T.alloc_fragment((half,), f32),            # m (running max, raw scores)
                T.alloc_fragment((half,), f32),            # m_prev
                T.alloc_fragment((half,), f32),            # rescale
                T.alloc_fragment((half, tree) if tree else (half,), f32),   # row_sum (tree: partial sums)
                T.alloc_fragment((half,), f32),            # l
                T.alloc_fragment((half, tree), f32) if tree else None)   # mp: partial maxima

    @T.macro
    def consumer(q, out, lse, b, h, q0, rows0, Sq, Sk, n_tiles, causal, scale,
                 q_s, k_s, v_s, kfull, kempty, vfull, vempty, q_full, mine, other):
        fr = fragments()
        T.clear(fr[1])
        T.tma_copy(q_rows(q, b, h, q0, rows0), q_s, barrier=q_full)
        T.barrier_arrive(q_full)
        T.mbarrier_wait_parity(q_full, 0)
        mainloop(fr, rows0, Sk, Sk - Sq, n_tiles, 0, causal, scale, q_s, k_s, v_s, kfull, kempty, vfull, vempty,
                 mine, other)
        # O is staged in this warpgroup's Q tile (Q is no longer read)
        epilogue(fr, out, lse, b, h, q0, rows0, Sq, Sk - Sq, n_tiles, 0, causal, scale, q_s, v_s, vfull, vempty,
                 mine + 2)

    def buffers(own_o: bool):
        # a CTA's shared memory and barriers, flat (unpacked into named variables, so the kernel's
        # buffers keep their names): (q1_s, q2_s, q3_s, o1_s, o2_s, o3_s, k_s, v_s, kfull, kempty,
        # vfull, vempty, q1_full, q2_full, q3_full); the third consumer's None when nc = 2; o*_s only
        # with own_o (persistent), else None (O reuses Q's tile)
        q_s = [T.alloc_shared((half, D), dtype) for _ in range(nc)] + [None] * (3 - nc)
        o_s = ([T.alloc_shared((half, D), dtype) for _ in range(nc)] if own_o else [None] * nc) + [None] * (3 - nc)
        T.annotate_layout({x: tilelang.layout.make_swizzled_layout(x) for x in q_s[:nc]})
        return (*q_s, *o_s, T.alloc_shared((stages, block_N, D), dtype),
                T.alloc_shared((stages, block_N, D), dtype), T.alloc_barrier([128] * stages),
                T.alloc_barrier([128 * nc] * stages), T.alloc_barrier([128] * stages),
                T.alloc_barrier([128 * nc] * stages),
                *([T.alloc_barrier(arrive_count=128) for _ in range(nc)] + [None] * (3 - nc)))

    @T.macro
    def body(q, k, v, out, lse, causal, softmax_scale, bx, h, b, Sq, Sk, q0, k0):
        q1_s, q2_s, _, _, _, _, k_s, v_s, kfull, kempty, vfull, vempty, q1_full, q2_full, _ = buffers(False)
        T.sync_threads()
        r0 = bx * block_M
        scale = log2_scale(T, softmax_scale, D)
        n_tiles = tiles_of(causal, r0, Sq, Sk)
        tx = T.get_thread_binding()
        if tx < 128:
            T.dec_max_nreg(24)
            producer(k, v, b, h // (HQ // HK), k0, n_tiles, 0, k_s, v_s, kfull, kempty, vfull, vempty)
        elif tx < 256:
            T.inc_max_nreg(240)
            T.named_barrier_arrive(1, 256)                              # consumer 1 goes first
            consumer(q, out, lse, b, h, q0, r0, Sq, Sk, n_tiles, causal, scale,
                     q1_s, k_s, v_s, kfull, kempty, vfull, vempty, q1_full, 1, 2)
        else:
            T.inc_max_nreg(240)
            consumer(q, out, lse, b, h, q0, r0 + half, Sq, Sk, n_tiles, causal, scale,
                     q2_s, k_s, v_s, kfull, kempty, vfull, vempty, q2_full, 2, 1)

    @T.macro
    def locate(it, bx, grid, nmb, mb: T.Ref, h: T.Ref, b: T.Ref, valid: T.Ref):
        # the CTA's it-th tile: work item w = bx + (it // 2) grid = (row-block pair p, head, batch),
        # row block p (it even) or nmb - 1 - p (it odd): every item costs the same under a causal mask
        # (a fixed stride over single row blocks left some CTAs 20% more work); the odd middle block
        # pairs with nothing (valid 0: no K/V tile, no store)
        w = bx + it // 2 * grid
        npair = (nmb + 1) // 2
        mb = T.if_then_else(it % 2 == 0, w % npair, nmb - 1 - w % npair)
        h = w // npair % HQ
        b = w // (npair * HQ)
        valid = T.if_then_else(it % 2 == 0 or nmb - 1 - w % npair != w % npair, 1, 0)

    @T.macro
    def locate_sorted(it, bx, grid, nmb, items, mb: T.Ref, h: T.Ref, b: T.Ref, valid: T.Ref):
        # order > 0: single row blocks, the heaviest first (causal: the last row block sees the most
        # keys), `order` heads (h fastest, then batch) a group so that the CTAs running at once share
        # K/V; round it deals them to the CTAs forwards (it even) or backwards (it odd), so each CTA's
        # sum of costs evens out
        idx = it * grid + T.if_then_else(it % 2 == 0, bx, grid - 1 - bx)
        valid = T.if_then_else(idx < items, 1, 0)
        i = T.min(idx, items - 1)
        gsz = T.min(order, items // T.max(nmb, 1) - i // (order * nmb) * order)   # the last group may be short
        w = i % (order * nmb)
        hb = i // (order * nmb) * order + w % gsz
        mb = nmb - 1 - w // gsz
        h = hb % HQ
        b = hb // HQ

    @T.macro
    def locate_varlen(it, bx, grid, cu_q, cu_k, NB, cur: T.Ref, mb: T.Ref, h: T.Ref, b: T.Ref, valid: T.Ref,
                      q0: T.Ref, k0: T.Ref, sq: T.Ref, sk: T.Ref):
        # varlen: sequence b owns the pair slots [S(b), S(b + 1)), S(b) = cu_q[b] // 256 + b, at least
        # ceil(len / 256) of them (floor((c + L) / 256) - floor(c / 256) + 1 >= ceil(L / 256)), so
        # the slot count TQ // 256 + batch is known on the host; w = slot * HQ + head.  A CTA's
        # items only move forward, so `cur` (its batch cursor) walks the offsets once per launch.
        w = bx + it // 2 * grid
        slot = w // HQ
        h = w % HQ
        while cur + 2 < NB and cu_q[cur + 1] // (2 * block_M) + cur + 1 <= slot:
            cur = cur + 1
        b = cur
        q0 = cu_q[b]
        k0 = cu_k[b]
        sq = cu_q[b + 1] - q0
        sk = cu_k[b + 1] - k0
        p = slot - (q0 // (2 * block_M) + b)
        nmb = T.ceildiv(sq, block_M)
        valid = T.if_then_else(p >= 0 and p < (nmb + 1) // 2 and (it % 2 == 0 or nmb - 1 - p != p), 1, 0)
        mb = T.if_then_else(valid == 0, 0, T.if_then_else(it % 2 == 0, p, nmb - 1 - p))

    def item_vars(Sq, Sk):
        # a persistent CTA's tile: (batch cursor, row block, head, batch, valid, q0, k0, sq, sk); the
        # sequence fields are per tile in varlen, the launch's constants otherwise
        ints = [T.alloc_var("int32", init=0) for _ in range(9 if varlen else 5)]
        return tuple(ints) if varlen else (*ints, 0, 0, Sq, Sk)

    @T.macro
    def load_q(q, c, q_s, q_full, mb, h, b, q0):
        T.tma_copy(q_rows(q, b, h, q0, mb * block_M + c * half), q_s, barrier=q_full)
        T.barrier_arrive(q_full)

    @T.macro
    def persistent_consumer(q, out, lse, cu_q, cu_k, NB, Sq, Sk, nmb, items, nit, grid, bx, causal, scale, c, q_s,
                            o_s, k_s, v_s, kfull, kempty, vfull, vempty, q_full, g: T.Ref):
        # consumer c (rows 64 c of each tile); the next tile's Q loads under this tile's epilogue.
        # it: the current tile (mb, h, b, valid, q0, k0, sq, sk); n*: the next one's
        fr = fragments()
        T.clear(fr[1])
        cur, mb, h, b, valid, q0, k0, sq, sk = item_vars(Sq, Sk)
        _, nmb_, nh, nb, nvalid, nq0, nk0, nsq, nsk = item_vars(Sq, Sk)
        if varlen:
            locate_varlen(0, bx, grid, cu_q, cu_k, NB, cur, mb, h, b, valid, q0, k0, sq, sk)
        elif order:
            locate_sorted(0, bx, grid, nmb, items, mb, h, b, valid)
        else:
            locate(0, bx, grid, nmb, mb, h, b, valid)
        load_q(q, c, q_s, q_full, mb, h, b, q0)
        for it in T.serial(nit):
            rows0 = mb * block_M + c * half
            n_tiles = tiles_of(causal, mb * block_M, sq, sk) * valid
            T.mbarrier_wait_parity(q_full, it % 2)
            mainloop(fr, rows0, sk, sk - sq, n_tiles, g, causal, scale, q_s, k_s, v_s, kfull, kempty, vfull, vempty,
                     1 + c, 1 + (c + 1) % nc)
            if it + 1 < nit:   # Q is free (every warp's last Q K^T done): load the next tile's
                T.sync_threads(barrier_id=1 + nc + c, arrive_count=128)
                if varlen:
                    locate_varlen(it + 1, bx, grid, cu_q, cu_k, NB, cur, nmb_, nh, nb, nvalid, nq0, nk0, nsq, nsk)
                elif order:
                    locate_sorted(it + 1, bx, grid, nmb, items, nmb_, nh, nb, nvalid)
                else:
                    locate(it + 1, bx, grid, nmb, nmb_, nh, nb, nvalid)
                load_q(q, c, q_s, q_full, nmb_, nh, nb, nq0)
            if valid:
                epilogue(fr, out, lse, b, h, q0, rows0, sq, sk - sq, n_tiles, g, causal, scale, o_s, v_s, vfull,
                         vempty, 1 + nc + c)
            g = g + n_tiles
            mb = nmb_
            h = nh
            b = nb
            valid = nvalid
            if varlen:
                q0 = nq0
                k0 = nk0
                sq = nsq
                sk = nsk

    @T.macro
    def persistent_kernel(q, k, v, out, lse, cu_q, cu_k, NB, Sq, Sk, nmb, items, causal, softmax_scale, SM_COUNT):
        # no tile (no sequence, or HQ = 0): a grid of 0, and the launcher skips the launch
        with T.Kernel(T.min(items, SM_COUNT), threads=threads) as bx:
            (q1_s, q2_s, q3_s, o1_s, o2_s, o3_s, k_s, v_s, kfull, kempty, vfull, vempty, q1_full, q2_full,
             q3_full) = buffers(True)
            g = T.alloc_var("int32")
            T.sync_threads()
            grid = T.min(items, SM_COUNT)
            # two tiles (a row-block pair) per work item; sorted single blocks: every CTA the same
            # count, the last one past the items for some (valid 0)
            nit = T.ceildiv(items, grid) if order else 2 * T.ceildiv(items - bx, grid)
            scale = log2_scale(T, softmax_scale, D)
            g = 0
            tx = T.get_thread_binding()
            if tx < 128:
                T.dec_max_nreg(24)
                cur, mb, h, b, valid, q0, k0, sq, sk = item_vars(Sq, Sk)
                for it in T.serial(nit):
                    if varlen:
                        locate_varlen(it, bx, grid, cu_q, cu_k, NB, cur, mb, h, b, valid, q0, k0, sq, sk)
                    elif order:
                        locate_sorted(it, bx, grid, nmb, items, mb, h, b, valid)
                    else:
                        locate(it, bx, grid, nmb, mb, h, b, valid)
                    n_tiles = tiles_of(causal, mb * block_M, sq, sk) * valid
                    producer(k, v, b, h // (HQ // HK), k0, n_tiles, g, k_s, v_s, kfull, kempty, vfull, vempty)
                    g = g + n_tiles
            elif tx < 256:
                T.inc_max_nreg(nreg)
                T.named_barrier_arrive(1, 256)                          # consumer 0 goes first
                persistent_consumer(q, out, lse, cu_q, cu_k, NB, Sq, Sk, nmb, items, nit, grid, bx, causal, scale, 0,
                                    q1_s, o1_s, k_s, v_s, kfull, kempty, vfull, vempty, q1_full, g)
            elif nc == 2 or tx < 384:
                T.inc_max_nreg(nreg)
                persistent_consumer(q, out, lse, cu_q, cu_k, NB, Sq, Sk, nmb, items, nit, grid, bx, causal, scale, 1,
                                    q2_s, o2_s, k_s, v_s, kfull, kempty, vfull, vempty, q2_full, g)
            else:   # one chain of branches: tilelang's shared-memory planner would alias the buffers of a
                # consumer in a later statement with those of an earlier one it thinks are dead
                T.inc_max_nreg(nreg)
                persistent_consumer(q, out, lse, cu_q, cu_k, NB, Sq, Sk, nmb, items, nit, grid, bx, causal, scale, 2,
                                    q3_s, o3_s, k_s, v_s, kfull, kempty, vfull, vempty, q3_full, g)

    if not persistent:
        return grid_prim_func(T, body, varlen, HQ, HK, D, dtype, block_M, 384)

    SM_COUNT = T.dynamic("SM_COUNT")
    if varlen:
        TQ, TK, NB = T.dynamic("TQ"), T.dynamic("TK"), T.dynamic("NB")
        sqs, sqh, sks, skh, svs, svh = (T.dynamic(n) for n in ("sqs", "sqh", "sks", "skh", "svs", "svh"))

        @T.prim_func
        def flash_attention_varlen_persistent(
                q: T.StridedTensor((TQ, HQ, D), (sqs, sqh, 1), dtype), k: T.StridedTensor((TK, HK, D), (sks, skh, 1), dtype),
                v: T.StridedTensor((TK, HK, D), (svs, svh, 1), dtype), cu_seqlens_q: T.Tensor((NB,), "int32"),
                cu_seqlens_k: T.Tensor((NB,), "int32"), out: T.Tensor((TQ, HQ, D), dtype),
                lse: T.Tensor((HQ, TQ), "float32"), max_seqlen_q: T.int32, causal: T.bool, softmax_scale: T.float32,
                SM_COUNT: SM_COUNT):
            items = (TQ // (2 * block_M) + NB - 1) * HQ * T.min(NB - 1, 1)   # no sequence: no item
            persistent_kernel(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, NB, 0, 0, 0, items, causal,
                              softmax_scale, SM_COUNT)
        return flash_attention_varlen_persistent

    B, Sq, Sk, Q, K, V, O, LSE = fixed_types(T, HQ, HK, D, dtype)

    @T.prim_func
    def flash_attention_persistent(q: Q, k: K, v: V, out: O, lse: LSE, causal: T.bool, softmax_scale: T.float32,
                                   SM_COUNT: SM_COUNT):
        nmb = T.ceildiv(Sq, block_M)
        persistent_kernel(q, k, v, out, lse, None, None, 0, Sq, Sk, nmb, (nmb if order else (nmb + 1) // 2) * HQ * B,
                          causal, softmax_scale, SM_COUNT)
    return flash_attention_persistent
