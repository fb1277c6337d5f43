"""bf16/fp16 GEMM tile with a hand-written producer/consumer split, persistent (sm_90a): out = a @ b^T
(+ bias), fp32 accumulation, rounded once; the dense op's large and mid classes
(kernels_src/gemm/dense.py) and the contiguous grouped GEMM (kernels_src/gemm/grouped.py).
Scheduled as CUTLASS's warp-specialized persistent kernels are, like the FP8 tile
(fp8_warp_specialized.py: its proofs of the mbarrier ring and the persistent walk hold here
unchanged); bf16 needs no promotion, so a consumer's whole tile row block is one WGMMA chain into
one accumulator.  Bit for bit the pipelined kernel's output (same K order).

One CTA a SM (`SM_COUNT`), 384 threads; tiles bx, bx + grid, ... in panels of PANEL M tiles swept
along N.  A tile is BLOCK_M = 128 rows x block_N columns, K blocks of BLOCK_K = 64.
  producer (threads 0-127, setmaxnreg PRODUCER_REGISTERS): for every K block of every tile, slot
      s = g % stages (g counts the CTA's K blocks across tiles): wait empty[s]; TMA a / b tiles ->
      a_s[s] / b_s[s] (zeros out of bounds); all 128 arrive full[s] (+ the bytes).
  consumer c = 0, 1 (threads 128(c+1).., setmaxnreg CONSUMER_REGISTERS): rows 64c.. of the tile,
      all block_N columns: for each K block wait full[s], issue the WGMMAs (64 x block_N x 64,
      async), wait_group 1 (the previous block's chain is done) and release that block's slot; the
      last block is waited and released after the loop.  One chain stays in flight across the
      loop's back edge, as in CUTLASS's mainloop: no other fragment is read meanwhile (the FP8
      tile's C7514 case does not arise).
      epilogue: in chunks of `epilogue_cols` columns: acc (+ bias) -> c_s[c] (its own 64 x
      epilogue_cols buffer), fence.proxy.async, named barrier 1 + c, one thread TMA-stores the
      chunk (clipped at the M / N edges) and waits until the store has read c_s before the
      warpgroup's next barrier lets anyone overwrite it.
      swiglu (tkreg.gemm_swiglu): each chunk's interleaved gate / up column groups are paired in
      registers (tiles.swiglu_column, two T.Parallel loops: one loop may read a fragment at one
      index only) into epilogue_cols / 2 output columns of c_s, stored at column n0 / 2.
The producer runs ahead into the next tile while the consumers store this one, so the epilogue and
the next tile's pipeline fill overlap (what one CTA a tile lost at K = 2048).
Grouped (contiguous layout, `expert_of`): every tile looks up its expert first (producer and
consumers alike); a tile in no segment loads and computes nothing, and g advances by its K blocks
only (valid * nk), the same count on both sides.
Measured on the H200: 0.98-1.12x cuBLAS on the prefill shapes (docs/gemm-tuning.md).
"""
from . import CONSUMER_REGISTERS, GROUP, PRODUCER_REGISTERS, swiglu_column, swiglu_value

BLOCK_M = 128   # two consumers of HALF rows each
BLOCK_K = 64
HALF = 64
PANEL = 10      # M tiles a panel of the persistent walk


def locate_macro(T, M, N, block_N: int, panel: int = PANEL):
    """macro(tile, m0, n0): the origin of the CTA's tile number `tile` of BLOCK_M x block_N tiles
    (panels of `panel` M tiles swept along N, as T.use_swizzle orders a grid)."""
    @T.macro
    def locate(tile, m0: T.Ref, n0: T.Ref):
        ntn, ntm = T.ceildiv(N, block_N), T.ceildiv(M, BLOCK_M)
        p0 = tile // (panel * ntn) * panel
        rows = T.min(panel, ntm - p0)
        q = tile - p0 * ntn
        m0 = (p0 + q % rows) * BLOCK_M
        n0 = q // rows * block_N
    return locate


