"""Flash attention forward, FlashAttention-3's schedule written by hand (sm_90a): a TMA producer
warpgroup and two (or three) consumer warpgroups, persistent.  Same semantics as the other flash
kernels (masks, GQA, varlen addressing, lse, rows that see no key: tiles.py); only the schedule differs.

A tile = 64 * consumers query rows of one head; 128 * (consumers + 1) threads:
  producer  (threads 0-127, setmaxnreg 24): for K/V tile t, slot s = t % STAGES, phase j = t // STAGES:
      wait kempty[s] parity (j + 1) & 1; TMA K(t) -> k_s[s]; all 128 arrive kfull[s] (+ the bytes)
      wait vempty[s] parity (j + 1) & 1; TMA V(t) -> v_s[s]; all 128 arrive vfull[s]
  consumer c (threads 128(c+1).., setmaxnreg 240 / 160): query rows r0 + 64c, its own Q tile.
      tile 0:   wait kfull; [turn]; S = Q K(0)^T; [pass the turn]; wait S; release K(0);
                softmax stats of S; P = bf16(S)
      tile t:   wait kfull[t]; [turn]; S = Q K(t)^T and O += P V(t-1) issued back to back;
                [pass the turn]; wait_group 1 (S done); release K(t); softmax stats of S (under
                the P V still running); wait_group 0; release V(t-1); O *= exp2(m_old - m_new);
                P = bf16(S)
      end:      O += P V(n-1); wait; release; O / l -> its O tile -> TMA store; lse.
Two overlaps hide the softmax (FA3's): inside a warpgroup, the softmax of tile t runs while P V of
tile t-1 is in flight; across the consumers, named barriers 1 .. consumers pass the turn to issue
WGMMAs round a ring (consumer c waits on barrier 1 + c, passes to 1 + (c + 1) % consumers), so one's
softmax runs under the others' matmuls.  Masks touch only the tiles that need one.
The softmax is the critical path, so its row statistics are latency-shaped: tilelang's reduce gives
each thread one chain of 32 dependent FMNMX (and FADD) a row, plus quad shuffles for the sum every
tile; here each row's max and sum run as CHAINS column classes (j % CHAINS: two chains a thread,
four independent chains in flight), and the sum stays partial per thread until the epilogue.
`lazy_rescale` (FlashAttention-4): a row's running max stays stale unless it grew by more than
2^lazy_rescale (P <= 2^lazy_rescale, exact after the final O / l), and O's rescale runs behind a
branch only when one of the thread's rows moved.

Barriers: kfull/vfull[s] count 128 (the producer warpgroup) + TMA bytes; kempty/vempty[s] count
128 * consumers.  Parity is unambiguous: the producer cannot refill slot s for tile t + STAGES
before every consumer released tile t, and a consumer waits tile t's phase only after releasing
tile t - STAGES's (every consumer releases K(t) before waiting K(t+1), V(t-1) before V(t)).
Progress needs STAGES >= 2: a consumer waiting for K(t+1) or V(t) has released K(t) and V(t-1),
which is all the producer needs to load them into the slots of tiles t+1-STAGES.  Ring counts:
consumer 0 arrives once on barrier 1 up front; each turn is one sync (128 own threads) + one arrive
(128 of the previous consumer) = 256; every consumer walks the same tile count, so the turns pair
up, and the last arrive is left over at exit.  tilelang's automatic __syncthreads is off: it would
deadlock in warpgroup-divergent code.  Every shared buffer is bound to a name of its own and every
role sits in one if / elif / else chain on the thread index: tilelang tells shared buffers apart by
name and by their place in that chain (docs/attention-tuning.md has what broke otherwise).

Persistent: min(items, SM_COUNT) CTAs; a work item = (row-block pair, head, batch), CTA bx takes
items bx, bx + grid, ...; an item is row block p then nmb - 1 - p, so under a causal mask every item
costs the same.  Producer and consumers walk the same tile list and count the K/V tiles done (g),
so the rings' slots and phases run on across tiles exactly as within one.  Each consumer loads the
next tile's Q as soon as its last Q K^T is done (after a warpgroup barrier: every warp's WGMMAs have
read Q), so it arrives under this tile's epilogue, and writes O through its own buffer; the epilogue
starts with the warpgroup's named barrier, so no thread overwrites o_s before the previous tile's
TMA store, waited by its issuing thread, has read it.  Varlen: the items are (pair slot, head),
sequence b owning the slots from cu_seqlens_q[b] // 256 + b on (`locate_varlen`), so the host knows
the item count (TQ // 256 + batch) and no CTA is launched for the rows a short sequence lacks.
Measured figures: docs/attention-tuning.md."""
from .tiles import (MASKED, fixed_types, kv_tile, log2_scale, lse_writer, output_writer, q_tile, saw_a_key,
                    tile_masker, tiles_seen, varlen_types)

