"""bf16/fp16 GEMM tile with a hand-written producer/consumer split, persistent (sm_90a): the same
op as kernels_src/gemm.py (out = a @ b^T (+ bias), fp32 accumulation, rounded once), scheduled as
CUTLASS's warp-specialized persistent kernels are, after kernels_src/fp8_ws.py (its proofs of the
mbarrier ring and the persistent walk hold here unchanged; bf16 needs no promotion, so a
consumer's whole tile row block is one WGMMA chain into one accumulator).  This module is the body
only; the ops' signatures wrap it (kernels_src/gemm.py `ws_kernel`, grouped_gemm.py `bf16_ws_kernel`).

One CTA a SM (`SM_COUNT`), tiles bx, bx + grid, ... in panels of `panel` M tiles swept along N.
  producer (threads 0-127, setmaxnreg 40): for every K block of every tile, slot s = g % stages
      (g counts the CTA's K blocks across tiles): wait empty[s]; TMA a / b tiles -> a_s[s] / b_s[s]
      (zeros out of bounds); all 128 arrive full[s] (+ the bytes).
  consumer c (threads 128(c+1).., setmaxnreg `consumer_regs`): rows 64c.. of the tile, all block_N
      columns: for each K block wait full[s], issue the WGMMAs (64 x block_N x block_K, async),
      wait_group 1 (the previous block's chain is done) and release that block's slot; the last
      block is waited and released after the loop.  One chain stays in flight across the loop's
      back edge, as in CUTLASS's mainloop: no other fragment is read meanwhile (fp8_ws's C7514
      case does not arise).
      epilogue: in chunks of `epi` columns: acc (+ bias) -> c_s[c] (its own 64 x epi buffer),
      fence.proxy.async, named barrier 1 + c, one thread TMA-stores the chunk (clipped at the M / N
      edges) and waits until the store has read c_s before the warpgroup's next barrier lets
      anyone overwrite it.
The producer runs ahead into the next tile while the consumers store this one, so the epilogue
and the next tile's pipeline fill overlap (the K = 2048 shapes' loss with one CTA a tile).
Grouped (contiguous layout, `expert_of`): every tile looks up its expert first (producer and
consumers alike); a tile in no segment loads and computes nothing, and g advances by its K blocks
only (valid * nk), the same count on both sides.
Ping-pong consumers (the two taking the CTA's tiles in turn, one storing while the other computes)
were measured within +-5% of this and removed; the variant is `git show 62dfcbc:kernels_src/gemm_ws.py`
(docs/sweeps/gemm_ws_r3.py, docs/gemm-tuning.md).
Measured on the H200 (docs/gemm-tuning.md, BENCHMARKS.md): 0.98-1.12x cuBLAS on the prefill shapes,
bit for bit the pipelined kernel's output.
"""
PASS_CONFIGS = {"tl.disable_thread_storage_sync": True, "tl.disable_shared_memory_reuse": True}


