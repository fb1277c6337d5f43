"""FP8 block-scaled GEMM tile with a hand-written producer/consumer split (sm_90a), for the dense op
(kernels_src/gemm/fp8.py: large M, and decode in swap-AB form) and both grouped layouts
(kernels_src/gemm/grouped.py).  A consumer warpgroup issues block k+1's WGMMAs before it promotes
block k, which tilelang's automatic warp specialization refuses (it will not delay a gemm's wait).
Same semantics, bit for bit, as a pipelined kernel:

    out = bf16( sum over kb of part_kb * (a_scale[row, kb] * b_scale[(e,) n0 // 128, kb]) ),

part_kb = the 128-wide K block's WGMMA chain (fp32, fresh fragment), promoted in kb order into an
fp32 accumulator on the CUDA cores: the same expression, in the same order.  On the H200 at 4096^3:
1056 TFLOP/s against 746 for the pipelined 192x128 tile it replaced (docs/gemm-tuning.md).

Layouts (`layout`): "dense" a[M, K] @ b[N, K]^T; "contiguous" a[M, K] rows offsets[e]:offsets[e+1]
@ b[e]^T (each 128-row tile lies in one expert: segments start at multiples of 128); "masked"
a[E, Mmax, K], rows < counts[e] of expert e.  A grouped tile finds its expert and row limit `hi`
first (grouped.py's `expert_macro`); a tile in no segment runs no K block and stores nothing.

One CTA = block_M x 128 output tile (block_M = 64 * consumers), 128 * (consumers + 1) threads:
  producer  (threads 0-127, setmaxnreg.dec to `producer_registers`): for kb in 0..nk-1, slot
      s = kb % S:
      load block kb's scales from global memory: thread t the tile's row t, thread 0 b's block
      wait  empty[s] parity ((kb // S) + 1) & 1   (fresh barrier: parity 1 passes at once)
      one elected thread: expect_tx + TMA a tile -> a_s[s], b tile -> b_s[s]   (OOB = zeros)
      store the scales into the slot: sa_s[s, t], sb_s[s]
      all 128 threads arrive on full[s]            (full[s] init count 128, + the TMA bytes; the
            arrive releases the scale stores, the consumers' wait acquires them)
  consumer c (threads 128(c+1)..+127, setmaxnreg.inc to CONSUMER_REGISTERS), rows r0 = 64 c; block
  b lives in part[b % 2] (static roles: fragments are registers), in groups of 2 blocks:
      prologue: acc = 0; part1 = 0, sa1 = sb1 = 0 (so group 0 "promotes" block -1: acc += 0 * 0,
                bit for bit a no-op)
      block b of a group (cur = part[b % 2], prev = the other):
                wait full[b % S]; issue WGMMA chain a_s[s, r0:r0+64] @ b_s[s]^T -> cur (async)
                sa_cur, sb_cur <- block b's scales from its slot (shared memory: no global load's
                latency on the path to the next issue)
                wait_group 1: block b-1 done (first block of a group: a run-time no-op, for ptxas)
                arrive empty[(b-1) % S] (not for a group's first block: released already)
                acc += prev * (sa_prev * sb_prev)             block b-1, overlapping block b
      group end: wait_group 0 (its last block done); arrive empty[last % S]
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
    tile stores zeros, a grouped one nothing.
  * Rows past M (the last tile's upper consumer may be all past M): TMA reads zeros, the scale
    row is clamped, the store clips; nobody branches on it.
  * Shared memory is not reused across buffers and tilelang places no barriers (tiles.PASS_CONFIGS).
Persistent (`sm_count` given: the SM_COUNT kernel argument): min(tiles, SM_COUNT) CTAs, CTA c
takes tiles c, c + grid, ... (panels of `panel` M tiles swept along N).  Producer and consumers
walk the same tile list and count the K blocks done (g0), so the ring's slots and phases run on
across tiles exactly as within one (the proofs above hold for the concatenated block sequence);
the odd last block of a tile is released too (its slot is reused), and each epilogue starts with
the warpgroup's named barrier, so no thread overwrites c_s before the previous tile's TMA store,
waited by its issuing thread, has read it.
Swap-AB (dense decode): a consumer's 64-row WGMMA side is weight rows, the tokens (block_tokens of
them) its N side; its store writes out[token, weight row] element by element.  splits > 1: split-K
over the grid's z into the fp32 workspace (kernels_src/gemm/split_k.py sums it).
Registers: a consumer thread holds acc 64 + two parts 128 fp32, at CONSUMER_REGISTERS beside a
producer at PRODUCER_REGISTERS (which holds the loaded scales; at 24 it spills).  The one-consumer
decode tile keeps the launch's even split (producer_registers = 0).
"""
from kernels_src.common import FP8, SCALE_GROUP

