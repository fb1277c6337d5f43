"""Blackwell (sm_100a) GEMM tile on tcgen05 + tensor memory (TMEM) instead of mma.sync, dense and grouped.

  bf16/fp16  out = a @ b^T (+ bias[N], dense only), fp32 accumulation.
  fp8        e4m3 block-scaled (DeepSeek-V3 / DeepGEMM semantics, as kernels_src/gemm/fp8.py):
             out = sum_kb (a[:, kb] @ b[:, kb]^T) * a_scale[m, kb] * b_scale[n // 128, kb], bf16.

`tcgen05_body` builds either as a macro over a `layout`: "dense" (a[M, K] @ b[N, K]^T: tkreg.gemm,
tkreg.fp8_gemm) or kernels_src/gemm/grouped.py's "contiguous" and "masked" expert layouts, where
`expert_of` finds a tile's expert, its row limit and whether it holds any rows; a tile that holds
none runs no K loop and stores nothing, and a segment's last, partial tile stores under a row mask.
Dense tiles may split K (`splits` > 1, grid z = the split): each writes its fp32 partial tile into
the workspace and the op adds a reduce kernel (kernels_src/gemm/split_k.py), for grids too small
to fill the SMs.

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
from kernels_src.common import FP8, SCALE_GROUP

EPILOGUE_COLS = 64   # epilogue column chunk: TMEM -> registers -> shared -> TMA store


def _mainloop(T, layout: str, block_M: int, block_N: int, block_K: int, stages: int, fp8: bool):
    """(loads, mma): the macros of warp 0 (TMA) and warp 1 (tcgen05 MMA issue)."""
    dense, masked = layout == "dense", layout == "masked"

    def a_tile(a, e, m0, k):
        if masked:
            return a[e, m0:m0 + block_M, k * block_K:(k + 1) * block_K]
        return a[m0:m0 + block_M, k * block_K:(k + 1) * block_K]

    def b_tile(b, e, n0, k):
        if dense:
            return b[n0:n0 + block_N, k * block_K:(k + 1) * block_K]
        return b[e, n0:n0 + block_N, k * block_K:(k + 1) * block_K]

    @T.macro
    def loads(a, b, a_s, b_s, loaded, consumed, e, m0, n0, k0, nk):
        """Warp 0: wait for stage k % stages to be free, TMA both tiles into it, arrive."""
        for k in T.serial(nk):
            s = k % stages
            T.mbarrier_wait_parity(consumed[s], ((k // stages) & 1) ^ 1)
            T.tma_copy(a_tile(a, e, m0, k0 + k), a_s[s, :, :], barrier=loaded[s])
            T.tma_copy(b_tile(b, e, n0, k0 + k), b_s[s, :, :], barrier=loaded[s])
            T.mbarrier_arrive(loaded[s])

    @T.macro
    def mma(a_s, b_s, acc_tmem, loaded, consumed, tmem_full, tmem_empty, nk):
        """Warp 1: issue the MMAs of each stage as it lands; tcgen05 commits free the stage."""
        for k in T.serial(nk):
            s = k % stages
            if fp8:   # buffer k % 2 must have been read by the promotion of block k - 2
                T.mbarrier_wait_parity(tmem_empty[k % 2], ((k // 2) & 1) ^ 1)
            T.mbarrier_wait_parity(loaded[s], (k // stages) & 1)
            if fp8:
                T.tcgen05_gemm(a_s[s, :, :], b_s[s, :, :], acc_tmem[k % 2, :, :],
                               transpose_B=True, mbar=consumed[s], clear_accum=True)
                T.tcgen05_mma_arrive(tmem_full[k % 2])
            else:
                T.tcgen05_gemm(a_s[s, :, :], b_s[s, :, :], acc_tmem, transpose_B=True,
                               mbar=consumed[s], clear_accum=k == 0)
        if not fp8:
            T.tcgen05_mma_arrive(tmem_full)
    return loads, mma


def _epilogue(T, layout: str, M, N, K, block_M: int, block_N: int, out_dt: str, bias: bool, split: bool):
    """(promote, epilogue): fp8's promotion warps and bf16's all-warps epilogue, each storing
    EPILOGUE_COLS-column chunks."""
    dense, masked = layout == "dense", layout == "masked"
    n_chunks = block_N // EPILOGUE_COLS

    def no_mma(nk):   # (a split's K run may be empty; else only K = 0 is)
        return nk == 0 if split else K == 0

    def a_scale_at(a_scale, e, row, k):   # (clamped: a tile past M must not read past the scales)
        return a_scale[e, T.min(row, M - 1), k] if masked else a_scale[T.min(row, M - 1), k]

    def b_scale_at(b_scale, e, n, k):
        nb = T.min(n // SCALE_GROUP, T.ceildiv(N, SCALE_GROUP) - 1)
        return b_scale[nb, k] if dense else b_scale[e, nb, k]

    def corner(out, e, m0, n0):   # the tile's first element: in partials e (split), expert e (masked)
        return out[e, m0, n0] if split or masked else out[m0, n0]

    @T.macro
    def store(chunk, c_s, out, e, m0, n0, hi):
        """One EPILOGUE_COLS-column chunk: TMA when all the tile's rows are < hi (dense and split:
        always), else row-masked element stores (a grouped segment's last tile)."""
        if split or dense or m0 + block_M <= hi:
            T.copy(chunk, c_s)
            T.copy(c_s, corner(out, e, m0, n0))
        else:
            for i, j in T.Parallel(block_M, EPILOGUE_COLS):
                if m0 + i < hi and n0 + j < N:
                    if masked:
                        out[e, m0 + i, n0 + j] = T.cast(chunk[i, j], out_dt)
                    else:
                        out[m0 + i, n0 + j] = T.cast(chunk[i, j], out_dt)

    @T.macro
    def promote(a_scale, b_scale, acc_tmem, part, accs, c_s, out, tmem_full, tmem_empty, e, m0, n0, hi, valid, k0,
                nk):
        """fp8, warps 4..7: acc += part * a_scale * b_scale per K block, then store."""
        for acc in accs:
            T.clear(acc)
        for k in T.serial(nk):
            T.mbarrier_wait_parity(tmem_full[k % 2], (k // 2) & 1)
            for c, acc in enumerate(accs):
                T.copy(acc_tmem[k % 2, :, c * EPILOGUE_COLS:(c + 1) * EPILOGUE_COLS], part)
                # A 64-column chunk lies inside one 128-row weight block: one b scale.
                sb = b_scale_at(b_scale, e, n0 + c * EPILOGUE_COLS, k0 + k)
                for i, j in T.Parallel(block_M, EPILOGUE_COLS):
                    acc[i, j] += part[i, j] * (a_scale_at(a_scale, e, m0 + i, k0 + k) * sb)
            T.mbarrier_arrive(tmem_empty[k % 2])
        if valid > 0:
            for c, acc in enumerate(accs):
                store(acc, c_s, out, e, m0, n0 + c * EPILOGUE_COLS, hi)

    @T.macro
    def epilogue(bias_, acc_tmem, c_loc, c_s, out, tmem_full, e, m0, n0, hi, valid, nk):
        """bf16/fp16, all warps.  No K block (K = 0, or a split past K's end) issues no MMA (TMEM
        never cleared): write zeros then."""
        T.mbarrier_wait_parity(tmem_full, 0)
        if valid > 0:
            for c in T.unroll(n_chunks):
                T.copy(acc_tmem[:, c * EPILOGUE_COLS:(c + 1) * EPILOGUE_COLS], c_loc)
                if no_mma(nk):
                    T.clear(c_loc)
                if bias:
                    for i, j in T.Parallel(block_M, EPILOGUE_COLS):
                        c_loc[i, j] += T.cast(bias_[T.min(n0 + c * EPILOGUE_COLS + j, N - 1)], "float32")
                store(c_loc, c_s, out, e, m0, n0 + c * EPILOGUE_COLS, hi)
    return promote, epilogue


def tcgen05_body(T, layout: str, M, N, K, E, block_M: int, block_N: int, block_K: int, stages: int,
                 threads: int, dtype: str = "bfloat16", fp8: bool = False, bias: bool = False, expert_of=None,
                 splits: int = 1):
    """The tile as a macro `body(a, a_scale, b, b_scale, bias, groups, out)` (None for what the op
    lacks).  bf16/fp16 (`dtype`): one MMA chain over all of K into TMEM, read back by every warp.
    fp8 (block_K = 128, `dtype` ignored): one chain per 128-K block into one of two TMEM buffers,
    promoted into fp32 registers with both scales by warps 4..7, which then store.
    splits > 1 (dense): grid z = split, each a contiguous run of K blocks; `out` is then the fp32
    partials workspace[splits, M, N] (no bias: the reduce kernel adds it)."""
    assert block_M == 128 and threads in ((256,) if fp8 else (128, 256))   # one TMEM lane a row
    # TMEM has 512 columns (fp8 takes two buffers of block_N).  fp8 block_N = 256 compiles but holds
    # 256 fp32 accumulators per promotion thread and spills (~145 STL); 128 does not (244 registers).
    assert block_N % EPILOGUE_COLS == 0 and block_N <= 256 and (not fp8 or block_K == SCALE_GROUP)
    assert layout in ("dense", "contiguous", "masked") and (layout == "dense") == (expert_of is None)
    assert layout == "dense" or not bias
    assert splits == 1 or (layout == "dense" and not bias)
    dense, masked, split = layout == "dense", layout == "masked", splits > 1
    in_dt, out_dt = (FP8, "bfloat16") if fp8 else (dtype, dtype)
    out_dt = "float32" if split else out_dt
    KB = T.ceildiv(K, block_K)
    n_chunks = block_N // EPILOGUE_COLS
    grid = (T.ceildiv(M, block_M), T.ceildiv(N, block_N)) + (
        (splits,) if split else () if dense else (E if masked else 1,))
    loads, mma = _mainloop(T, layout, block_M, block_N, block_K, stages, fp8)
    promote, epilogue = _epilogue(T, layout, M, N, K, block_M, block_N, out_dt, bias, split)

    @T.macro
    def body(a, a_scale, b, b_scale, bias_, groups, out):
        with T.Kernel(*grid, threads=threads) as blk:
            a_s = T.alloc_shared((stages, block_M, block_K), in_dt)
            b_s = T.alloc_shared((stages, block_N, block_K), in_dt)
            acc_tmem = T.alloc_tmem([2, block_M, block_N] if fp8 else [block_M, block_N], "float32")
            c_loc = T.alloc_fragment((block_M, EPILOGUE_COLS), "float32")   # (fp8: one K block's chunk)
            # fp8: one accumulator per column chunk, each laid out like c_loc (it adds into it
            # element for element), so only EPILOGUE_COLS of the TMEM block sits in registers at once.
            accs = [T.alloc_fragment((block_M, EPILOGUE_COLS), "float32") for _ in range(n_chunks if fp8 else 0)]
            c_s = T.alloc_shared((block_M, EPILOGUE_COLS), out_dt)
            loaded = T.alloc_barrier([32] * stages)               # warp 0 arrives after issuing TMA
            consumed = T.alloc_barrier([1] * stages)              # tcgen05 commit: stage free again
            tmem_full = T.alloc_barrier([1] * (2 if fp8 else 1))  # tcgen05 commit: MMAs done
            tmem_empty = T.alloc_barrier([128] * 2) if fp8 else None   # the 128 promotion threads

            tx = T.get_thread_binding()
            T.use_swizzle(8)
            m0, n0 = blk[0] * block_M, blk[1] * block_N
            k0 = 0
            if split:   # e carries the split to the store (as the FP8 Hopper tile's split-K does)
                k0 = blk[2] * T.ceildiv(KB, splits)
                e, hi, valid, nk = blk[2], None, 1, T.max(T.min(KB - k0, T.ceildiv(KB, splits)), 0)
            elif dense:
                # (no name may be bound to a bare Var such as KB here: the builder would rename it)
                e, hi, valid, nk = 0, None, 1, KB
            else:
                e = T.alloc_var("int32")
                hi = T.alloc_var("int32")
                valid = T.alloc_var("int32")
                expert_of(groups, m0, blk[2], e, hi, valid)
                nk = KB * valid

            if tx < 32:  # warp 0: TMA producer
                loads(a, b, a_s, b_s, loaded, consumed, e, m0, n0, k0, nk)
            elif tx < 64:  # warp 1: tcgen05 MMA issuer
                mma(a_s, b_s, acc_tmem, loaded, consumed, tmem_full, tmem_empty, nk)
            elif fp8:
                if tx >= 128:
                    promote(a_scale, b_scale, acc_tmem, c_loc, accs, c_s, out, tmem_full, tmem_empty,
                            e, m0, n0, hi, valid, k0, nk)
            if not fp8:
                epilogue(bias_, acc_tmem, c_loc, c_s, out, tmem_full, e, m0, n0, hi, valid, nk)
            # every warp done with TMEM before warp 0 frees it (tilelang's tail dealloc): the TMA
            # warp gets there first, with MMAs still in flight
            T.sync_threads()

    return body