def gemm_ws_body(T, M, N, K, sms, block_M: int = 128, block_N: int = 256, block_K: int = 64, stages: int = 4,
                 epi: int = 128, panel: int = 10, producer_regs: int = 40, consumer_regs: int = 232,
                 bias: bool = False, dtype: str = "bfloat16", expert_of=None):
    """The kernel body `body(a, b, bias or None, groups or None, out)`.  expert_of (contiguous grouped
    layout, kernels_src/grouped_gemm.py): the macro (groups, m0, 0, e, hi, valid) giving a tile's
    expert, the end of its rows and whether it has any; such a tile reads b[e], runs valid * K
    blocks, and stores rows below hi only (TMA when a consumer's rows all are, else element by
    element)."""
    consumers = block_M // 64                        # each takes `half` = 64 rows of the tile
    half = 64
    assert block_M == 64 * consumers and consumers in (1, 2, 3) and block_N % epi == 0
    assert 128 * (consumers * consumer_regs + producer_regs) <= 65536
    assert stages >= 2
    threads = 128 * (consumers + 1)
    grouped = expert_of is not None
    assert not (grouped and bias)
    nk = T.ceildiv(K, block_K)
    full_row = T.GemmWarpPolicy.FullRow
    nreg = half * block_N // 128

    @T.macro
    def locate(tile, m0: T.Ref, n0: T.Ref):
        ntn, ntm = T.ceildiv(N, block_N), T.ceildiv(M, block_M)
        p0 = tile // (panel * ntn) * panel
        rows = T.min(panel, ntm - p0)
        q = tile - p0 * ntn
        m0 = (p0 + q % rows) * block_M
        n0 = q // rows * block_N

    def expert(ehv):
        """(expert, row end, valid) of the located tile; a dense tile: (0, 0, 1)."""
        return (0, 0, 1) if ehv is None else (ehv[0], ehv[1], ehv[2])

    @T.macro
    def find(groups, m0, ehv):
        if grouped:
            expert_of(groups, m0, 0, ehv[0], ehv[1], ehv[2])

    @T.macro
    def producer(a, b, m0, n0, e, nk_t, g0, a_s, b_s, full, empty):
        for k in T.serial(nk_t):
            s = (g0 + k) % stages
            T.mbarrier_wait_parity(empty[s], ((g0 + k) // stages + 1) % 2)
            T.tma_copy(a[m0:m0 + block_M, k * block_K:(k + 1) * block_K], a_s[s, :, :], barrier=full[s])
            if grouped:
                T.tma_copy(b[e, n0:n0 + block_N, k * block_K:(k + 1) * block_K], b_s[s, :, :], barrier=full[s])
            else:
                T.tma_copy(b[n0:n0 + block_N, k * block_K:(k + 1) * block_K], b_s[s, :, :], barrier=full[s])
            T.barrier_arrive(full[s])

    @T.macro
    def store(bias_, out, m0, n0, r0, bar_id, c_s, acc):
        for j0 in T.unroll(0, block_N, epi):
            # the previous chunk's (or tile's) TMA store, waited by its issuing thread, has read c_s
            T.sync_threads(barrier_id=bar_id, arrive_count=128)
            for i, j in T.Parallel(half, epi):
                if bias:
                    c_s[i, j] = T.cast(acc[i, j0 + j] + T.cast(bias_[T.min(n0 + j0 + j, N - 1)], "float32"), dtype)
                else:
                    c_s[i, j] = T.cast(acc[i, j0 + j], dtype)
            T.fence_proxy_async()                                   # smem writes -> the TMA store
            T.sync_threads(barrier_id=bar_id, arrive_count=128)     # this warpgroup only
            T.copy(c_s, out[m0 + r0, n0 + j0])

    @T.macro
    def consumer(bias_, out, m0, n0, r0, nk_t, hi, g0, bar_id, a_s, b_s, c_s, full, empty, acc):
        T.clear(acc)
        for k in T.serial(nk_t):
            s = (g0 + k) % stages
            T.mbarrier_wait_parity(full[s], ((g0 + k) // stages) % 2)
            T.wgmma_gemm(a_s[s, r0:r0 + half, :], b_s[s, :, :], acc, transpose_B=True, policy=full_row)
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
            if m0 + r0 + half <= hi:
                store(bias_, out, m0, n0, r0, bar_id, c_s, acc)
            else:
                for i, j in T.Parallel(half, block_N):
                    if m0 + r0 + i < hi and n0 + j < N:
                        out[m0 + r0 + i, n0 + j] = T.cast(acc[i, j], dtype)

    @T.macro
    def consumer_loop(bias_, groups, out, bx, grid, ntiles, c, m0: T.Ref, n0: T.Ref, ehv, g0: T.Ref,
                      a_s, b_s, c_s, full, empty):
        T.inc_max_nreg(consumer_regs)
        acc = T.alloc_fragment((half, block_N), "float32")
        for t in T.serial(T.ceildiv(ntiles - bx, grid)):
            locate(bx + t * grid, m0, n0)
            find(groups, m0, ehv)
            e, hi, valid = expert(ehv)
            consumer(bias_, out, m0, n0, c * 64, nk * valid, hi, g0, 1 + c, a_s, b_s, c_s, full, empty, acc)
            g0 = g0 + nk * valid

    @T.macro
    def body(a, b, bias_, groups, out):
        ntiles = T.ceildiv(N, block_N) * T.ceildiv(M, block_M)
        with T.Kernel(T.max(T.min(ntiles, sms), 1), threads=threads) as bx:
            a_s = T.alloc_shared((stages, block_M, block_K), dtype)
            b_s = T.alloc_shared((stages, block_N, block_K), dtype)
            # one named epilogue buffer a consumer (unnamed ones made the cubins irreproducible:
            # kernels_src/fp8_ws.py)
            c_s0 = T.alloc_shared((half, epi), dtype)
            c_s1 = T.alloc_shared((half, epi), dtype) if consumers >= 2 else None
            c_s2 = T.alloc_shared((half, epi), dtype) if consumers >= 3 else None
            full = T.alloc_barrier([128] * stages)
            empty = T.alloc_barrier([128 * consumers] * stages)
            m0 = T.alloc_var("int32")
            n0 = T.alloc_var("int32")
            g0 = T.alloc_var("int32")
            ehv = T.alloc_local((3,), "int32") if grouped else None   # the tile's expert, row end, valid
            grid = T.max(T.min(ntiles, sms), 1)
            T.sync_threads()
            tx = T.get_thread_binding()
            g0 = 0
            if tx < 128:
                T.dec_max_nreg(producer_regs)
                for t in T.serial(T.ceildiv(ntiles - bx, grid)):
                    locate(bx + t * grid, m0, n0)
                    find(groups, m0, ehv)
                    e, hi, valid = expert(ehv)
                    producer(a, b, m0, n0, e, nk * valid, g0, a_s, b_s, full, empty)
                    g0 = g0 + nk * valid
            elif consumers == 1:
                consumer_loop(bias_, groups, out, bx, grid, ntiles, 0, m0, n0, ehv, g0, a_s, b_s, c_s0, full, empty)
            elif tx < 256:
                consumer_loop(bias_, groups, out, bx, grid, ntiles, 0, m0, n0, ehv, g0, a_s, b_s, c_s0, full, empty)
            elif consumers == 2:
                consumer_loop(bias_, groups, out, bx, grid, ntiles, 1, m0, n0, ehv, g0, a_s, b_s, c_s1, full, empty)
            elif tx < 384:
                consumer_loop(bias_, groups, out, bx, grid, ntiles, 1, m0, n0, ehv, g0, a_s, b_s, c_s1, full, empty)
            else:
                consumer_loop(bias_, groups, out, bx, grid, ntiles, 2, m0, n0, ehv, g0, a_s, b_s, c_s2, full, empty)

    return body
