"""Flash attention forward on Blackwell (sm_100a): tcgen05 MMAs into tensor memory (TMEM), after
FlashAttention-4's schedule.  Same semantics as the other flash kernels (prefill.py; masks, GQA,
varlen addressing, lse, rows that see no key: tiles.py), one CTA a block of query rows.

One CTA = 256 query rows of one head, as two 128-row tiles c = 0, 1 (one TMEM lane a row), 384
threads:
  warp 0        TMA producer: Q0 and Q1 once, then K(0), V(0), K(1), V(1), ... through one ring of
                STAGES [BLOCK_N, D] slots (a slot holds a K or a V tile).
  warp 1        MMA issuer (one thread): S_c = Q_c K^T into s_tmem[c], O_c += P_c V into o_tmem[c].
  warpgroup 1+c softmax of tile c, one thread a row, so a row's max and sum need no shuffle: reads
                S_c from TMEM, writes P_c (bf16/fp16) to shared memory, rescales O_c in TMEM by
                exp2(m_old - m_new) (FlashAttention-4's correction, here done by the softmax threads
                themselves), then the epilogue (O / l through Q_c's tile to a TMA store; lse).
The MMA warp issues, for each K/V tile t:
      P0 V(t) -> O0 ; Q0 K(t+1)^T -> S0 ; P1 V(t) -> O1 ; Q1 K(t+1)^T -> S1
each P_c V(t) after softmax c published P_c(t) (p_ready[c]), so softmax 1 runs under P0 V and
Q0 K^T, and softmax 0 of the next tile under P1 V and Q1 K^T: the two tiles take turns on the
tensor cores, as FlashAttention-3's two consumer warpgroups do on Hopper.  S_c is free for the next
Q_c K^T once softmax c published P_c (it read S_c before); P_c and O_c are free for softmax c once
P_c V finished (pv_done[c]).

Barriers (each waited with the parity of its own use count): q_full, kv_full[s] count 32 (warp 0
arrives after issuing its TMA, plus the bytes); kv_empty[s] count 1 (a tcgen05 commit after the
last MMA that reads the slot); s_full[c], pv_done[c] count 1 (tcgen05 commits); p_ready[c] count
128 (the softmax warpgroup).  The ring is filled and released in item order (K(t) after Q1 K(t)^T,
V(t) after P1 V(t)), and the MMA warp needs at most two slots at once (V(t) and K(t+1)): progress
needs STAGES >= 2, and 3 let the producer run one tile ahead.

Under a causal mask the first 128 rows may need one tile fewer than the last 128 (n0 <= n1): the
MMA warp skips tile c's MMAs past n_c, softmax c walks n_c tiles.  Row blocks are taken last first
(the most expensive causal ones start first).

Lazy rescale (FlashAttention-4's): a row's running max stays stale unless it grew by more than
2^LAZY_RESCALE (P <= 2^LAZY_RESCALE, exact after the final O / l), and a warp skips O's TMEM round
trip when none of its rows moved.

TMEM: S0, S1 (BLOCK_N columns each) and O0, O1 (D each): 512 columns at D = 128, so one CTA a SM,
which its 224 KB of shared memory (Q0, Q1, P0, P1 and three K/V slots at D = 128) asks anyway.

Compiled and its SASS checked for tcgen05 (UTC*MMA) opcodes (tests/build_tools/test_sass_tcgen05.py);
never run: there is no Blackwell GPU here (docs/attention-tuning.md says what a B200 should settle).
"""
from .tiles import (MASKED, grid_prim_func, kv_tile, log2_scale, lse_writer, output_writer, q_tile, saw_a_key,
                    softmax_update, tile_masker, tiles_seen)

ROWS = 128       # a tile's query rows: one TMEM lane each
BLOCK_N = 128    # keys a K/V tile
STAGES = 3       # K/V ring slots
LAZY_RESCALE = 8  # log2 of the growth a row's running max may have before O is rescaled
REGS = (40, 232)  # setmaxnreg: warps 0-3 / each softmax warpgroup (128 x 40 + 256 x 232 <= 64K; at 24
                  # the producer spills the varlen sequence bounds)
