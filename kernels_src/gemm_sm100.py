"""Blackwell (sm_100a) GEMMs on tcgen05 + tensor memory (TMEM) instead of mma.sync.

  gemm_tcgen05_kernel      bf16/fp16: out[M, N] = a[M, K] @ b[N, K]^T (+ bias[N]), fp32 accumulation.
  fp8_gemm_tcgen05_kernel  e4m3 block-scaled (DeepSeek-V3 / DeepGEMM semantics, as kernels_src/fp8_gemm.py):
                           out = sum_kb (a[:, kb] @ b[:, kb]^T) * a_scale[m, kb] * b_scale[n // 128, kb].

Both follow tilelang's warp-specialized Blackwell examples (examples/gemm_tcgen05/
gemm_tcgen5mma_ws.py and gemm_tcgen5mma_ws_persistent.py): warp 0 issues TMA loads into a
`stages`-deep shared-memory ring (zero-filled out of bounds, so any M, N, K work; K and N need
16-byte rows), warp 1 issues the tcgen05 MMAs into TMEM, and mbarriers hand the stages and the
accumulator between them; the epilogue reads TMEM into registers in column chunks and stores
through shared memory with TMA (clipped at the tensor's edge).

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


def _tma_loads(T, block_M: int, block_N: int, block_K: int, stages: int):
    """Warp 0's loop: wait for stage k % stages to be free, TMA both tiles into it, arrive."""
    @T.macro
    def loads(a, b, a_s, b_s, loaded, consumed, m0, n0, iters):
        for k in T.serial(iters):
            s = k % stages
            T.mbarrier_wait_parity(consumed[s], ((k // stages) & 1) ^ 1)
            T.tma_copy(a[m0:m0 + block_M, k * block_K:(k + 1) * block_K], a_s[s, :, :], barrier=loaded[s])
            T.tma_copy(b[n0:n0 + block_N, k * block_K:(k + 1) * block_K], b_s[s, :, :], barrier=loaded[s])
            T.mbarrier_arrive(loaded[s])
    return loads


def gemm_tcgen05_kernel(block_M: int, block_N: int, block_K: int, stages: int, threads: int,
                        bias: bool = False, dtype: str = "bfloat16"):
    import tilelang.language as T

    assert block_M == 128 and threads in (128, 256)   # M = 128: one TMEM lane per row
    assert block_N % EPI_N == 0 and block_N <= 256
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    k_iters = T.ceildiv(K, block_K)
    loads = _tma_loads(T, block_M, block_N, block_K, stages)

    @T.macro
    def body(a, b, bias_, out):
        with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
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
            m0, n0 = bx * block_M, by * block_N

            if tx < 32:  # warp 0: TMA producer
                loads(a, b, a_s, b_s, loaded, consumed, m0, n0, k_iters)
            elif tx < 64:  # warp 1: tcgen05 MMA issuer
                for k in T.serial(k_iters):
                    s = k % stages
                    T.mbarrier_wait_parity(loaded[s], (k // stages) & 1)
                    T.tcgen05_gemm(a_s[s, :, :], b_s[s, :, :], c_tmem, transpose_B=True,
                                   mbar=consumed[s], clear_accum=k == 0)
                T.tcgen05_mma_arrive(tmem_full)

            # Epilogue, all warps.  K = 0 issues no MMA (TMEM never cleared): write zeros then.
            T.mbarrier_wait_parity(tmem_full, 0)
            for c in T.unroll(block_N // EPI_N):
                T.copy(c_tmem[:, c * EPI_N:(c + 1) * EPI_N], c_loc)
                if K == 0:
                    T.clear(c_loc)
                if bias:
                    for i, j in T.Parallel(block_M, EPI_N):
                        c_loc[i, j] += T.cast(bias_[T.min(n0 + c * EPI_N + j, N - 1)], "float32")
                T.copy(c_loc, c_s)
                T.copy(c_s, out[m0, n0 + c * EPI_N])

    from .gemm import gemm_prim_func
    return gemm_prim_func(T, body, M, N, K, dtype, bias)


def fp8_gemm_tcgen05_kernel(block_M: int, block_N: int, stages: int, threads: int):
    import tilelang.language as T

    assert block_M == 128 and threads == 256   # warps 4..7 own TMEM lanes 0..127
    # Two TMEM buffers of block_N columns.  block_N = 256 compiles but holds 256 fp32
    # accumulators per promotion thread and spills (~145 STL); 128 does not (244 registers).
    assert block_N % EPI_N == 0 and 2 * block_N <= 512
    block_K = GROUP
    n_chunks = block_N // EPI_N
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    sam, sak = T.dynamic("sam"), T.dynamic("sak")
    KB = T.ceildiv(K, GROUP)
    loads = _tma_loads(T, block_M, block_N, block_K, stages)

    SA = T.StridedTensor((M, KB), (sam, sak), "float32")
    SB = T.Tensor((T.ceildiv(N, GROUP), KB), "float32")

    @T.prim_func
    def fp8_gemm(a: T.Tensor((M, K), FP8), a_scale: SA, b: T.Tensor((N, K), FP8), b_scale: SB,
                 out: T.Tensor((M, N), "bfloat16")):
        with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
            a_s = T.alloc_shared((stages, block_M, block_K), FP8)
            b_s = T.alloc_shared((stages, block_N, block_K), FP8)
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
            m0, n0 = bx * block_M, by * block_N

            if tx < 32:  # warp 0: TMA producer
                loads(a, b, a_s, b_s, loaded, consumed, m0, n0, KB)
            elif tx < 64:  # warp 1: one fresh MMA chain per 128-K block into TMEM buffer k % 2
                for k in T.serial(KB):
                    s = k % stages
                    T.mbarrier_wait_parity(tmem_empty[k % 2], ((k // 2) & 1) ^ 1)
                    T.mbarrier_wait_parity(loaded[s], (k // stages) & 1)
                    T.tcgen05_gemm(a_s[s, :, :], b_s[s, :, :], part_tmem[k % 2, :, :],
                                   transpose_B=True, mbar=consumed[s], clear_accum=True)
                    T.tcgen05_mma_arrive(tmem_full[k % 2])
            elif tx >= 128:  # warps 4..7: promote each K block with its scales, then store
                for acc in accs:
                    T.clear(acc)
                for k in T.serial(KB):
                    T.mbarrier_wait_parity(tmem_full[k % 2], (k // 2) & 1)
                    for c, acc in enumerate(accs):
                        T.copy(part_tmem[k % 2, :, c * EPI_N:(c + 1) * EPI_N], part)
                        # A 64-column chunk lies inside one 128-row weight block: one b scale
                        # (clamped: a chunk past N must not read past b_scale's end).
                        sb = b_scale[T.min((n0 + c * EPI_N) // GROUP, T.ceildiv(N, GROUP) - 1), k]
                        for i, j in T.Parallel(block_M, EPI_N):
                            acc[i, j] += part[i, j] * (a_scale[T.min(m0 + i, M - 1), k] * sb)
                    T.mbarrier_arrive(tmem_empty[k % 2])
                for c, acc in enumerate(accs):
                    T.copy(acc, c_s)
                    T.copy(c_s, out[m0, n0 + c * EPI_N])

    return fp8_gemm
