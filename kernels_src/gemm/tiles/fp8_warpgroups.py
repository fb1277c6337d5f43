"""The warpgroups of the FP8 warp-specialized tile (fp8_warp_specialized.py has the schedule and
why it is safe): the producer's TMA + scale loads into the ring, a consumer's WGMMA issue /
promotion loop over one tile, and its store.  Each builder takes the tile's `TileShape` and returns
its macro; the bodies in fp8_warp_specialized.py allocate the buffers and call them.
"""
from kernels_src.common import SCALE_GROUP

HALF = 64   # rows of a consumer's WGMMA side


class TileShape:
    """The tile's shape, derived once from the body's parameters; the macro builders read it."""

    def __init__(self, T, layout, M, N, K, E, block_M, stages, panel, producer_registers, expert_of, sm_count,
                 swap_ab, block_tokens, splits):
        self.layout, self.M, self.N, self.E, self.block_M, self.stages = layout, M, N, E, block_M, stages
        self.panel, self.producer_registers = panel, producer_registers
        self.expert_of, self.sm_count, self.swap_ab, self.splits = expert_of, sm_count, swap_ab, splits
        self.consumers = block_M // HALF
        self.persistent = sm_count is not None   # one CTA a SM looping over tiles
        self.masked = layout == "masked"
        # A tile rows (tokens), B tile rows (weights), columns of a consumer's part / acc
        self.rows_a, self.rows_b, self.cols = (block_tokens, block_M, block_tokens) if swap_ab else (
            block_M, SCALE_GROUP, SCALE_GROUP)
        self.nreg = HALF * self.cols // 128
        self.threads = 128 * (self.consumers + 1)
        self.KB = T.ceildiv(K, SCALE_GROUP)

    def fragments(self, T):
        """A consumer's registers: acc, part0 (even blocks), part1 (odd blocks), sa0 / sa1 (their
        a scales), sb0 / sb1 (their b scale)."""
        sa_len = self.cols if self.swap_ab else HALF
        return (T.alloc_fragment((HALF, self.cols), "float32"),
                T.alloc_fragment((HALF, self.cols), "float32"),
                T.alloc_fragment((HALF, self.cols), "float32"),
                T.alloc_fragment((sa_len,), "float32"),
                T.alloc_fragment((sa_len,), "float32"),
                T.alloc_local((1,), "float32"),
                T.alloc_local((1,), "float32"))


def store_macro(T, shape: TileShape):
    """macro store(acc, c_s, out, e, m0, n0, r0, bar_id, hi, valid): a consumer's 64 rows -> out."""
    M, N, half, cols, layout = shape.M, shape.N, HALF, shape.cols, shape.layout
    masked, persistent = shape.masked, shape.persistent
    block_N = SCALE_GROUP

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
        if shape.swap_ab:   # acc[weight row, token] -> out[token, weight row], element by element
            for i, j in T.Parallel(half, cols):
                if m0 + j < M and n0 + r0 + i < N:
                    if shape.splits == 1:
                        out[m0 + j, n0 + r0 + i] = T.cast(acc[i, j], "bfloat16")
                    else:   # out: the fp32 workspace, e: the split (see grid_body)
                        out[e, m0 + j, n0 + r0 + i] = acc[i, j]
        else:
            store_tile(acc, c_s, out, e, m0, n0, r0, bar_id, hi, valid)
    return store