O_CHUNK = 32     # columns of O a softmax thread moves TMEM <-> registers at once (correction, epilogue)


def _producer(T, varlen: bool):
    """Macro: warp 0's TMA loads, Q0 and Q1 once, then K(0), V(0), K(1), ... into the ring."""
    @T.macro
    def producer(q, k, v, b, h, hk, q0, k0, r0, q0_s, q1_s, kv_s, q_full, kv_full, kv_empty, n0_, n1_):
        n = T.alloc_var("int32")
        n = T.max(n0_, n1_)
        T.tma_copy(q_tile(q, varlen, ROWS, b, h, q0, r0), q0_s, barrier=q_full)
        T.tma_copy(q_tile(q, varlen, ROWS, b, h, q0, r0 + ROWS), q1_s, barrier=q_full)
        T.mbarrier_arrive(q_full)
        for i in T.serial(2 * n):   # item i: K(i / 2) when i is even, else V(i / 2)
            s = i % STAGES
            T.mbarrier_wait_parity(kv_empty[s], ((i // STAGES) & 1) ^ 1)
            if i % 2 == 0:
                T.tma_copy(kv_tile(k, varlen, BLOCK_N, b, k0, i // 2, hk), kv_s[s, :, :], barrier=kv_full[s])
            else:
                T.tma_copy(kv_tile(v, varlen, BLOCK_N, b, k0, i // 2, hk), kv_s[s, :, :], barrier=kv_full[s])
            T.mbarrier_arrive(kv_full[s])
    return producer


def _mma(T):
    """Macro: warp 1's MMA issue order (module docstring), one thread issuing."""
    @T.macro
    def wait_item(kv_full, i):
        T.mbarrier_wait_parity(kv_full[i % STAGES], (i // STAGES) & 1)

    @T.macro
    def mma(q0_s, q1_s, p0_s, p1_s, kv_s, s_tmem, o_tmem, q_full, kv_full, kv_empty, s0_full, s1_full,
            p0_ready, p1_ready, pv0_done, pv1_done, n0_, n1_):
        n0 = T.alloc_var("int32")
        n1 = T.alloc_var("int32")
        n = T.alloc_var("int32")
        n0 = n0_
        n1 = n1_
        n = T.max(n0, n1)
        T.mbarrier_wait_parity(q_full, 0)
        if n > 0:
            wait_item(kv_full, 0)
            if n0 > 0:
                T.tcgen05_gemm(q0_s, kv_s[0, :, :], s_tmem[0, :, :], transpose_B=True, mbar=s0_full, clear_accum=True)
            if n1 > 0:
                T.tcgen05_gemm(q1_s, kv_s[0, :, :], s_tmem[1, :, :], transpose_B=True, mbar=s1_full,
                               clear_accum=True)
            T.tcgen05_mma_arrive(kv_empty[0])
        for t in T.serial(n):
            iv, ik = 2 * t + 1, 2 * t + 2       # items V(t), K(t + 1)
            wait_item(kv_full, iv)
            if t < n0:
                T.mbarrier_wait_parity(p0_ready, t & 1)
                T.tcgen05_gemm(p0_s, kv_s[iv % STAGES, :, :], o_tmem[0, :, :], mbar=pv0_done, clear_accum=t == 0)
            if t + 1 < n:
                wait_item(kv_full, ik)
                if t + 1 < n0:
                    T.tcgen05_gemm(q0_s, kv_s[ik % STAGES, :, :], s_tmem[0, :, :], transpose_B=True, mbar=s0_full,
                                   clear_accum=True)
            if t < n1:
                T.mbarrier_wait_parity(p1_ready, t & 1)
                T.tcgen05_gemm(p1_s, kv_s[iv % STAGES, :, :], o_tmem[1, :, :], mbar=pv1_done, clear_accum=t == 0)
            T.tcgen05_mma_arrive(kv_empty[iv % STAGES])
            if t + 1 < n:
                if t + 1 < n1:
                    T.tcgen05_gemm(q1_s, kv_s[ik % STAGES, :, :], s_tmem[1, :, :], transpose_B=True, mbar=s1_full,
                                   clear_accum=True)
                T.tcgen05_mma_arrive(kv_empty[ik % STAGES])
    return mma


def _softmax(T, varlen: bool, D: int, dtype: str):
    """Macro: softmax warpgroup c's tiles (S_c from TMEM, P_c to shared memory, O_c corrected in TMEM),
    then its epilogue."""
    f32 = "float32"
    mask = tile_masker(T, ROWS, BLOCK_N)
    write_lse = lse_writer(T, varlen, ROWS)
    update = softmax_update(T, ROWS, BLOCK_N)
    store = output_writer(T, varlen, ROWS, D)

    @T.macro
    def softmax(c, s_tmem, o_tmem, q_s, p_s, q_full, s_full, p_ready, pv_done, out, lse, b, h, q0, rows0, Sq, Sk, n_,
                causal, scale):
        n_c = T.alloc_var("int32")
        n_c = n_
        s_reg = T.alloc_fragment((ROWS, BLOCK_N), f32)
        p_reg = T.alloc_fragment((ROWS, BLOCK_N), dtype)
        o_reg = T.alloc_fragment((ROWS, O_CHUNK), f32)
        m = T.alloc_fragment((ROWS,), f32)
        m_prev = T.alloc_fragment((ROWS,), f32)
        rescale = T.alloc_fragment((ROWS,), f32)
        row_sum = T.alloc_fragment((ROWS,), f32)
        l = T.alloc_fragment((ROWS,), f32)
        off = Sk - Sq                                   # bottom-right causal alignment
        T.fill(m, MASKED)
        T.fill(l, 0)
        T.mbarrier_wait_parity(q_full, 0)   # (the epilogue writes O into Q_c's tile: its load must have landed)
        for t in T.serial(n_c):
            T.mbarrier_wait_parity(s_full, t & 1)
            T.copy(s_tmem[c, :, :], s_reg)
            mask(s_reg, t, rows0, off, Sk, causal)
            T.copy(m, m_prev)
            T.reduce_max(s_reg, m, dim=1, clear=False)
            for i in T.Parallel(ROWS):
                m[i] = T.if_then_else((m[i] - m_prev[i]) * scale > LAZY_RESCALE, m[i], m_prev[i])
            update(s_reg, m, m_prev, rescale, row_sum, l, scale)
            T.copy(s_reg, p_reg)
            if t > 0:   # P_c V(t - 1) done (already: S_c(t) was issued after it): P_c's tile and O_c are free
                T.mbarrier_wait_parity(pv_done, (t - 1) & 1)
                moved = T.alloc_var("int32", init=1)
                moved = 0   # warp-uniform: TMEM loads and stores are warp-collective
                for i in T.Parallel(ROWS):
                    if rescale[i] != 1:
                        moved = 1
                moved = T.any_sync(moved)
                if moved:
                    for ch in T.serial(D // O_CHUNK):
                        T.copy(o_tmem[c, :, ch * O_CHUNK:(ch + 1) * O_CHUNK], o_reg)
                        for i, j in T.Parallel(ROWS, O_CHUNK):
                            o_reg[i, j] *= rescale[i]
                        T.copy(o_reg, o_tmem[c, :, ch * O_CHUNK:(ch + 1) * O_CHUNK])
            T.copy(p_reg, p_s)
            T.fence_proxy_async()                       # generic-proxy smem writes -> the MMA's reads
            T.mbarrier_arrive(p_ready)

        # O / l through Q_c's tile (every Q_c K^T finished before the last P_c V) -> TMA store.  A
        # row that sees no key (causal: i + off < 0; else Sk == 0) gets 0 and lse -inf.
        if n_c > 0:
            T.mbarrier_wait_parity(pv_done, (n_c - 1) & 1)
            T.tcgen05_after_thread_sync()
        for ch in T.serial(D // O_CHUNK):
            if n_c > 0:
                T.copy(o_tmem[c, :, ch * O_CHUNK:(ch + 1) * O_CHUNK], o_reg)
            else:
                T.clear(o_reg)
            for i, j in T.Parallel(ROWS, O_CHUNK):
                o_reg[i, j] = T.if_then_else(saw_a_key(T, l[i], causal, rows0 + i, off), o_reg[i, j] / l[i], 0)
            T.copy(o_reg, q_s[:, ch * O_CHUNK:(ch + 1) * O_CHUNK])
        write_lse(lse, l, m, scale, causal, b, h, q0, rows0, off, Sq)
        T.fence_proxy_async()                                   # smem writes -> the TMA store
        T.sync_threads(barrier_id=1 + c, arrive_count=128)      # this warpgroup only
        store(out, q_s, b, h, q0, rows0, Sq)
    return softmax


def tcgen05_kernel(dim: int, varlen: bool, dtype: str = "bfloat16"):
    import tilelang.language as T

    assert dim % O_CHUNK == 0 and 2 * BLOCK_N + 2 * dim <= 512   # TMEM columns
    f32, D = "float32", dim
    HQ, HK = T.dynamic("HQ"), T.dynamic("HK")
    producer, mma, softmax = _producer(T, varlen), _mma(T), _softmax(T, varlen, D, dtype)

    def tiles_of(causal, rows0, Sq, Sk):   # a tile's K/V tile count: 0 when its rows lie past Sq
        return T.if_then_else(rows0 < Sq, tiles_seen(T, BLOCK_N, causal, rows0, ROWS, Sq, Sk), 0)

    @T.macro
    def body(q, k, v, out, lse, causal, softmax_scale, bx, h, b, Sq, Sk, q0, k0):
        q0_s = T.alloc_shared((ROWS, D), dtype)
        q1_s = T.alloc_shared((ROWS, D), dtype)
        p0_s = T.alloc_shared((ROWS, BLOCK_N), dtype)
        p1_s = T.alloc_shared((ROWS, BLOCK_N), dtype)
        kv_s = T.alloc_shared((STAGES, BLOCK_N, D), dtype)
        s_tmem = T.alloc_tmem([2, ROWS, BLOCK_N], f32)
        o_tmem = T.alloc_tmem([2, ROWS, D], f32)
        q_full = T.alloc_barrier(32)
        kv_full = T.alloc_barrier([32] * STAGES)
        kv_empty = T.alloc_barrier([1] * STAGES)
        s0_full = T.alloc_barrier(1)
        s1_full = T.alloc_barrier(1)
        p0_ready = T.alloc_barrier(128)
        p1_ready = T.alloc_barrier(128)
        pv0_done = T.alloc_barrier(1)
        pv1_done = T.alloc_barrier(1)
        T.sync_threads()

        r0 = (T.ceildiv(Sq, 2 * ROWS) - 1 - bx) * (2 * ROWS)   # last row block first
        scale = log2_scale(T, softmax_scale, D)
        n0 = tiles_of(causal, r0, Sq, Sk)   # (expressions: each role binds its own copies)
        n1 = tiles_of(causal, r0 + ROWS, Sq, Sk)
        tx = T.get_thread_binding()
        if tx < 128:
            T.dec_max_nreg(REGS[0])
            if tx < 32:
                producer(q, k, v, b, h, h // (HQ // HK), q0, k0, r0, q0_s, q1_s, kv_s, q_full, kv_full, kv_empty, n0, n1)
            elif tx < 64:
                mma(q0_s, q1_s, p0_s, p1_s, kv_s, s_tmem, o_tmem, q_full, kv_full, kv_empty, s0_full, s1_full,
                    p0_ready, p1_ready, pv0_done, pv1_done, n0, n1)
        elif tx < 256:
            T.inc_max_nreg(REGS[1])
            softmax(0, s_tmem, o_tmem, q0_s, p0_s, q_full, s0_full, p0_ready, pv0_done, out, lse, b, h, q0, r0, Sq, Sk,
                    n0, causal, scale)
        else:
            T.inc_max_nreg(REGS[1])
            softmax(1, s_tmem, o_tmem, q1_s, p1_s, q_full, s1_full, p1_ready, pv1_done, out, lse, b, h, q0, r0 + ROWS,
                    Sq, Sk, n1, causal, scale)
        T.sync_threads()   # every role done with TMEM before warp 0 frees it (tilelang's tail dealloc)

    return grid_prim_func(T, body, varlen, HQ, HK, D, dtype, 2 * ROWS, 384)