def _producer(T, block_N: int, stages: int, grouped: bool, layout: str):
    """macro: the producer's K loop over one tile (nk_t blocks from ring entry g0).  Layouts (the
    reduced dim R of a[., R] / b[., R]): "nt" a[M, R] and b[N, R] (K-major); "nn" b stored [R, N];
    "tn" a stored [R, M] too, its two 64-row halves into each consumer's own a_s0 / a_s1."""
    @T.macro
    def producer(a, b, m0, n0, e, nk_t, g0, a_s, a_s1, b_s, full, empty):
        for k in T.serial(nk_t):
            s = (g0 + k) % stages
            T.mbarrier_wait_parity(empty[s], ((g0 + k) // stages + 1) % 2)
            if layout == "tn":
                T.tma_copy(a[k * BLOCK_K:(k + 1) * BLOCK_K, m0:m0 + HALF], a_s[s, :, :], barrier=full[s])
                T.tma_copy(a[k * BLOCK_K:(k + 1) * BLOCK_K, m0 + HALF:m0 + BLOCK_M], a_s1[s, :, :], barrier=full[s])
            else:
                T.tma_copy(a[m0:m0 + BLOCK_M, k * BLOCK_K:(k + 1) * BLOCK_K], a_s[s, :, :], barrier=full[s])
            if layout != "nt":
                T.tma_copy(b[k * BLOCK_K:(k + 1) * BLOCK_K, n0:n0 + block_N], b_s[s, :, :], barrier=full[s])
            elif grouped:
                T.tma_copy(b[e, n0:n0 + block_N, k * BLOCK_K:(k + 1) * BLOCK_K], b_s[s, :, :], barrier=full[s])
            else:
                T.tma_copy(b[n0:n0 + block_N, k * BLOCK_K:(k + 1) * BLOCK_K], b_s[s, :, :], barrier=full[s])
            T.barrier_arrive(full[s])
    return producer


def _consumer(T, N, block_N: int, stages: int, epilogue_cols: int, bias: bool, dtype: str, grouped: bool,
              swiglu: bool, layout: str):
    """macro: one consumer's K loop over one tile, then its epilogue (rows r0 .. r0 + 63); swiglu:
    each chunk's gate / up column groups paired into epilogue_cols / 2 output columns; layout as
    the producer's (WGMMA reads the MN-major operands transposed)."""
    full_row = T.GemmWarpPolicy.FullRow
    nreg = HALF * block_N // 128

    def out_column(n):
        """out's column of accumulator column n (a chunk's first)."""
        return n // 2 if swiglu else n

    @T.macro
    def store(bias_, out, m0, n0, r0, bar_id, c_s, acc):
        for j0 in T.unroll(0, block_N, epilogue_cols):
            # the previous chunk's (or tile's) TMA store, waited by its issuing thread, has read c_s
            T.sync_threads(barrier_id=bar_id, arrive_count=128)
            if swiglu:
                gate = T.alloc_fragment((HALF, epilogue_cols // 2), "float32")
                for i, j in T.Parallel(HALF, epilogue_cols // 2):
                    gate[i, j] = acc[i, j0 + swiglu_column(j)]
                for i, j in T.Parallel(HALF, epilogue_cols // 2):
                    c_s[i, j] = swiglu_value(T, gate[i, j], acc[i, j0 + swiglu_column(j) + GROUP], dtype)
            else:
                for i, j in T.Parallel(HALF, epilogue_cols):
                    if bias:
                        c_s[i, j] = T.cast(acc[i, j0 + j] + T.cast(bias_[T.min(n0 + j0 + j, N - 1)], "float32"), dtype)
                    else:
                        c_s[i, j] = T.cast(acc[i, j0 + j], dtype)
            T.fence_proxy_async()                                   # smem writes -> the TMA store
            T.sync_threads(barrier_id=bar_id, arrive_count=128)     # this warpgroup only
            T.copy(c_s, out[m0 + r0, out_column(n0 + j0)])

    @T.macro
    def consumer(bias_, out, m0, n0, r0, nk_t, hi, g0, bar_id, a_s, b_s, c_s, full, empty, acc):
        T.clear(acc)
        for k in T.serial(nk_t):
            s = (g0 + k) % stages
            T.mbarrier_wait_parity(full[s], ((g0 + k) // stages) % 2)
            if layout == "tn":
                T.wgmma_gemm(a_s[s, :, :], b_s[s, :, :], acc, transpose_A=True, policy=full_row)
            else:
                T.wgmma_gemm(a_s[s, r0:r0 + HALF, :], b_s[s, :, :], acc, transpose_B=layout == "nt", policy=full_row)
            T.wait_wgmma(1)
            if k > 0:
                T.barrier_arrive(empty[(g0 + k - 1) % stages])
        T.wait_wgmma(0)
        T.warpgroup_fence_operand(acc, num_regs=nreg)
        if nk_t > 0:
            T.barrier_arrive(empty[(g0 + nk_t - 1) % stages])
        if not grouped:
            store(bias_, out, m0, n0, r0, bar_id, c_s, acc)
        elif nk_t > 0:
            # uniform over the warpgroup: its rows all below hi -> TMA, else masked element stores
            if m0 + r0 + HALF <= hi:
                store(bias_, out, m0, n0, r0, bar_id, c_s, acc)
            else:
                for i, j in T.Parallel(HALF, block_N):
                    if m0 + r0 + i < hi and n0 + j < N:
                        out[m0 + r0 + i, n0 + j] = T.cast(acc[i, j], dtype)
    return consumer


def warp_specialized_body(T, M, N, K, sms, block_N: int, stages: int, epilogue_cols: int, bias: bool,
                          dtype: str, expert_of=None, swiglu: bool = False, layout: str = "nt"):
    """The kernel body `body(a, b, bias or None, groups or None, out)`: out[M, N] = a . b over K.
    layout "nt": a[M, K], b[N, K] (tkreg.gemm); "nn": b[K, N] (gemm_dgrad: dy @ w); "tn": a[K, M]
    and b[K, N] (gemm_wgrad: dy^T @ x).  expert_of (contiguous grouped layout,
    kernels_src/gemm/grouped.py): the macro (groups, m0, 0, e, hi, valid) giving a tile's expert,
    the end of its rows and whether it has any; such a tile reads b[e], runs valid * K blocks, and
    stores rows below hi only (TMA when a consumer's rows all are, else element by element)."""
    assert block_N % epilogue_cols == 0 and stages >= 2 and layout in ("nt", "nn", "tn")
    grouped = expert_of is not None
    assert not (grouped and (bias or swiglu)) and (layout == "nt" or not (grouped or bias or swiglu))
    out_cols = epilogue_cols // 2 if swiglu else epilogue_cols   # a chunk's columns of out
    nk = T.ceildiv(K, BLOCK_K)
    locate = locate_macro(T, M, N, block_N)
    producer = _producer(T, block_N, stages, grouped, layout)
    consumer = _consumer(T, N, block_N, stages, epilogue_cols, bias, dtype, grouped, swiglu, layout)

    def expert(ehv):
        """(expert, row end, valid) of the located tile; a dense tile: (0, 0, 1)."""
        return (0, 0, 1) if ehv is None else (ehv[0], ehv[1], ehv[2])

    @T.macro
    def find(groups, m0, ehv):
        if grouped:
            expert_of(groups, m0, 0, ehv[0], ehv[1], ehv[2])

    @T.macro
    def consumer_loop(bias_, groups, out, bx, grid, ntiles, c, m0: T.Ref, n0: T.Ref, ehv, g0: T.Ref,
                      a_s, b_s, c_s, full, empty):
        T.inc_max_nreg(CONSUMER_REGISTERS)
        acc = T.alloc_fragment((HALF, block_N), "float32")
        for t in T.serial(T.ceildiv(ntiles - bx, grid)):
            locate(bx + t * grid, m0, n0)
            find(groups, m0, ehv)
            e, hi, valid = expert(ehv)
            consumer(bias_, out, m0, n0, c * 64, nk * valid, hi, g0, 1 + c, a_s, b_s, c_s, full, empty, acc)
            g0 = g0 + nk * valid

    @T.macro
    def body(a, b, bias_, groups, out):
        ntiles = T.ceildiv(N, block_N) * T.ceildiv(M, BLOCK_M)
        with T.Kernel(T.max(T.min(ntiles, sms), 1), threads=384) as bx:
            a_s = T.alloc_shared((stages, BLOCK_M, BLOCK_K) if layout != "tn" else (stages, BLOCK_K, HALF), dtype)
            b_s = T.alloc_shared((stages, block_N, BLOCK_K) if layout == "nt" else (stages, BLOCK_K, block_N), dtype)
            # one named epilogue buffer a consumer (buffers from a list are all named "buffer", and
            # their shared-memory offsets then change from build to build)
            c_s0 = T.alloc_shared((HALF, out_cols), dtype)
            c_s1 = T.alloc_shared((HALF, out_cols), dtype)
            a_s1 = T.alloc_shared((stages, BLOCK_K, HALF), dtype) if layout == "tn" else None   # consumer 1's a
            full = T.alloc_barrier([128] * stages)
            empty = T.alloc_barrier([256] * stages)
            m0 = T.alloc_var("int32")
            n0 = T.alloc_var("int32")
            g0 = T.alloc_var("int32")
            ehv = T.alloc_local((3,), "int32") if grouped else None   # the tile's expert, row end, valid
            grid = T.max(T.min(ntiles, sms), 1)
            T.sync_threads()
            tx = T.get_thread_binding()
            g0 = 0
            if tx < 128:
                T.dec_max_nreg(PRODUCER_REGISTERS)
                for t in T.serial(T.ceildiv(ntiles - bx, grid)):
                    locate(bx + t * grid, m0, n0)
                    find(groups, m0, ehv)
                    e, hi, valid = expert(ehv)
                    producer(a, b, m0, n0, e, nk * valid, g0, a_s, a_s1, b_s, full, empty)
                    g0 = g0 + nk * valid
            elif tx < 256:
                consumer_loop(bias_, groups, out, bx, grid, ntiles, 0, m0, n0, ehv, g0, a_s, b_s, c_s0, full, empty)
            else:
                consumer_loop(bias_, groups, out, bx, grid, ntiles, 1, m0, n0, ehv, g0, a_s if a_s1 is None else a_s1,
                              b_s, c_s1, full, empty)

    return body
