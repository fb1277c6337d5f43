"""Blackwell (sm_100a) bf16/fp16 grouped GEMMs on tcgen05 + TMEM, after kernels_src/gemm_sm100.py's
gemm_tcgen05_kernel: warp 0 issues TMA loads into a `stages`-deep ring, warp 1 the tcgen05 MMAs
into TMEM, then every warp reads TMEM back in 64-column chunks and stores them.  The expert lookup,
the empty-tile skip (no K loop, no store) and the row-masked store of a segment's last tile are
kernels_src/grouped_gemm.py's.  Compiled and SASS-checked for tcgen05, never run (no Blackwell GPU).
The FP8 grouped GEMMs keep the Hopper kernel on sm_100a (mma.sync).
"""
from .gemm_sm100 import EPI_N


def grouped_tcgen05_kernel(layout: str, block_M: int, block_N: int, block_K: int, stages: int,
                           threads: int, dtype: str = "bfloat16"):
    import tilelang.language as T

    from .grouped_gemm import expert_macro, prim_func

    assert block_M == 128 and threads in (128, 256)   # one TMEM lane per row
    assert block_N % EPI_N == 0 and block_N <= 256
    contiguous = layout == "contiguous"
    M, N, K, E = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("E")
    k_iters = T.ceildiv(K, block_K)
    expert_of = expert_macro(T, contiguous, M, E)

    @T.macro
    def body(a, a_scale, b, b_scale, groups, out):
        with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), 1 if contiguous else E,
                      threads=threads) as (bx, by, bz):
            a_s = T.alloc_shared((stages, block_M, block_K), dtype)
            b_s = T.alloc_shared((stages, block_N, block_K), dtype)
            c_tmem = T.alloc_tmem([block_M, block_N], "float32")
            c_loc = T.alloc_fragment((block_M, EPI_N), "float32")
            c_s = T.alloc_shared((block_M, EPI_N), dtype)
            loaded = T.alloc_barrier([32] * stages)
            consumed = T.alloc_barrier([1] * stages)
            tmem_full = T.alloc_barrier([1])
            e = T.alloc_var("int32")
            hi = T.alloc_var("int32")
            valid = T.alloc_var("int32")
            tx = T.get_thread_binding()
            T.use_swizzle(8)
            m0, n0 = bx * block_M, by * block_N
            expert_of(groups, m0, bz, e, hi, valid)

            if tx < 32:  # warp 0: TMA producer
                for k in T.serial(k_iters * valid):
                    s = k % stages
                    T.mbarrier_wait_parity(consumed[s], ((k // stages) & 1) ^ 1)
                    if contiguous:
                        T.tma_copy(a[m0:m0 + block_M, k * block_K:(k + 1) * block_K], a_s[s, :, :], barrier=loaded[s])
                    else:
                        T.tma_copy(a[e, m0:m0 + block_M, k * block_K:(k + 1) * block_K], a_s[s, :, :],
                                   barrier=loaded[s])
                    T.tma_copy(b[e, n0:n0 + block_N, k * block_K:(k + 1) * block_K], b_s[s, :, :], barrier=loaded[s])
                    T.mbarrier_arrive(loaded[s])
            elif tx < 64:  # warp 1: tcgen05 MMA issuer
                for k in T.serial(k_iters * valid):
                    s = k % stages
                    T.mbarrier_wait_parity(loaded[s], (k // stages) & 1)
                    T.tcgen05_gemm(a_s[s, :, :], b_s[s, :, :], c_tmem, transpose_B=True,
                                   mbar=consumed[s], clear_accum=k == 0)
                T.tcgen05_mma_arrive(tmem_full)

            T.mbarrier_wait_parity(tmem_full, 0)
            if valid > 0:   # (K = 0 runs no MMA: gemm_sm100 writes zeros; here K >= 1 by the TMA rule)
                for c in T.unroll(block_N // EPI_N):
                    T.copy(c_tmem[:, c * EPI_N:(c + 1) * EPI_N], c_loc)
                    if m0 + block_M <= hi:
                        T.copy(c_loc, c_s)
                        if contiguous:
                            T.copy(c_s, out[m0, n0 + c * EPI_N])
                        else:
                            T.copy(c_s, out[e, m0, n0 + c * EPI_N])
                    else:
                        for i, j in T.Parallel(block_M, EPI_N):
                            if m0 + i < hi and n0 + c * EPI_N + j < N:
                                if contiguous:
                                    out[m0 + i, n0 + c * EPI_N + j] = T.cast(c_loc[i, j], dtype)
                                else:
                                    out[e, m0 + i, n0 + c * EPI_N + j] = T.cast(c_loc[i, j], dtype)

    return prim_func(T, body, contiguous, M, N, K, E, dtype, dtype, False)
