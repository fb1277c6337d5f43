"""Blackwell (sm_100a) GEMMs on tcgen05 + tensor memory (TMEM) instead of mma.sync, dense and grouped.

  tcgen05_body      bf16/fp16: out = a @ b^T (+ bias[N], dense only), fp32 accumulation.
  fp8_tcgen05_body  e4m3 block-scaled (DeepSeek-V3 / DeepGEMM semantics, as kernels_src/fp8_gemm.py):
                    out = sum_kb (a[:, kb] @ b[:, kb]^T) * a_scale[m, kb] * b_scale[n // 128, kb], bf16.

Each is a macro over a `layout`: "dense" (a[M, K] @ b[N, K]^T: tkreg.gemm, tkreg.fp8_gemm) or
kernels_src/grouped_gemm.py's "contiguous" and "masked" expert layouts, where `expert_of` finds a
tile's expert, its row limit and whether it holds any rows; a tile that holds none runs no K loop
and stores nothing, and a segment's last, partial tile stores under a row mask.

Both follow tilelang's warp-specialized Blackwell examples (examples/gemm_tcgen05/
gemm_tcgen5mma_ws.py and gemm_tcgen5mma_ws_persistent.py): warp 0 issues TMA loads into a
`stages`-deep shared-memory ring (zero-filled out of bounds, so any M, N, K work; K and N need
16-byte rows), warp 1 issues the tcgen05 MMAs into TMEM, and mbarriers hand the stages and the
accumulator between them; the epilogue reads TMEM into registers in column chunks and stores
through shared memory with TMA (clipped at the tensor's edge).  128-row tiles: one TMEM lane a row.

The fp8 scales are arbitrary fp32 (not UE8M0-packed), so the hardware block-scaled MMA does not
apply: each 128-wide K block is one MMA chain into one of two TMEM buffers, and warps 4..7 read
it back, multiply by both scales and add into fp32 register accumulators (the Hopper kernel's
`part` -> `acc` promotion), while the MMA warp fills the other buffer.

These kernels are compiled and their SASS checked for tcgen05 (UTC*MMA) opcodes
(build_tools/sass.py); they have never been run on Blackwell hardware.
"""

FP8 = "float8_e4m3fn"
GROUP = 128
EPI_N = 64   # epilogue column chunk: TMEM -> registers -> shared -> TMA store


LAYOUTS = ("dense", "contiguous", "masked")


