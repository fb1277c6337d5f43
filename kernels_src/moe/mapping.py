"""moe_mapping: top-k expert ids -> the expert-major row layout (aligned segments, both directions).

One 1024-thread CTA, deterministic by construction (no order-dependent atomics): a per-warp
histogram over 32 contiguous slices of the T*k slots, a scan over warps and experts, then each
warp places its slice in order (match_any + popc ranks within each 32-slot round).
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from .limits import MAX_EXPERTS, REFERENCE

THREADS = 1024
UNROLL = 4              # 32-slot rounds a warp loads before it places them
MAP_R = "R == T * K + min(E, T * K) * (alignment - 1)"   # the padded bound (tilelang cannot solve it)


def mapping_kernel():
    """topk_idx[T, K] -> expert_offsets[E + 1], counts[E], slot_of_row[R], row_of_slot[T, K]."""
    import tilelang.language as T

    Tn, K = T.dynamic("T"), T.dynamic("K")
    E, R = T.dynamic("E"), T.dynamic("R")   # R: the typed function's padded bound (a rule checks it)
    N = Tn * K
    W = THREADS // 32
    ROUND = 32 * UNROLL

    @T.prim_func
    def moe_mapping(topk_idx: T.Tensor((Tn, K), "int32"), expert_offsets: T.Tensor((E + 1,), "int32"),
                    counts: T.Tensor((E,), "int32"), slot_of_row: T.Tensor((R,), "int32"),
                    row_of_slot: T.Tensor((Tn, K), "int32"), alignment: T.int32):
        with T.Kernel(1, threads=THREADS) as _:
            tx = T.get_thread_binding()
            lane = tx % 32
            w = tx // 32
            cnt = T.alloc_shared((W, MAX_EXPERTS), "int32")     # per warp: count, then its first row
            scan = T.alloc_shared((2, MAX_EXPERTS), "int32")
            ids = T.alloc_local((UNROLL,), "int32")
            run = T.alloc_var("int32")
            al = T.alloc_var("int32")
            v = T.alloc_var("int32")
            base = T.alloc_var("int32")
            L = T.ceildiv(T.ceildiv(N, W), ROUND) * ROUND      # slots per warp slice
            start = w * L
            for i in T.serial(W * MAX_EXPERTS // THREADS):
                cnt[(i * THREADS + tx) // MAX_EXPERTS, (i * THREADS + tx) % MAX_EXPERTS] = 0
            for it in T.serial(T.ceildiv(R, THREADS)):
                if it * THREADS + tx < R:
                    slot_of_row[it * THREADS + tx] = -1
            T.sync_threads()
            # 1. per-warp histograms
            for it in T.serial(L // 32):
                n = start + it * 32 + lane
                if n < N:
                    v = topk_idx[n // K, n % K]
                    if v >= 0 and v < E:
                        T.atomic_add(cnt[w, v], 1)
            T.sync_threads()
            # 2. per expert: each warp's first rank, the count, the aligned exclusive scan
            al = 0
            if tx < E:
                run = 0
                for ww in T.unroll(W):
                    v = cnt[ww, tx]
                    cnt[ww, tx] = run
                    run = run + v
                counts[tx] = run
                al = (run + alignment - 1) // alignment * alignment
            if tx < MAX_EXPERTS:
                scan[0, tx] = al
            for d in T.unroll(9):                        # Hillis-Steele over 512 entries
                T.sync_threads()
                if tx < MAX_EXPERTS:
                    v = scan[d % 2, tx]
                    if tx >= (1 << d):
                        v = v + scan[d % 2, tx - (1 << d)]
                    scan[(d + 1) % 2, tx] = v
            T.sync_threads()
            if tx < E:
                base = scan[1, tx] - al
                expert_offsets[tx] = base
                if tx == E - 1:
                    expert_offsets[E] = scan[1, tx]
                for ww in T.unroll(W):
                    cnt[ww, tx] = cnt[ww, tx] + base
            T.sync_threads()
            # 3. each warp places its slice in slot order
            for it in T.serial(L // ROUND):
                for u in T.unroll(UNROLL):
                    n = start + it * ROUND + u * 32 + lane
                    ids[u] = -1
                    if n < N:
                        ids[u] = topk_idx[n // K, n % K]
                        if ids[u] < 0 or ids[u] >= E:
                            ids[u] = -1
                for u in T.unroll(UNROLL):
                    n = start + it * ROUND + u * 32 + lane
                    peers = T.match_any_sync(ids[u])
                    rank = T.cast(T.popcount(peers & ((T.uint32(1) << T.cast(lane, "uint32")) - T.uint32(1))), "int32")
                    base = 0
                    if ids[u] >= 0:
                        base = cnt[w, ids[u]]
                    T.sync_warp()
                    if ids[u] >= 0 and rank == 0:
                        cnt[w, ids[u]] = base + T.cast(T.popcount(peers), "int32")
                    T.sync_warp()
                    if n < N:
                        if ids[u] >= 0:
                            row_of_slot[n // K, n % K] = base + rank
                            slot_of_row[base + rank] = n
                        else:
                            row_of_slot[n // K, n % K] = -1

    return moe_mapping



SPECS = (
    OpSpec(
        name="tkreg.moe_mapping",
        doc="topk_idx[T, K] int32 -> expert_offsets[E + 1] (aligned), counts[E], slot_of_row[R] (-1 padding), "
            "row_of_slot[T, K]; R = T*K + min(E, T*K) * (alignment - 1); canonical in-segment order",
        tensors=(Tensor("topk_idx", ("T", "K"), dtype="int32"),
                 Tensor("expert_offsets", ("E + 1",), dtype="int32", role="output"),
                 Tensor("counts", ("E",), dtype="int32", role="output"),
                 Tensor("slot_of_row", ("R",), dtype="int32", role="output"),
                 Tensor("row_of_slot", ("T", "K"), dtype="int32", role="output")),
        scalars=(Scalar("E", "int32"), Scalar("alignment", "int32"), Scalar("R", "int32")),
        factory=mapping_kernel,
        # every barrier is written out: tilelang's sync pass would add two per placing round
        variants=(Variant({}, rule=f"E >= 1 and E <= {MAX_EXPERTS} and alignment >= 1 and {MAP_R}",
                          pass_configs={"tl.disable_thread_storage_sync": True,
                                        "tl.disable_safe_memory_legalize": True}),),
        reference=REFERENCE + "moe_mapping"),
)