ROWS = 64              # query rows a consumer warpgroup
BLOCK_N = 128          # keys a K/V tile
STAGES = 2             # K/V ring slots
CHAINS = 8             # column classes a row for the softmax's max / sum chains
PRODUCER_REGISTERS = 24
CONSUMER_REGISTERS = {2: 240, 3: 160}   # setmaxnreg: 128 x 24 + 128 consumers x this <= 64K


def _producer(T, varlen: bool):
    """Macro: the producer warpgroup's TMA loads of a work item's K/V tiles into the rings."""
    @T.macro
    def producer(k, v, b, hk, k0, n_tiles, g, k_s, v_s, kfull, kempty, vfull, vempty):
        # g: K/V tiles this CTA loaded before (the rings' slots and phases run on)
        for t in T.serial(n_tiles):
            s = (g + t) % STAGES
            par = ((g + t) // STAGES + 1) % 2
            T.mbarrier_wait_parity(kempty[s], par)
            T.tma_copy(kv_tile(k, varlen, BLOCK_N, b, k0, t, hk), k_s[s, :, :], barrier=kfull[s])
            T.barrier_arrive(kfull[s])
            T.mbarrier_wait_parity(vempty[s], par)
            T.tma_copy(kv_tile(v, varlen, BLOCK_N, b, k0, t, hk), v_s[s, :, :], barrier=vfull[s])
            T.barrier_arrive(vfull[s])
    return producer


def _softmax_stats(T, lazy: int):
    """Macro: the online-softmax statistics of one S tile as CHAINS column classes a row."""
    mask = tile_masker(T, ROWS, BLOCK_N)

    @T.macro
    def stats(acc_s, m, m_prev, rescale, row_sum, l, mp, t, rows0, off, Sk, causal, scale):
        # touches neither acc_o nor acc_p (P V may be running); row_sum: each column class's
        # running partial sum, mp: its partial maximum
        mask(acc_s, t, rows0, off, Sk, causal)
        T.copy(m, m_prev)
        T.fill(mp, MASKED)
        for i, j in T.Parallel(ROWS, BLOCK_N):
            mp[i, j % CHAINS] = T.max(mp[i, j % CHAINS], acc_s[i, j])
        T.reduce_max(mp, m, dim=1, clear=False)
        if lazy:   # keep a stale max unless it grew by more than 2^lazy (P <= 2^lazy)
            for i in T.Parallel(ROWS):
                m[i] = T.if_then_else((m[i] - m_prev[i]) * scale > lazy, m[i], m_prev[i])
        for i in T.Parallel(ROWS):
            rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
        for i, j in T.Parallel(ROWS, BLOCK_N):
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
        for i, j in T.Parallel(ROWS, CHAINS):
            row_sum[i, j] *= rescale[i]
        for i, j in T.Parallel(ROWS, BLOCK_N):
            row_sum[i, j % CHAINS] += acc_s[i, j]
    return stats


def _mainloop(T, D: int, lazy: int):
    """Macro: S = Q K^T and the softmax of every K/V tile of a work item, O += P V of all but the
    last; Q is free afterwards."""
    stats = _softmax_stats(T, lazy)
    full_row = T.GemmWarpPolicy.FullRow
    nreg_s, nreg_o = ROWS * BLOCK_N // 128, ROWS * D // 128

    @T.macro
    def rescale_o(acc_o, rescale):
        if lazy:   # a branch, not predicated FMULs: skipped when no row of this thread moved
            need = T.alloc_var("int32", init=0)
            for i in T.Parallel(ROWS):
                if rescale[i] != 1:
                    need = 1
            if need:
                for i, j in T.Parallel(ROWS, D):
                    acc_o[i, j] *= rescale[i]
        else:
            for i, j in T.Parallel(ROWS, D):
                acc_o[i, j] *= rescale[i]

    @T.macro
    def mainloop(fr, rows0, Sk, off, n_tiles, g, causal, scale, q_s, k_s, v_s, kfull, kempty, vfull, vempty,
                 mine, other):
        acc_s, acc_p, acc_o, m, m_prev, rescale, row_sum, l, mp = fr
        T.clear(acc_o)
        T.clear(row_sum)
        T.fill(m, MASKED)
        for t in T.serial(n_tiles):
            s = (g + t) % STAGES
            T.mbarrier_wait_parity(kfull[s], ((g + t) // STAGES) % 2)
            T.sync_threads(barrier_id=mine, arrive_count=256)        # my turn to issue
            T.wgmma_gemm(q_s, k_s[s, :, :], acc_s, transpose_B=True, policy=full_row, clear_accum=True)
            if t == 0:
                T.named_barrier_arrive(other, 256)
                T.wait_wgmma(0)
                T.warpgroup_fence_operand(acc_s, num_regs=nreg_s)
                T.barrier_arrive(kempty[s])
                stats(acc_s, m, m_prev, rescale, row_sum, l, mp, t, rows0, off, Sk, causal, scale)
            else:
                sp = (g + t - 1) % STAGES
                T.mbarrier_wait_parity(vfull[sp], ((g + t - 1) // STAGES) % 2)
                T.wgmma_gemm(acc_p, v_s[sp, :, :], acc_o, policy=full_row)
                T.named_barrier_arrive(other, 256)
                T.wait_wgmma(1)                                      # S done, P V still running
                T.warpgroup_fence_operand(acc_s, num_regs=nreg_s)
                T.barrier_arrive(kempty[s])
                stats(acc_s, m, m_prev, rescale, row_sum, l, mp, t, rows0, off, Sk, causal, scale)
                T.wait_wgmma(0)                                      # P V done: acc_p and acc_o free
                T.warpgroup_fence_operand(acc_o, num_regs=nreg_o)
                T.barrier_arrive(vempty[sp])
                rescale_o(acc_o, rescale)
            T.copy(acc_s, acc_p)
    return mainloop


def _epilogue(T, varlen: bool, D: int):
    """Macro: a work item's last P V, then O / l -> o_s -> TMA store, and the lse."""
    full_row = T.GemmWarpPolicy.FullRow
    nreg_o = ROWS * D // 128
    write_lse = lse_writer(T, varlen, ROWS)
    store = output_writer(T, varlen, ROWS, D)

    @T.macro
    def epilogue(fr, out, lse, b, h, q0, rows0, Sq, off, n_tiles, g, causal, scale, o_s, v_s, vfull, vempty, bar):
        acc_s, acc_p, acc_o, m, m_prev, rescale, row_sum, l, mp = fr
        if n_tiles > 0:
            sp = (g + n_tiles - 1) % STAGES
            T.mbarrier_wait_parity(vfull[sp], ((g + n_tiles - 1) // STAGES) % 2)
            T.wgmma_gemm(acc_p, v_s[sp, :, :], acc_o, policy=full_row)
            T.wait_wgmma(0)
            T.warpgroup_fence_operand(acc_o, num_regs=nreg_o)
            T.barrier_arrive(vempty[sp])
        T.reduce_sum(row_sum, l, dim=1)
        # rows that see no key: 0 and lse -inf (causal: i + off < 0; else Sk == 0)
        for i, j in T.Parallel(ROWS, D):
            acc_o[i, j] = T.if_then_else(saw_a_key(T, l[i], causal, rows0 + i, off), acc_o[i, j] / l[i], 0)
        write_lse(lse, l, m, scale, causal, b, h, q0, rows0, off, Sq)
        T.sync_threads(barrier_id=bar, arrive_count=128)        # the previous item's TMA store has read o_s
        T.copy(acc_o, o_s)
        T.fence_proxy_async()                                   # smem writes -> the TMA store
        T.sync_threads(barrier_id=bar, arrive_count=128)        # this warpgroup only
        store(out, o_s, b, h, q0, rows0, Sq)
    return epilogue


def _work_order(T, varlen: bool, HQ, block_M: int):
    """(locate, locate_varlen, item_vars): which tile a persistent CTA's it-th step takes."""
    @T.macro
    def locate(it, bx, grid, nmb, mb: T.Ref, h: T.Ref, b: T.Ref, valid: T.Ref):
        # work item w = bx + (it // 2) grid = (row-block pair p, head, batch), row block p (it even)
        # or nmb - 1 - p (it odd): every item costs the same under a causal mask (a fixed stride over
        # single row blocks left some CTAs 20% more work); the odd middle block pairs with nothing
        # (valid 0: no K/V tile, no store)
        w = bx + it // 2 * grid
        npair = (nmb + 1) // 2
        mb = T.if_then_else(it % 2 == 0, w % npair, nmb - 1 - w % npair)
        h = w // npair % HQ
        b = w // (npair * HQ)
        valid = T.if_then_else(it % 2 == 0 or nmb - 1 - w % npair != w % npair, 1, 0)

    @T.macro
    def locate_varlen(it, bx, grid, cu_q, cu_k, NB, cur: T.Ref, mb: T.Ref, h: T.Ref, b: T.Ref, valid: T.Ref,
                      q0: T.Ref, k0: T.Ref, sq: T.Ref, sk: T.Ref):
        # sequence b owns the pair slots [S(b), S(b + 1)), S(b) = cu_q[b] // 256 + b, at least
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

    return locate, locate_varlen, item_vars


def _consumer(T, varlen: bool, D: int, dtype: str, lazy: int, nc: int, work_order):
    """Macro: consumer warpgroup c of a persistent CTA, over all of its CTA's tiles."""
    f32, block_M = "float32", nc * ROWS
    mainloop, epilogue = _mainloop(T, D, lazy), _epilogue(T, varlen, D)
    locate, locate_varlen, item_vars = work_order

    def fragments():
        return (T.alloc_fragment((ROWS, BLOCK_N), f32),   # acc_s: S, then P in fp32
                T.alloc_fragment((ROWS, BLOCK_N), dtype),  # acc_p: P for the P V WGMMA
                T.alloc_fragment((ROWS, D), f32),          # acc_o
                T.alloc_fragment((ROWS,), f32),            # m (running max, raw scores)
                T.alloc_fragment((ROWS,), f32),            # m_prev
                T.alloc_fragment((ROWS,), f32),            # rescale
                T.alloc_fragment((ROWS, CHAINS), f32),     # row_sum: partial sums
                T.alloc_fragment((ROWS,), f32),            # l
                T.alloc_fragment((ROWS, CHAINS), f32))     # mp: partial maxima

    @T.macro
    def load_q(q, c, q_s, q_full, mb, h, b, q0):
        T.tma_copy(q_tile(q, varlen, ROWS, b, h, q0, mb * block_M + c * ROWS), q_s, barrier=q_full)
        T.barrier_arrive(q_full)

    @T.macro
    def consumer(q, out, lse, cu_q, cu_k, NB, Sq, Sk, nmb, nit, grid, bx, causal, scale, c, q_s,
                 o_s, k_s, v_s, kfull, kempty, vfull, vempty, q_full, g: T.Ref):
        # consumer c (rows 64 c of each tile); the next tile's Q loads under this tile's epilogue.
        # it: the current tile (mb, h, b, valid, q0, k0, sq, sk); n*: the next one's
        fr = fragments()
        T.clear(fr[1])
        cur, mb, h, b, valid, q0, k0, sq, sk = item_vars(Sq, Sk)
        _, nmb_, nh, nb, nvalid, nq0, nk0, nsq, nsk = item_vars(Sq, Sk)
        if varlen:
            locate_varlen(0, bx, grid, cu_q, cu_k, NB, cur, mb, h, b, valid, q0, k0, sq, sk)
        else:
            locate(0, bx, grid, nmb, mb, h, b, valid)
        load_q(q, c, q_s, q_full, mb, h, b, q0)
        for it in T.serial(nit):
            rows0 = mb * block_M + c * ROWS
            n_tiles = tiles_seen(T, BLOCK_N, causal, mb * block_M, block_M, sq, sk) * valid
            T.mbarrier_wait_parity(q_full, it % 2)
            mainloop(fr, rows0, sk, sk - sq, n_tiles, g, causal, scale, q_s, k_s, v_s, kfull, kempty, vfull, vempty,
                     1 + c, 1 + (c + 1) % nc)
            if it + 1 < nit:   # Q is free (every warp's last Q K^T done): load the next tile's
                T.sync_threads(barrier_id=1 + nc + c, arrive_count=128)
                if varlen:
                    locate_varlen(it + 1, bx, grid, cu_q, cu_k, NB, cur, nmb_, nh, nb, nvalid, nq0, nk0, nsq, nsk)
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
    return consumer


def _persistent_kernel(T, varlen: bool, D: int, dtype: str, lazy: int, nc: int, HQ, HK):
    """Macro: the persistent kernel, min(items, SM_COUNT) CTAs over `items` work items."""
    import tilelang

    threads, block_M = 128 * (nc + 1), nc * ROWS
    work_order = _work_order(T, varlen, HQ, block_M)
    locate, locate_varlen, item_vars = work_order
    producer, consumer = _producer(T, varlen), _consumer(T, varlen, D, dtype, lazy, nc, work_order)

    def buffers():
        # a CTA's shared memory and barriers, flat (unpacked into named variables, so the kernel's
        # buffers keep their names): (q1_s, q2_s, q3_s, o1_s, o2_s, o3_s, k_s, v_s, kfull, kempty,
        # vfull, vempty, q1_full, q2_full, q3_full); the third consumer's None when there are two
        q_s = [T.alloc_shared((ROWS, D), dtype) for _ in range(nc)] + [None] * (3 - nc)
        o_s = [T.alloc_shared((ROWS, D), dtype) for _ in range(nc)] + [None] * (3 - nc)
        T.annotate_layout({x: tilelang.layout.make_swizzled_layout(x) for x in q_s[:nc]})
        return (*q_s, *o_s, T.alloc_shared((STAGES, BLOCK_N, D), dtype),
                T.alloc_shared((STAGES, BLOCK_N, D), dtype), T.alloc_barrier([128] * STAGES),
                T.alloc_barrier([128 * nc] * STAGES), T.alloc_barrier([128] * STAGES),
                T.alloc_barrier([128 * nc] * STAGES),
                *([T.alloc_barrier(arrive_count=128) for _ in range(nc)] + [None] * (3 - nc)))

    @T.macro
    def persistent_kernel(q, k, v, out, lse, cu_q, cu_k, NB, Sq, Sk, nmb, items, causal, softmax_scale, SM_COUNT):
        # no tile (no sequence, or HQ = 0): a grid of 0, and the launcher skips the launch
        with T.Kernel(T.min(items, SM_COUNT), threads=threads) as bx:
            (q1_s, q2_s, q3_s, o1_s, o2_s, o3_s, k_s, v_s, kfull, kempty, vfull, vempty, q1_full, q2_full,
             q3_full) = buffers()
            g = T.alloc_var("int32")
            T.sync_threads()
            grid = T.min(items, SM_COUNT)
            nit = 2 * T.ceildiv(items - bx, grid)   # two tiles (a row-block pair) per work item
            scale = log2_scale(T, softmax_scale, D)
            g = 0
            tx = T.get_thread_binding()
            if tx < 128:
                T.dec_max_nreg(PRODUCER_REGISTERS)
                cur, mb, h, b, valid, q0, k0, sq, sk = item_vars(Sq, Sk)
                for it in T.serial(nit):
                    if varlen:
                        locate_varlen(it, bx, grid, cu_q, cu_k, NB, cur, mb, h, b, valid, q0, k0, sq, sk)
                    else:
                        locate(it, bx, grid, nmb, mb, h, b, valid)
                    n_tiles = tiles_seen(T, BLOCK_N, causal, mb * block_M, block_M, sq, sk) * valid
                    producer(k, v, b, h // (HQ // HK), k0, n_tiles, g, k_s, v_s, kfull, kempty, vfull, vempty)
                    g = g + n_tiles
            elif tx < 256:
                T.inc_max_nreg(CONSUMER_REGISTERS[nc])
                T.named_barrier_arrive(1, 256)                          # consumer 0 goes first
                consumer(q, out, lse, cu_q, cu_k, NB, Sq, Sk, nmb, nit, grid, bx, causal, scale, 0,
                         q1_s, o1_s, k_s, v_s, kfull, kempty, vfull, vempty, q1_full, g)
            elif nc == 2 or tx < 384:
                T.inc_max_nreg(CONSUMER_REGISTERS[nc])
                consumer(q, out, lse, cu_q, cu_k, NB, Sq, Sk, nmb, nit, grid, bx, causal, scale, 1,
                         q2_s, o2_s, k_s, v_s, kfull, kempty, vfull, vempty, q2_full, g)
            else:   # one chain of branches: tilelang's shared-memory planner would alias the buffers of a
                # consumer in a later statement with those of an earlier one it thinks are dead
                T.inc_max_nreg(CONSUMER_REGISTERS[nc])
                consumer(q, out, lse, cu_q, cu_k, NB, Sq, Sk, nmb, nit, grid, bx, causal, scale, 2,
                         q3_s, o3_s, k_s, v_s, kfull, kempty, vfull, vempty, q3_full, g)
    return persistent_kernel


def warp_specialized_kernel(dim: int, varlen: bool, dtype: str = "bfloat16", lazy_rescale: int = 0,
                            consumers: int = 2):
    """lazy_rescale: FlashAttention-4's lazy rescale, the running max kept unless it grew by more
    than 2^lazy_rescale (0: off).  consumers: 64-row consumer warpgroups a CTA (3: FlashAttention-3's
    192-row tile for d64, 160 registers each), taking the WGMMA turn in a ring."""
    import tilelang.language as T

    assert consumers in (2, 3)
    D, block_M = dim, consumers * ROWS
    HQ, HK = T.dynamic("HQ"), T.dynamic("HK")
    kernel = _persistent_kernel(T, varlen, D, dtype, lazy_rescale, consumers, HQ, HK)
    SM_COUNT = T.dynamic("SM_COUNT")
    if varlen:
        TQ, TK, NB, Q, K, V, O, LSE = varlen_types(T, HQ, HK, D, dtype)

        @T.prim_func
        def flash_attention_varlen_persistent(q: Q, k: K, v: V, cu_seqlens_q: T.Tensor((NB,), "int32"),
                                              cu_seqlens_k: T.Tensor((NB,), "int32"), out: O, lse: LSE,
                                              max_seqlen_q: T.int32, causal: T.bool, softmax_scale: T.float32,
                                              SM_COUNT: SM_COUNT):
            items = (TQ // (2 * block_M) + NB - 1) * HQ * T.min(NB - 1, 1)   # no sequence: no item
            kernel(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, NB, 0, 0, 0, items, causal, softmax_scale, SM_COUNT)
        return flash_attention_varlen_persistent

    B, Sq, Sk, Q, K, V, O, LSE = fixed_types(T, HQ, HK, D, dtype)

    @T.prim_func
    def flash_attention_persistent(q: Q, k: K, v: V, out: O, lse: LSE, causal: T.bool, softmax_scale: T.float32,
                                   SM_COUNT: SM_COUNT):
        nmb = T.ceildiv(Sq, block_M)
        kernel(q, k, v, out, lse, None, None, 0, Sq, Sk, nmb, (nmb + 1) // 2 * HQ * B, causal, softmax_scale, SM_COUNT)
    return flash_attention_persistent