class _Layout:
    """Where a tile's operands, scales and output live in one layout (dense: e is unused)."""

    def __init__(self, T, layout: str, M, N, block_M: int, block_N: int, block_K: int, stages: int,
                 out_dtype: str):
        assert layout in LAYOUTS
        self.dense, self.masked = layout == "dense", layout == "masked"
        dense, masked = self.dense, self.masked

        def a_tile(a, e, m0, k):
            if masked:
                return a[e, m0:m0 + block_M, k * block_K:(k + 1) * block_K]
            return a[m0:m0 + block_M, k * block_K:(k + 1) * block_K]

        def b_tile(b, e, n0, k):
            if dense:
                return b[n0:n0 + block_N, k * block_K:(k + 1) * block_K]
            return b[e, n0:n0 + block_N, k * block_K:(k + 1) * block_K]

        @T.macro
        def loads(a, b, a_s, b_s, loaded, consumed, e, m0, n0, iters):
            """Warp 0's loop: wait for stage k % stages to be free, TMA both tiles into it, arrive."""
            for k in T.serial(iters):
                s = k % stages
                T.mbarrier_wait_parity(consumed[s], ((k // stages) & 1) ^ 1)
                T.tma_copy(a_tile(a, e, m0, k), a_s[s, :, :], barrier=loaded[s])
                T.tma_copy(b_tile(b, e, n0, k), b_s[s, :, :], barrier=loaded[s])
                T.mbarrier_arrive(loaded[s])
        self.loads = loads
        # (clamped: a tile past M or N must not read past the scales)
        self.a_scale = lambda a_scale, e, row, k: (a_scale[e, T.min(row, M - 1), k] if masked
                                                   else a_scale[T.min(row, M - 1), k])
        nb = lambda n: T.min(n // GROUP, T.ceildiv(N, GROUP) - 1)
        self.b_scale = lambda b_scale, e, n, k: b_scale[nb(n), k] if dense else b_scale[e, nb(n), k]

        @T.macro
        def store(chunk, c_s, out, e, m0, n0, hi):
            """One EPI_N-column chunk: TMA when all the tile's rows are < hi (dense: always), else
            row-masked element stores (a grouped segment's last tile)."""
            if dense:
                T.copy(chunk, c_s)
                T.copy(c_s, out[m0, n0])
            elif m0 + block_M <= hi:
                T.copy(chunk, c_s)
                if masked:
                    T.copy(c_s, out[e, m0, n0])
                else:
                    T.copy(c_s, out[m0, n0])
            else:
                for i, j in T.Parallel(block_M, EPI_N):
                    if m0 + i < hi and n0 + j < N:
                        if masked:
                            out[e, m0 + i, n0 + j] = T.cast(chunk[i, j], out_dtype)
                        else:
                            out[m0 + i, n0 + j] = T.cast(chunk[i, j], out_dtype)
        self.store = store

    def grid(self, T, M, N, E, block_M: int, block_N: int) -> tuple:
        """(M tiles, N tiles[, experts or 1])."""
        mn = (T.ceildiv(M, block_M), T.ceildiv(N, block_N))
        return mn if self.dense else mn + (E if self.masked else 1,)


def tcgen05_body(T, layout: str, M, N, K, E, block_M: int, block_N: int, block_K: int, stages: int,
                 threads: int, dtype: str = "bfloat16", bias: bool = False, expert_of=None):
    """bf16/fp16 tile as a macro `body(a, b, bias or None, groups or None, out)`."""
    assert block_M == 128 and threads in (128, 256)   # M = 128: one TMEM lane per row
    assert block_N % EPI_N == 0 and block_N <= 256
    assert (layout == "dense") == (expert_of is None) and (layout == "dense" or not bias)
    lay = _Layout(T, layout, M, N, block_M, block_N, block_K, stages, dtype)
    KB = T.ceildiv(K, block_K)

    @T.macro
    def body(a, b, bias_, groups, out):
        with T.Kernel(*lay.grid(T, M, N, E, block_M, block_N), threads=threads) as blk:
            a_s = T.alloc_shared((stages, block_M, block_K), dtype)
            b_s = T.alloc_shared((stages, block_N, block_K), dtype)
            c_tmem = T.alloc_tmem([block_M, block_N], "float32")
            c_loc = T.alloc_fragment((block_M, EPI_N), "float32")
            c_s = T.alloc_shared((block_M, EPI_N), dtype)
            loaded = T.alloc_barrier([32] * stages)      # warp 0 arrives after issuing TMA
            consumed = T.alloc_barrier([1] * stages)     # tcgen05 commit: stage free again
            tmem_full = T.alloc_barrier([1])             # tcgen05 commit: all MMAs done

            tx = T.get_thread_binding()
            T.use_swizzle(8)
            m0, n0 = blk[0] * block_M, blk[1] * block_N
            if lay.dense:
                # (no name may be bound to a bare Var such as KB here: the builder would rename it)
                e, hi, valid, nk = 0, None, 1, KB
            else:
                e = T.alloc_var("int32")
                hi = T.alloc_var("int32")
                valid = T.alloc_var("int32")
                expert_of(groups, m0, blk[2], e, hi, valid)
                nk = KB * valid

            if tx < 32:  # warp 0: TMA producer
                lay.loads(a, b, a_s, b_s, loaded, consumed, e, m0, n0, nk)
            elif tx < 64:  # warp 1: tcgen05 MMA issuer
                for k in T.serial(nk):
                    s = k % stages
                    T.mbarrier_wait_parity(loaded[s], (k // stages) & 1)
                    T.tcgen05_gemm(a_s[s, :, :], b_s[s, :, :], c_tmem, transpose_B=True,
                                   mbar=consumed[s], clear_accum=k == 0)
                T.tcgen05_mma_arrive(tmem_full)

            # Epilogue, all warps.  K = 0 issues no MMA (TMEM never cleared): write zeros then.
            T.mbarrier_wait_parity(tmem_full, 0)
            if valid > 0:
                for c in T.unroll(block_N // EPI_N):
                    T.copy(c_tmem[:, c * EPI_N:(c + 1) * EPI_N], c_loc)
                    if K == 0:
                        T.clear(c_loc)
                    if bias:
                        for i, j in T.Parallel(block_M, EPI_N):
                            c_loc[i, j] += T.cast(bias_[T.min(n0 + c * EPI_N + j, N - 1)], "float32")
                    lay.store(c_loc, c_s, out, e, m0, n0 + c * EPI_N, hi)

    return body


def gemm_tcgen05_kernel(block_M: int, block_N: int, block_K: int, stages: int, threads: int,
                        bias: bool = False, dtype: str = "bfloat16"):
    """tkreg.gemm's sm_100a kernel."""
    import tilelang.language as T

    from .gemm import gemm_prim_func
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    tile = tcgen05_body(T, "dense", M, N, K, None, block_M, block_N, block_K, stages, threads, dtype, bias)

    @T.macro
    def body(a, b, bias_, out):
        tile(a, b, bias_, None, out)
    return gemm_prim_func(T, body, M, N, K, dtype, bias)


def fp8_tcgen05_body(T, layout: str, M, N, K, E, block_M: int, block_N: int, stages: int, threads: int,
                     expert_of=None):
    """The FP8 block-scaled tcgen05 tile as a macro `body(a, a_scale, b, b_scale, groups, out)` for
    the dense op (`layout` "dense", groups None) and both grouped layouts of
    kernels_src/grouped_gemm.py ("contiguous", "masked": `expert_of(groups, m0, bz, e, hi, valid)`
    sets the tile's expert, row limit and whether it holds any rows, as for fp8_ws.py)."""
    assert block_M == 128 and threads == 256   # warps 4..7 own TMEM lanes 0..127
    # Two TMEM buffers of block_N columns.  block_N = 256 compiles but holds 256 fp32
    # accumulators per promotion thread and spills (~145 STL); 128 does not (244 registers).
    assert block_N % EPI_N == 0 and 2 * block_N <= 512
    assert (layout == "dense") == (expert_of is None)
    n_chunks = block_N // EPI_N
    lay = _Layout(T, layout, M, N, block_M, block_N, GROUP, stages, "bfloat16")
    KB = T.ceildiv(K, GROUP)

    @T.macro
    def body(a, a_scale, b, b_scale, groups, out):
        with T.Kernel(*lay.grid(T, M, N, E, block_M, block_N), threads=threads) as blk:
            a_s = T.alloc_shared((stages, block_M, GROUP), FP8)
            b_s = T.alloc_shared((stages, block_N, GROUP), FP8)
            part_tmem = T.alloc_tmem([2, block_M, block_N], "float32")   # double-buffered
            part = T.alloc_fragment((block_M, EPI_N), "float32")
            # One accumulator per column chunk, each laid out like `part` (it adds into it
            # element for element), so only EPI_N of the TMEM block sits in registers at once.
            accs = [T.alloc_fragment((block_M, EPI_N), "float32") for _ in range(n_chunks)]
            c_s = T.alloc_shared((block_M, EPI_N), "bfloat16")
            loaded = T.alloc_barrier([32] * stages)
            consumed = T.alloc_barrier([1] * stages)
            tmem_full = T.alloc_barrier([1] * 2)
            tmem_empty = T.alloc_barrier([128] * 2)    # the 128 promotion threads

            tx = T.get_thread_binding()
            T.use_swizzle(8)
            m0, n0 = blk[0] * block_M, blk[1] * block_N
            if lay.dense:
                # (no name may be bound to a bare Var such as KB here: the builder would rename it)
                e, hi, valid, nk = 0, None, 1, KB
            else:
                e = T.alloc_var("int32")
                hi = T.alloc_var("int32")
                valid = T.alloc_var("int32")
                expert_of(groups, m0, blk[2], e, hi, valid)
                nk = KB * valid

            if tx < 32:  # warp 0: TMA producer
                lay.loads(a, b, a_s, b_s, loaded, consumed, e, m0, n0, nk)
            elif tx < 64:  # warp 1: one fresh MMA chain per 128-K block into TMEM buffer k % 2
                for k in T.serial(nk):
                    s = k % stages
                    T.mbarrier_wait_parity(tmem_empty[k % 2], ((k // 2) & 1) ^ 1)
                    T.mbarrier_wait_parity(loaded[s], (k // stages) & 1)
                    T.tcgen05_gemm(a_s[s, :, :], b_s[s, :, :], part_tmem[k % 2, :, :],
                                   transpose_B=True, mbar=consumed[s], clear_accum=True)
                    T.tcgen05_mma_arrive(tmem_full[k % 2])
            elif tx >= 128:  # warps 4..7: promote each K block with its scales, then store
                for acc in accs:
                    T.clear(acc)
                for k in T.serial(nk):
                    T.mbarrier_wait_parity(tmem_full[k % 2], (k // 2) & 1)
                    for c, acc in enumerate(accs):
                        T.copy(part_tmem[k % 2, :, c * EPI_N:(c + 1) * EPI_N], part)
                        # A 64-column chunk lies inside one 128-row weight block: one b scale.
                        sb = lay.b_scale(b_scale, e, n0 + c * EPI_N, k)
                        for i, j in T.Parallel(block_M, EPI_N):
                            acc[i, j] += part[i, j] * (lay.a_scale(a_scale, e, m0 + i, k) * sb)
                    T.mbarrier_arrive(tmem_empty[k % 2])
                if valid > 0:
                    for c, acc in enumerate(accs):
                        lay.store(acc, c_s, out, e, m0, n0 + c * EPI_N, hi)

    return body


def fp8_gemm_tcgen05_kernel(block_M: int, block_N: int, stages: int, threads: int):
    import tilelang.language as T

    from .fp8_gemm import prim_func
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    tile = fp8_tcgen05_body(T, "dense", M, N, K, None, block_M, block_N, stages, threads)

    @T.macro
    def body(a, a_scale, b, b_scale, out, ws):
        tile(a, a_scale, b, b_scale, None, out)
    return prim_func(T, body, M, N, K)
