"""FP8 block-scaled GEMM tile with a hand-written producer/consumer split (sm_90a), for the dense
op (kernels_src/fp8_gemm.py) and both grouped layouts (kernels_src/grouped_gemm.py).  A consumer
warpgroup issues block k+1's WGMMAs before it promotes block k, which tilelang's automatic warp
specialization refuses (it will not delay a gemm's wait).  Same semantics, bit for bit, as the
pipelined kernels it replaces:

    out = bf16( sum over kb of part_kb * (a_scale[row, kb] * b_scale[(e,) n0 // 128, kb]) ),

part_kb = the 128-wide K block's WGMMA chain (fp32, fresh fragment), promoted in kb order into an
fp32 accumulator on the CUDA cores: the same expression, in the same order.
Measured on the H200 (docs/sweeps/fp8_gemm_ws_pack.py, one process, beside the pipelined 192x128
tile): 8192^3 1102 -> 1146 TFLOP/s, 4096^3 746 -> 1056, 2048 x 8192^2 816 -> 1059, 512 x 8192^2
595 -> 952.

Layouts (`layout`): "dense" a[M, K] @ b[N, K]^T; "contiguous" a[M, K] rows offsets[e]:offsets[e+1]
@ b[e]^T (each 128-row tile lies in one expert: segments start at multiples of 128); "masked"
a[E, Mmax, K], rows < counts[e] of expert e.  A grouped tile finds its expert and row limit `hi`
first (grouped_gemm.py's `expert_of`); a tile in no segment runs no K block and stores nothing.

One CTA = block_M x 128 output tile (block_M = 64 * consumers), 128 * (consumers + 1) threads:
  producer  (threads 0-127, setmaxnreg.dec to `producer_regs`): for kb in 0..nk-1, slot s = kb % S:
      wait  empty[s] parity ((kb // S) + 1) & 1   (fresh barrier: parity 1 passes at once)
      one elected thread: expect_tx + TMA a tile -> a_s[s], b tile -> b_s[s]   (OOB = zeros)
      smem_scales: thread t stores block kb's scale of the tile's row t -> sa_s[s, t], thread 0
            b's block scale -> sb_s[s] (both loaded from global memory before the empty wait)
      all 128 threads arrive on full[s]            (full[s] init count 128, + the TMA bytes; the
            arrive releases the scale stores, the consumers' wait acquires them)
  consumer c (threads 128(c+1)..+127, setmaxnreg.inc to `consumer_regs`), rows r0 = 64 c; block b
  lives in part[b % 2] (static roles: fragments are registers), in groups of `unroll` (2 or 4):
      prologue: acc = 0; part1 = 0, sa1 = sb1 = 0 (so group 0 "promotes" block -1: acc += 0 * 0,
                bit for bit a no-op); sa0, sb0 <- scales of block 0
      block b of a group (cur = part[b % 2], prev = the other):
                wait full[b % S]; issue WGMMA chain a_s[s, r0:r0+64] @ b_s[s]^T -> cur (async)
                wait_group 1: block b-1 done (first block of a group: a run-time no-op, for ptxas)
                arrive empty[(b-1) % S] (not for a group's first block: released already)
                acc += prev * (sa_prev * sb_prev)             block b-1, overlapping block b
                sa_prev, sb_prev <- scales of block min(b+1, KB-1)   (smem_scales: instead, right after
                block b's issue, sa_cur, sb_cur <- block b's scales from its slot; the global
                load's latency stalled this path: ncu at 8192^3, tensor pipe 67% -> 76% busy)
      group end: wait_group 0 (its last block done); arrive empty[last % S]
      loop: nk // unroll groups; unroll 4: one group of 2 more when nk % 4 >= 2
      tail: nk odd: wait full[nk-1]; issue -> part0; wait_group 1; promote part1 (block nk-2 or
            zeros); wait_group 0; promote part0 (block nk-1).  nk even: promote part1.
      epilogue: acc -> c_s[c] (bf16, own 64x128 buffer), fence.proxy.async, named barrier 1 + c
      (this warpgroup's 128 threads), one thread TMA-stores c_s[c] -> out (the store clips M/N
      edges); a grouped tile whose 64 rows pass `hi` stores element by element under a row mask.
  Every promotion overlaps the next block's WGMMAs except at a group boundary, where the group's
  last chain must finish (wait_group 0) before the next block is issued: ptxas serializes every
  wgmma in the kernel (C7514) when a chain is in flight across the loop's back edge while another
  fragment is read, and injects a full wait (C7517) when a WGMMA-written register is read after a
  WGMMA issue with no wait_group in between; this structure compiles with neither.
No thread exits early; every barrier a warp waits on is one its partners arrive on unconditionally.

Why it cannot deadlock / race:
  * full[s] phase j = block s + j S.  A consumer waits phase j only after it released block
    s + (j-1) S, and the producer cannot start phase j+1 before every consumer released block
    s + j S, so a waiter never sees the barrier two phases ahead (parity is unambiguous).
  * empty[s] phase j-1 = the 128 * consumers arrivals for block s + (j-1) S; the producer waits for
    it before loading block s + j S into the slot.  An arrival comes after that thread's
    wgmma.wait_group that covers the block (each warp waits for its own WGMMAs, so the count of 128
    per warpgroup means every warp's reads of the slot are done).  The odd last block is never
    released (the producer does not reuse its slot).
  * Progress needs S >= 2: when a consumer waits full[kb] it has released every block <= kb-2
    (a group's end releases its last block before the next group's first wait), and the producer
    needs block kb-S released to load kb.
  * nk = 1: no group, the tail issues block 0, promotes the zero part1, waits 0 and promotes block
    0.  nk = 0 (K = 0, or a grouped tile in no segment): no group, no tail, acc += 0 * 0; a dense
    tile stores zeros, a grouped one nothing.  The prologue's scale load is clamped/guarded.
  * Rows past M (the last tile's upper consumer may be all past M): TMA reads zeros, the scale
    row is clamped, the store clips; nobody branches on it.
  * Shared memory is not reused across buffers (tl.disable_shared_memory_reuse): with manual
    synchronization, c_s aliasing a ring slot another consumer still reads would race.
    tilelang's automatic __syncthreads placement is off (tl.disable_thread_storage_sync): it would
    deadlock in warpgroup-divergent code; the kernel places its own barriers.
Persistent (`sm_count` given: the SM_COUNT kernel argument): min(tiles, SM_COUNT) CTAs, CTA c
takes tiles c, c + grid, ... (panels of `panel` M tiles swept along N).  Producer and consumers
walk the same tile list and count the K blocks done (g0), so the ring's slots and phases run on
across tiles exactly as within one (the proofs above hold for the concatenated block sequence);
the odd last block of a tile is released too (its slot is reused), and each epilogue starts with
the warpgroup's named barrier, so no thread overwrites c_s before the previous tile's TMA store,
waited by its issuing thread, has read it.
Registers: a consumer thread holds acc 64 + two parts 128 fp32; 2 consumers at 240 + producer at
24 is 2 * 128 * 240 + 128 * 24 = 64512 <= 65536 (smem_scales: 232 + 40, the producer holding the
loaded scales; at 24 it spills).  (Three consumers with each block split into two 64-column halves
fit at 160 registers, but lost 4-37% to this tile; a 2-CTA cluster multicasting
the shared A tile was +-9% shape by shape and lost on the grouped GEMMs: docs/gemm-tuning.md.)
"""
GROUP = 128
FP8 = "float8_e4m3fn"
# the variant's tilelang pass configs (see the docstring: manual barriers, no smem aliasing)
PASS_CONFIGS = {"tl.disable_thread_storage_sync": True, "tl.disable_shared_memory_reuse": True}