from . import CONSUMER_REGISTERS, PRODUCER_REGISTERS
from .fp8_warpgroups import HALF, TileShape, consumer_macro, producer_macro, store_macro


def _persistent_body(T, shape: TileShape, producer, consumer):
    """macro persistent_body(a, a_scale, b, b_scale, groups, out): one CTA a SM walking the tiles."""
    M, N, stages, half, panel, sm_count = shape.M, shape.N, shape.stages, HALF, shape.panel, shape.sm_count
    block_M, block_N, block_K, KB = shape.block_M, SCALE_GROUP, SCALE_GROUP, shape.KB
    rows_a, layout, expert_of = shape.rows_a, shape.layout, shape.expert_of
    producer_registers = shape.producer_registers
    assert shape.consumers == 2 and not shape.masked

    @T.macro
    def locate(groups, tile, m0: T.Ref, n0: T.Ref, e: T.Ref, hi: T.Ref, valid: T.Ref):
        # tile index -> its origin (panels of `panel` M tiles swept along N, as T.use_swizzle does
        # for a grid) and, grouped, its expert
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
    def consumer_loop(sa_s, sb_s, groups, out, bx, grid, ntiles, c, m0: T.Ref, n0: T.Ref, e: T.Ref,
                      hi: T.Ref, valid: T.Ref, g0: T.Ref, a_s, b_s, c_s, full, empty):
        # consumer c of a persistent CTA: its fragments live across the tiles
        if producer_registers:
            T.inc_max_nreg(CONSUMER_REGISTERS)
        fr = shape.fragments(T)
        for t in T.serial(T.ceildiv(ntiles - bx, grid)):
            locate(groups, bx + t * grid, m0, n0, e, hi, valid)
            consumer(sa_s, sb_s, out, e, hi, valid, KB * valid, m0, n0, c * half, g0, 1 + c, a_s, b_s, c_s[c],
                     full, empty, fr)
            g0 = g0 + KB * valid

    @T.macro
    def persistent_body(a, a_scale, b, b_scale, groups, out):
        ntiles = T.ceildiv(N, block_N) * T.ceildiv(M, block_M)
        with T.Kernel(T.max(T.min(ntiles, sm_count), 1), threads=shape.threads) as bx:
            # the same buffers as grid_body's, allocated here by name (a helper returning them
            # would leave them unnamed: see grid_body)
            a_s = T.alloc_shared((stages, block_M, block_K), FP8)
            b_s = T.alloc_shared((stages, block_N, block_K), FP8)
            c_s0 = T.alloc_shared((half, block_N), "bfloat16")
            c_s1 = T.alloc_shared((half, block_N), "bfloat16")
            c_s = (c_s0, c_s1)
            full = T.alloc_barrier([128] * stages)
            # each ring slot's block scales (a: the tile's rows, b: one)
            sa_s = T.alloc_shared((stages, rows_a), "float32")
            sb_s = T.alloc_shared((stages,), "float32")
            empty = T.alloc_barrier([256] * stages)
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
                if producer_registers:
                    T.dec_max_nreg(producer_registers)
                for t in T.serial(T.ceildiv(ntiles - bx, grid)):
                    locate(groups, bx + t * grid, m0, n0, e, hi, valid)
                    producer(a, b, a_scale, b_scale, e, KB * valid, m0, n0, g0, a_s, b_s, sa_s, sb_s, full, empty, tx,
                             None)
                    g0 = g0 + KB * valid
            elif tx < 256:
                consumer_loop(sa_s, sb_s, groups, out, bx, grid, ntiles, 0, m0, n0, e, hi, valid, g0,
                              a_s, b_s, c_s, full, empty)
            else:
                consumer_loop(sa_s, sb_s, groups, out, bx, grid, ntiles, 1, m0, n0, e, hi, valid, g0,
                              a_s, b_s, c_s, full, empty)
    return persistent_body