def consumer_macro(T, shape: TileShape, store):
    """macro consumer(...): one consumer warpgroup's K loop over one tile (ring entries g0 ..), its
    promotions and its store.  sa_s / sb_s: the ring's scale slots."""
    stages, half, cols, nreg, persistent = shape.stages, HALF, shape.cols, shape.nreg, shape.persistent
    full_row = T.GemmWarpPolicy.FullRow

    @T.macro
    def issue(a_s, b_s, s, r0, part):
        if shape.swap_ab:
            T.wgmma_gemm(b_s[s, r0:r0 + half, :], a_s[s, :, :], part, transpose_B=True, policy=full_row,
                         clear_accum=True)
        else:
            T.wgmma_gemm(a_s[s, r0:r0 + half, :], b_s[s, :, :], part, transpose_B=True, policy=full_row,
                         clear_accum=True)

    @T.macro
    def promote(acc, part, sa, sb):
        if shape.swap_ab:   # part[weight row, token]: the token's scale varies along the columns
            for i, j in T.Parallel(half, cols):
                acc[i, j] += part[i, j] * (sa[j] * sb[0])
        else:
            for i, j in T.Parallel(half, cols):
                acc[i, j] += part[i, j] * (sa[i] * sb[0])

    @T.macro
    def scales(sa_s, sb_s, r0, g0, k, sa, sb):
        # block k's scales from its ring slot (swap_ab: the tile's tokens; else the consumer's rows)
        if shape.swap_ab:
            for j in T.Parallel(cols):
                sa[j] = sa_s[(g0 + k) % stages, j]
        else:
            for i in T.Parallel(half):
                sa[i] = sa_s[(g0 + k) % stages, r0 + i]
        sb[0] = sb_s[(g0 + k) % stages]

    # g0: the CTA's count of K blocks before this tile (persistent: the ring and its phases run on
    # across tiles); block b of the tile uses ring entry g0 + b, and part[b % 2] (b local).
    @T.macro
    def one(sa_s, sb_s, r0, g0, b, a_s, b_s, full, empty, cur, prev, sa_cur, sb_cur, sa_prev, sb_prev, acc, first):
        # block b -> cur, its scales -> sa_cur / sb_cur; then block b-1 (in prev) is retired and
        # promoted while block b's chain runs
        T.mbarrier_wait_parity(full[(g0 + b) % stages], ((g0 + b) // stages) % 2)
        issue(a_s, b_s, (g0 + b) % stages, r0, cur)
        scales(sa_s, sb_s, r0, g0, b, sa_cur, sb_cur)
        # not first: block b-1 done, block b may run on.  first: a run-time no-op (block b-1 was
        # retired by the previous group's wait_group 0), but ptxas injects a full wait (C7517)
        # when a WGMMA-written register is read after a WGMMA issue with no wait_group between
        T.wait_wgmma(1)
        T.warpgroup_fence_operand(prev, num_regs=nreg)
        if not first:
            T.barrier_arrive(empty[(g0 + b - 1) % stages])
        promote(acc, prev, sa_prev, sb_prev)

    @T.macro
    def group(sa_s, sb_s, r0, g0, b0, a_s, b_s, full, empty, fr):
        # blocks b0, b0 + 1 (b0 even: block b sits in part[b % 2]); on entry nothing is in flight
        # and part1 holds block b0-1, retired but not promoted; the same on exit
        acc, part0, part1, sa0, sa1, sb0, sb1 = fr
        one(sa_s, sb_s, r0, g0, b0, a_s, b_s, full, empty, part0, part1, sa0, sb0, sa1, sb1, acc, True)
        one(sa_s, sb_s, r0, g0, b0 + 1, a_s, b_s, full, empty, part1, part0, sa1, sb1, sa0, sb0, acc, False)
        T.wait_wgmma(0)
        T.warpgroup_fence_operand(part1, num_regs=nreg)
        T.barrier_arrive(empty[(g0 + b0 + 1) % stages])

    @T.macro
    def consumer(sa_s, sb_s, out, e, hi, valid, nk, m0, n0, r0, g0, bar_id, a_s, b_s, c_s, full, empty, fr):
        acc, part0, part1, sa0, sa1, sb0, sb1 = fr
        T.clear(acc)
        # part1 and its scales start as zeros: the first group "promotes" block -1, acc += 0 * 0,
        # which leaves acc (+0) bit for bit as it is, so no branch on the first block
        T.clear(part1)
        T.clear(sa1)
        sb1[0] = 0.0
        # Groups of 2 blocks; no WGMMA is in flight across the loop's back edge (ptxas serializes
        # every wgmma in the kernel otherwise, C7514): a group ends with wait_group 0.
        for q in T.serial(nk // 2):
            group(sa_s, sb_s, r0, g0, q * 2, a_s, b_s, full, empty, fr)
        if nk % 2 == 1:
            # the odd last block nk-1 -> part0
            T.mbarrier_wait_parity(full[(g0 + nk - 1) % stages], ((g0 + nk - 1) // stages) % 2)
            issue(a_s, b_s, (g0 + nk - 1) % stages, r0, part0)
            scales(sa_s, sb_s, r0, g0, nk - 1, sa0, sb0)
            T.wait_wgmma(1)                                      # no-op, for ptxas (see one)
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
    return consumer


def producer_macro(T, shape: TileShape):
    """macro producer(...): TMA of a tile's K blocks (ring entries g0 ..) with their scales."""
    M, stages, rows_a, rows_b = shape.M, shape.stages, shape.rows_a, shape.rows_b
    layout, masked = shape.layout, shape.masked
    block_K = SCALE_GROUP

    def a_tile(a, e, m0, k):
        if masked:
            return a[e, m0:m0 + rows_a, k * block_K:(k + 1) * block_K]
        return a[m0:m0 + rows_a, k * block_K:(k + 1) * block_K]

    def b_tile(b, e, n0, k):
        if layout == "dense":
            return b[n0:n0 + rows_b, k * block_K:(k + 1) * block_K]
        return b[e, n0:n0 + rows_b, k * block_K:(k + 1) * block_K]

    @T.macro
    def producer(a, b, a_scale, b_scale, e, nk, m0, n0, g0, a_s, b_s, sa_s, sb_s, full, empty, tx, k0):
        # block k's scales ride in its slot, thread t loading the tile's row t and thread 0 b's
        # block, issued before the wait for the slot so their latency hides under it.
        # k0: the split's first K block (None: 0)
        sav = T.alloc_local((1,), "float32")
        sbv = T.alloc_local((1,), "float32")
        for kl in T.serial(nk):
            s = (g0 + kl) % stages
            k = kl if k0 is None else k0 + kl
            # (swap_ab: the A side is the tile's tokens; both consumers' weight rows lie in the
            # 128-row scale block of n0)
            if masked:
                sav[0] = a_scale[e, T.min(m0 + tx, M - 1), k]
            else:
                sav[0] = a_scale[T.min(m0 + tx, M - 1), k]
            if tx == 0:
                if layout == "dense":
                    sbv[0] = b_scale[n0 // SCALE_GROUP, k]
                else:
                    sbv[0] = b_scale[e, n0 // SCALE_GROUP, k]
            T.mbarrier_wait_parity(empty[s], ((g0 + kl) // stages + 1) % 2)
            T.tma_copy(a_tile(a, e, m0, k), a_s[s, :, :], barrier=full[s])
            T.tma_copy(b_tile(b, e, n0, k), b_s[s, :, :], barrier=full[s])
            if tx < rows_a:
                sa_s[s, tx] = sav[0]
            if tx == 0:
                sb_s[s] = sbv[0]
            T.barrier_arrive(full[s])   # (release: the consumers' acquire sees the slot's scales)
    return producer