def fp8_ws_body(T, layout: str, M, N, K, E, block_M: int = 128, stages: int = 4, consumers: int = 2,
                panel: int = 10, producer_regs: int = 24, consumer_regs: int = 240, unroll: int = 2,
                expert_of=None, sm_count=None, swap_ab: bool = False, block_tok: int = 16, smem_scales: bool = False,
                min_blocks: int = 1, splits: int = 1):
    """The kernel body `body(a, a_scale, b, b_scale, groups, out)` (groups None when dense); the
    macro `expert_of(groups, m0, bz, e, hi, valid)` sets a grouped tile's expert, row limit and
    whether it has work (grouped_gemm.py).  swap_ab (dense decode): the consumers' 64-row WGMMA
    side is weight rows (block_M of them), the tokens (block_tok) its N side, as in
    kernels_src/fp8_gemm.py's swap-AB tiles; producer_regs 0: no register rebalancing.  min_blocks
    (grid form): __launch_bounds__(threads, min_blocks), so that many CTAs share an SM when their
    registers (the setmaxnreg split included) and shared memory fit.  splits > 1 (swap-AB decode):
    split-K over the grid's z, split z running K blocks [z * per, (z + 1) * per), per =
    ceil(KB / splits), into fp32 partials ws[z] (the body then takes `ws`) that a second kernel
    sums in split order, so that a small N still fills the SMs."""
    assert layout in ("dense", "contiguous", "masked") and (layout == "dense") == (expert_of is None)
    assert block_M == 64 * consumers and consumers in (1, 2)
    assert unroll in (2, 4)
    persistent = sm_count is not None   # one CTA a SM looping over tiles (SM_COUNT, a kernel argument)
    assert stages >= 2, "a slot stays held by the WGMMA chain in flight (see the docstring)"
    assert not producer_regs or 128 * (consumers * consumer_regs + producer_regs) * min_blocks <= 65536
    assert min_blocks == 1 or sm_count is None, "a persistent kernel runs one CTA a SM"
    assert not swap_ab or (layout == "dense" and not persistent and block_tok % 8 == 0)
    assert splits == 1 or (swap_ab and smem_scales), "split-K: the swap-AB decode tile, scales in its ring"
    block_N = block_K = GROUP
    half = 64
    # A tile rows (tokens), B tile rows (weights), columns of a consumer's part / acc
    rows_a, rows_b, cols = (block_tok, block_M, block_tok) if swap_ab else (block_M, block_N, block_N)
    nreg = half * cols // 128
    threads = 128 * (consumers + 1)
    masked = layout == "masked"
    KB = T.ceildiv(K, GROUP)
    full_row = T.GemmWarpPolicy.FullRow

    def a_tile(a, e, m0, k):
        if masked:
            return a[e, m0:m0 + rows_a, k * block_K:(k + 1) * block_K]
        return a[m0:m0 + rows_a, k * block_K:(k + 1) * block_K]

    def b_tile(b, e, n0, k):
        if layout == "dense":
            return b[n0:n0 + rows_b, k * block_K:(k + 1) * block_K]
        return b[e, n0:n0 + rows_b, k * block_K:(k + 1) * block_K]

    @T.macro
    def issue(a_s, b_s, s, r0, part):
        if swap_ab:
            T.wgmma_gemm(b_s[s, r0:r0 + half, :], a_s[s, :, :], part, transpose_B=True, policy=full_row,
                         clear_accum=True)
        else:
            T.wgmma_gemm(a_s[s, r0:r0 + half, :], b_s[s, :, :], part, transpose_B=True, policy=full_row,
                         clear_accum=True)

    @T.macro
    def promote(acc, part, sa, sb):
        if swap_ab:   # part[weight row, token]: the token's scale varies along the columns
            for i, j in T.Parallel(half, cols):
                acc[i, j] += part[i, j] * (sa[j] * sb[0])
        else:
            for i, j in T.Parallel(half, block_N):
                acc[i, j] += part[i, j] * (sa[i] * sb[0])

    @T.macro
    def scales_rows(a_scale, b_scale, e, m0, n0, r0, kc, sa, sb):
        for i in T.Parallel(half):
            if masked:
                sa[i] = a_scale[e, T.min(m0 + r0 + i, M - 1), kc]
            else:
                sa[i] = a_scale[T.min(m0 + r0 + i, M - 1), kc]
        if layout == "dense":
            sb[0] = b_scale[n0 // GROUP, kc]
        else:
            sb[0] = b_scale[e, n0 // GROUP, kc]

    @T.macro
    def scales(a_scale, b_scale, e, m0, n0, r0, g0, k, sa, sb):
        # block k's scales (k clamped to the last block), loaded a step before their promotion;
        # smem_scales: a_scale / b_scale are the ring's scale slots, which the producer filled
        kc = T.min(k, KB - 1)
        if smem_scales:
            if swap_ab:   # the tile's tokens
                for j in T.Parallel(cols):
                    sa[j] = a_scale[(g0 + k) % stages, j]
            else:
                for i in T.Parallel(half):
                    sa[i] = a_scale[(g0 + k) % stages, r0 + i]
            sb[0] = b_scale[(g0 + k) % stages]
        elif swap_ab:   # the tile's tokens m0.. and the weight block of rows n0 + r0 ..
            for j in T.Parallel(cols):
                sa[j] = a_scale[T.min(m0 + j, M - 1), kc]
            sb[0] = b_scale[(n0 + r0) // GROUP, kc]
        else:
            scales_rows(a_scale, b_scale, e, m0, n0, r0, kc, sa, sb)

    # g0: the CTA's count of K blocks before this tile (persistent: the ring and its phases run on
    # across tiles); block b of the tile uses ring entry g0 + b, and part[b % 2] (b local).
    @T.macro
    def one(a_scale, b_scale, e, m0, n0, r0, g0, b, a_s, b_s, full, empty, cur, prev, sa_cur, sb_cur, sa_prev, sb_prev,
            acc, first):
        # block b -> cur; then block b-1 (in prev, scales sa_prev/sb_prev) is retired and promoted
        # while block b's chain runs, and prev's scale registers take block b+1's scales
        # (smem_scales: cur's take block b's, from its slot, right after the issue)
        T.mbarrier_wait_parity(full[(g0 + b) % stages], ((g0 + b) // stages) % 2)
        issue(a_s, b_s, (g0 + b) % stages, r0, cur)
        if smem_scales:   # from shared memory: no global latency on the path to the next issue
            scales(a_scale, b_scale, e, m0, n0, r0, g0, b, sa_cur, sb_cur)
        # not first: block b-1 done, block b may run on.  first: a run-time no-op (block b-1 was
        # retired by the previous group's wait_group 0), but ptxas injects a full wait (C7517)
        # when a WGMMA-written register is read after a WGMMA issue with no wait_group between
        T.wait_wgmma(1)
        T.warpgroup_fence_operand(prev, num_regs=nreg)
        if not first:
            T.barrier_arrive(empty[(g0 + b - 1) % stages])
        promote(acc, prev, sa_prev, sb_prev)
        if not smem_scales:
            scales(a_scale, b_scale, e, m0, n0, r0, g0, b + 1, sa_prev, sb_prev)

    @T.macro
    def group(a_scale, b_scale, e, m0, n0, r0, g0, b0, n, a_s, b_s, full, empty, fr):
        # blocks b0 .. b0+n-1 (n = 2 or 4, b0 even: block b sits in part[b % 2]); on entry nothing
        # is in flight and part1 holds block b0-1, retired but not promoted; the same on exit
        acc, part0, part1, sa0, sa1, sb0, sb1 = fr
        p0 = (part0, part1, sa0, sb0, sa1, sb1)
        p1 = (part1, part0, sa1, sb1, sa0, sb0)
        one(a_scale, b_scale, e, m0, n0, r0, g0, b0, a_s, b_s, full, empty, *p0, acc, True)
        one(a_scale, b_scale, e, m0, n0, r0, g0, b0 + 1, a_s, b_s, full, empty, *p1, acc, False)
        if n == 4:
            one(a_scale, b_scale, e, m0, n0, r0, g0, b0 + 2, a_s, b_s, full, empty, *p0, acc, False)
            one(a_scale, b_scale, e, m0, n0, r0, g0, b0 + 3, a_s, b_s, full, empty, *p1, acc, False)
        T.wait_wgmma(0)
        T.warpgroup_fence_operand(part1, num_regs=nreg)
        T.barrier_arrive(empty[(g0 + b0 + n - 1) % stages])

    @T.macro
    def store_tile(acc, c_s, out, e, m0, n0, r0, bar_id, hi, valid):
        if persistent:   # the previous tile's TMA store (waited by its issuing thread) has read c_s
            T.sync_threads(barrier_id=bar_id, arrive_count=128)
        if layout == "dense":
            T.copy(acc, c_s)
            T.fence_proxy_async()                                   # smem writes -> the TMA store
            T.sync_threads(barrier_id=bar_id, arrive_count=128)     # this warpgroup only
            T.copy(c_s, out[m0 + r0, n0])
        elif valid > 0:
            # uniform over the warpgroup: its 64 rows all below hi -> TMA, else masked stores
            if m0 + r0 + half <= hi:
                T.copy(acc, c_s)
                T.fence_proxy_async()
                T.sync_threads(barrier_id=bar_id, arrive_count=128)
                if masked:
                    T.copy(c_s, out[e, m0 + r0, n0])
                else:
                    T.copy(c_s, out[m0 + r0, n0])
            else:
                for i, j in T.Parallel(half, block_N):
                    if m0 + r0 + i < hi and n0 + j < N:
                        if masked:
                            out[e, m0 + r0 + i, n0 + j] = T.cast(acc[i, j], "bfloat16")
                        else:
                            out[m0 + r0 + i, n0 + j] = T.cast(acc[i, j], "bfloat16")

    @T.macro
    def store(acc, c_s, out, e, m0, n0, r0, bar_id, hi, valid):
        if swap_ab:   # acc[weight row, token] -> out[token, weight row], element by element
            for i, j in T.Parallel(half, cols):
                if m0 + j < M and n0 + r0 + i < N:
                    if splits == 1:
                        out[m0 + j, n0 + r0 + i] = T.cast(acc[i, j], "bfloat16")
                    else:   # out: the fp32 partials, e: the split (see grid_body)
                        out[e, m0 + j, n0 + r0 + i] = acc[i, j]
        else:
            store_tile(acc, c_s, out, e, m0, n0, r0, bar_id, hi, valid)

    @T.macro
    def consumer(a_scale, b_scale, out, e, hi, valid, nk, m0, n0, r0, g0, bar_id, a_s, b_s, c_s, full, empty, fr):
        acc, part0, part1, sa0, sa1, sb0, sb1 = fr
        T.clear(acc)
        # part1 and its scales start as zeros: the first group "promotes" block -1, acc += 0 * 0,
        # which leaves acc (+0) bit for bit as it is, so no branch on the first block
        T.clear(part1)
        T.clear(sa1)
        sb1[0] = 0.0
        if not smem_scales:
            scales(a_scale, b_scale, e, m0, n0, r0, g0, 0, sa0, sb0)
        # Groups of `unroll` blocks; no WGMMA is in flight across the loop's back edge (ptxas
        # serializes every wgmma in the kernel otherwise, C7514): a group ends with wait_group 0.
        for q in T.serial(nk // unroll):
            group(a_scale, b_scale, e, m0, n0, r0, g0, q * unroll, unroll, a_s, b_s, full, empty, fr)
        if unroll == 4:
            if nk % 4 >= 2:
                group(a_scale, b_scale, e, m0, n0, r0, g0, nk // 4 * 4, 2, a_s, b_s, full, empty, fr)
        if nk % 2 == 1:
            # the odd last block nk-1 -> part0, its scales already in sa0/sb0
            T.mbarrier_wait_parity(full[(g0 + nk - 1) % stages], ((g0 + nk - 1) // stages) % 2)
            issue(a_s, b_s, (g0 + nk - 1) % stages, r0, part0)
            if smem_scales:
                scales(a_scale, b_scale, e, m0, n0, r0, g0, nk - 1, sa0, sb0)
            T.wait_wgmma(1)                                      # no-op, for ptxas (see group)
            T.warpgroup_fence_operand(part1, num_regs=nreg)
            promote(acc, part1, sa1, sb1)                        # block nk-2 (or zeros)
            T.wait_wgmma(0)
            T.warpgroup_fence_operand(part0, num_regs=nreg)
            if persistent:   # the producer reuses the slot for a later tile
                T.barrier_arrive(empty[(g0 + nk - 1) % stages])
            promote(acc, part0, sa0, sb0)                        # block nk-1
        else:
            promote(acc, part1, sa1, sb1)                        # block nk-1 (or zeros)
        store(acc, c_s, out, e, m0, n0, r0, bar_id, hi, valid)

    @T.macro
    def producer(a, b, a_scale, b_scale, e, nk, m0, n0, g0, a_s, b_s, sa_s, sb_s, full, empty, tx, k0):
        # smem_scales: block k's scales ride in its slot, thread t loading the tile's row t and
        # thread 0 b's block, issued before the wait for the slot so their latency hides under it.
        # k0: the split's first K block (None: 0)
        sav = T.alloc_local((1,), "float32") if smem_scales else None
        sbv = T.alloc_local((1,), "float32") if smem_scales else None
        for kl in T.serial(nk):
            s = (g0 + kl) % stages
            k = kl if k0 is None else k0 + kl
            if smem_scales:   # (swap_ab: the A side is the tile's tokens; both consumers' weight
                # rows lie in the 128-row scale block of n0)
                if masked:
                    sav[0] = a_scale[e, T.min(m0 + tx, M - 1), k]
                else:
                    sav[0] = a_scale[T.min(m0 + tx, M - 1), k]
                if tx == 0:
                    if layout == "dense":
                        sbv[0] = b_scale[n0 // GROUP, k]
                    else:
                        sbv[0] = b_scale[e, n0 // GROUP, k]
            T.mbarrier_wait_parity(empty[s], ((g0 + kl) // stages + 1) % 2)
            T.tma_copy(a_tile(a, e, m0, k), a_s[s, :, :], barrier=full[s])
            T.tma_copy(b_tile(b, e, n0, k), b_s[s, :, :], barrier=full[s])
            if smem_scales:
                if tx < rows_a:
                    sa_s[s, tx] = sav[0]
                if tx == 0:
                    sb_s[s] = sbv[0]
            T.barrier_arrive(full[s])   # (release: the consumers' acquire sees the slot's scales)

    def fragments():
        return (T.alloc_fragment((half, cols), "float32"),       # acc
                T.alloc_fragment((half, cols), "float32"),       # part0: even blocks
                T.alloc_fragment((half, cols), "float32"),       # part1: odd blocks
                T.alloc_fragment((cols if swap_ab else half,), "float32"),   # sa0: part0's a scales
                T.alloc_fragment((cols if swap_ab else half,), "float32"),   # sa1
                T.alloc_local((1,), "float32"),                  # sb0: part0's b scale
                T.alloc_local((1,), "float32"))                  # sb1

    @T.macro
    def wg(a_scale, b_scale, out, e, hi, valid, nk, m0, n0, c, a_s, b_s, c_s, full, empty):
        # consumer c: rows 64 c of the tile, its own epilogue buffer and named barrier 1 + c
        if producer_regs:
            T.inc_max_nreg(consumer_regs)
        consumer(a_scale, b_scale, out, e, hi, valid, nk, m0, n0, c * half, 0, 1 + c, a_s, b_s, c_s[c], full, empty,
                 fragments())

    @T.macro
    def locate(groups, tile, m0: T.Ref, n0: T.Ref, e: T.Ref, hi: T.Ref, valid: T.Ref):
        # persistent: tile index -> its origin (panels of `panel` M tiles swept along N, as
        # T.use_swizzle does for a grid) and, grouped, its expert
        ntn, ntm = T.ceildiv(N, block_N), T.ceildiv(M, block_M)
        r = tile % (ntm * ntn)
        p0 = r // (panel * ntn) * panel
        rows = T.min(panel, ntm - p0)
        q = r - p0 * ntn
        m0 = (p0 + q % rows) * block_M
        n0 = q // rows * block_N
        if layout != "dense":
            expert_of(groups, m0, tile // (ntm * ntn), e, hi, valid)

    @T.macro
    def consumer_loop(a_scale, b_scale, groups, out, bx, grid, ntiles, c, m0: T.Ref, n0: T.Ref, e: T.Ref,
                      hi: T.Ref, valid: T.Ref, g0: T.Ref, a_s, b_s, c_s, full, empty):
        # consumer c of a persistent CTA: its fragments live across the tiles
        if producer_regs:
            T.inc_max_nreg(consumer_regs)
        fr = fragments()
        for t in T.serial(T.ceildiv(ntiles - bx, grid)):
            locate(groups, bx + t * grid, m0, n0, e, hi, valid)
            consumer(a_scale, b_scale, out, e, hi, valid, KB * valid, m0, n0, c * half, g0, 1 + c, a_s, b_s, c_s[c],
                     full, empty, fr)
            g0 = g0 + KB * valid

    @T.macro
    def persistent_body(a, a_scale, b, b_scale, groups, out):
        ntiles = T.ceildiv(N, block_N) * T.ceildiv(M, block_M) * (E if masked else 1)
        with T.Kernel(T.max(T.min(ntiles, sm_count), 1), threads=threads) as bx:
            # the same buffers as grid_body's, allocated here by name (a helper returning them
            # would leave them unnamed: see grid_body)
            a_s = T.alloc_shared((stages, block_M, block_K), FP8)
            b_s = T.alloc_shared((stages, block_N, block_K), FP8)
            c_s0 = T.alloc_shared((half, block_N), "bfloat16")
            c_s1 = T.alloc_shared((half, block_N), "bfloat16") if consumers == 2 else None
            c_s = (c_s0, c_s1)
            full = T.alloc_barrier([128] * stages)
            # smem_scales: each ring slot's block scales (a: the tile's rows, b: one)
            sa_s = T.alloc_shared((stages, rows_a), "float32") if smem_scales else None
            sb_s = T.alloc_shared((stages,), "float32") if smem_scales else None
            sc = (sa_s, sb_s) if smem_scales else (a_scale, b_scale)   # where the consumers read scales
            empty = T.alloc_barrier([128 * consumers] * stages)
            m0 = T.alloc_var("int32")
            n0 = T.alloc_var("int32")
            e = T.alloc_var("int32")
            hi = T.alloc_var("int32")
            valid = T.alloc_var("int32")
            g0 = T.alloc_var("int32")
            grid = T.max(T.min(ntiles, sm_count), 1)
            T.sync_threads()
            tx = T.get_thread_binding()
            e = 0
            hi = 0
            valid = 1
            g0 = 0
            if tx < 128:
                if producer_regs:
                    T.dec_max_nreg(producer_regs)
                for t in T.serial(T.ceildiv(ntiles - bx, grid)):
                    locate(groups, bx + t * grid, m0, n0, e, hi, valid)
                    producer(a, b, a_scale, b_scale, e, KB * valid, m0, n0, g0, a_s, b_s, sa_s, sb_s, full, empty, tx,
                             None)
                    g0 = g0 + KB * valid
            elif consumers == 1:
                consumer_loop(*sc, groups, out, bx, grid, ntiles, 0, m0, n0, e, hi, valid, g0,
                              a_s, b_s, c_s, full, empty)
            elif tx < 256:
                consumer_loop(*sc, groups, out, bx, grid, ntiles, 0, m0, n0, e, hi, valid, g0,
                              a_s, b_s, c_s, full, empty)
            else:
                consumer_loop(*sc, groups, out, bx, grid, ntiles, 1, m0, n0, e, hi, valid, g0,
                              a_s, b_s, c_s, full, empty)

    @T.macro
    def grid_body(a, a_scale, b, b_scale, groups, out):
        with T.Kernel(T.ceildiv(N, rows_b), T.ceildiv(M, rows_a), E if masked else splits,
                      threads=threads) as (bx, by, bz):
            if min_blocks > 1:
                T.annotate_min_blocks_per_sm(min_blocks)
            a_s = T.alloc_shared((stages, rows_a, block_K), FP8)
            b_s = T.alloc_shared((stages, rows_b, block_K), FP8)
            # one named buffer a consumer (from a list they were all "buffer", and which one got
            # which shared-memory offset changed from build to build: cubins not reproducible);
            # swap_ab stores element by element
            c_s0 = None if swap_ab else T.alloc_shared((half, block_N), "bfloat16")
            c_s1 = T.alloc_shared((half, block_N), "bfloat16") if consumers == 2 and not swap_ab else None
            c_s = (c_s0, c_s1)
            full = T.alloc_barrier([128] * stages)
            # smem_scales: each ring slot's block scales (a: the tile's rows, b: one)
            sa_s = T.alloc_shared((stages, rows_a), "float32") if smem_scales else None
            sb_s = T.alloc_shared((stages,), "float32") if smem_scales else None
            sc = (sa_s, sb_s) if smem_scales else (a_scale, b_scale)   # where the consumers read scales
            empty = T.alloc_barrier([128 * consumers] * stages)
            T.use_swizzle(panel_size=panel)
            m0, n0 = by * rows_a, bx * rows_b
            k0 = None
            if layout == "dense" and splits > 1:
                # split bz: K blocks k0 .. k0 + nk - 1; dense has no expert, so e carries the
                # split to the store (out is the partials ws[splits, M, N] then)
                k0 = bz * T.ceildiv(KB, splits)
                e, hi, valid, nk = bz, None, 1, T.max(T.min(KB - k0, T.ceildiv(KB, splits)), 0)
            elif layout == "dense":
                # (no name may be bound to a bare Var such as M here: the builder would rename it)
                e, hi, valid, nk = 0, None, 1, KB
            else:
                e = T.alloc_var("int32")
                hi = T.alloc_var("int32")
                valid = T.alloc_var("int32")
                expert_of(groups, m0, bz, e, hi, valid)
                nk = KB * valid
            T.sync_threads()
            tx = T.get_thread_binding()
            # one branch per warpgroup, so each consumer's fragments are laid out for its own 128
            # threads (a 256-thread branch would split the 64-row tile over 8 warps)
            if tx < 128:
                if producer_regs:
                    T.dec_max_nreg(producer_regs)
                producer(a, b, a_scale, b_scale, e, nk, m0, n0, 0, a_s, b_s, sa_s, sb_s, full, empty, tx, k0)
            elif consumers == 1:
                wg(*sc, out, e, hi, valid, nk, m0, n0, 0, a_s, b_s, c_s, full, empty)
            elif tx < 256:
                wg(*sc, out, e, hi, valid, nk, m0, n0, 0, a_s, b_s, c_s, full, empty)
            else:
                wg(*sc, out, e, hi, valid, nk, m0, n0, 1, a_s, b_s, c_s, full, empty)

    return persistent_body if persistent else grid_body