def _grid_body(T, shape: TileShape, producer, consumer):
    """macro grid_body(a, a_scale, b, b_scale, groups, out): one CTA a tile (grid z: the expert of
    the masked layout, or the split)."""
    M, N, E, stages, half, panel, splits = shape.M, shape.N, shape.E, shape.stages, HALF, shape.panel, shape.splits
    block_N = block_K = SCALE_GROUP
    KB, rows_a, rows_b, layout, consumers = shape.KB, shape.rows_a, shape.rows_b, shape.layout, shape.consumers
    producer_registers, expert_of, swap_ab = shape.producer_registers, shape.expert_of, shape.swap_ab

    @T.macro
    def wg(sa_s, sb_s, out, e, hi, valid, nk, m0, n0, c, a_s, b_s, c_s, full, empty):
        # consumer c: rows 64 c of the tile, its own epilogue buffer and named barrier 1 + c
        if producer_registers:
            T.inc_max_nreg(CONSUMER_REGISTERS)
        consumer(sa_s, sb_s, out, e, hi, valid, nk, m0, n0, c * half, 0, 1 + c, a_s, b_s, c_s[c], full, empty,
                 shape.fragments(T))

    @T.macro
    def grid_body(a, a_scale, b, b_scale, groups, out):
        with T.Kernel(T.ceildiv(N, rows_b), T.ceildiv(M, rows_a), E if shape.masked else splits,
                      threads=shape.threads) as (bx, by, bz):
            a_s = T.alloc_shared((stages, rows_a, block_K), FP8)
            b_s = T.alloc_shared((stages, rows_b, block_K), FP8)
            # one named buffer a consumer (from a list they were all "buffer", and which one got
            # which shared-memory offset changed from build to build: cubins not reproducible);
            # swap_ab stores element by element
            c_s0 = None if swap_ab else T.alloc_shared((half, block_N), "bfloat16")
            c_s1 = T.alloc_shared((half, block_N), "bfloat16") if consumers == 2 and not swap_ab else None
            c_s = (c_s0, c_s1)
            full = T.alloc_barrier([128] * stages)
            # each ring slot's block scales (a: the tile's rows, b: one)
            sa_s = T.alloc_shared((stages, rows_a), "float32")
            sb_s = T.alloc_shared((stages,), "float32")
            empty = T.alloc_barrier([128 * consumers] * stages)
            T.use_swizzle(panel_size=panel)
            m0, n0 = by * rows_a, bx * rows_b
            k0 = None
            if layout == "dense" and splits > 1:
                # split bz: K blocks k0 .. k0 + nk - 1; dense has no expert, so e carries the
                # split to the store (out is the workspace[splits, M, N] then)
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
                if producer_registers:
                    T.dec_max_nreg(producer_registers)
                producer(a, b, a_scale, b_scale, e, nk, m0, n0, 0, a_s, b_s, sa_s, sb_s, full, empty, tx, k0)
            elif consumers == 1:
                wg(sa_s, sb_s, out, e, hi, valid, nk, m0, n0, 0, a_s, b_s, c_s, full, empty)
            elif tx < 256:
                wg(sa_s, sb_s, out, e, hi, valid, nk, m0, n0, 0, a_s, b_s, c_s, full, empty)
            else:
                wg(sa_s, sb_s, out, e, hi, valid, nk, m0, n0, 1, a_s, b_s, c_s, full, empty)
    return grid_body


def fp8_warp_specialized_body(T, layout: str, M, N, K, E, block_M: int, stages: int, panel: int = 10,
                              producer_registers: int = PRODUCER_REGISTERS, expert_of=None, sm_count=None,
                              swap_ab: bool = False, block_tokens: int = 16, splits: int = 1):
    """The kernel body `body(a, a_scale, b, b_scale, groups, out)` (groups None when dense); the
    macro `expert_of(groups, m0, bz, e, hi, valid)` sets a grouped tile's expert, row limit and
    whether it has work (grouped.py).  block_M = 64 * consumers (1 or 2).  sm_count: persistent
    (dense and contiguous).  swap_ab (dense decode): the consumers' 64-row WGMMA side is weight rows
    (block_M of them), the tokens (block_tokens) its N side; producer_registers 0: no register
    rebalancing.  splits > 1 (swap-AB decode): split-K over the grid's z, split z running K blocks
    [z * per, (z + 1) * per), per = ceil(KB / splits), into fp32 partials workspace[z] (the body's
    `out`) that a second kernel sums in split order, so that a small N still fills the SMs."""
    assert layout in ("dense", "contiguous", "masked") and (layout == "dense") == (expert_of is None)
    assert block_M in (64, 128) and stages >= 2, "a slot stays held by the WGMMA chain in flight (see the docstring)"
    shape = TileShape(T, layout, M, N, K, E, block_M, stages, panel, producer_registers, expert_of, sm_count, swap_ab,
                      block_tokens, splits)
    assert not producer_registers or 128 * (shape.consumers * CONSUMER_REGISTERS + producer_registers) <= 65536
    assert not swap_ab or (layout == "dense" and not shape.persistent and block_tokens % 8 == 0)
    assert splits == 1 or swap_ab, "split-K: the swap-AB decode tile"
    producer = producer_macro(T, shape)
    consumer = consumer_macro(T, shape, store_macro(T, shape))
    return (_persistent_body if shape.persistent else _grid_body)(T, shape, producer, consumer)
