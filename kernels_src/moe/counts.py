"""expert_counts: tokens routed to each expert.

A zeroing kernel, then shared-memory histograms of COUNT_SLOTS slots a CTA added with global
atomics (sums of counts do not depend on their order).
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from .limits import MAX_EXPERTS, REFERENCE

COUNT_SLOTS = 4096      # slots an expert_counts CTA
THREADS = 256


def counts_kernel():
    """topk_idx[T, K] -> counts[E] int32 (ids outside [0, E) skipped)."""
    import tilelang.language as T

    Tn, K, E = T.dynamic("T"), T.dynamic("K"), T.dynamic("E")
    N = Tn * K
    per = COUNT_SLOTS // THREADS

    @T.prim_func
    def expert_counts(topk_idx: T.Tensor((Tn, K), "int32"), counts: T.Tensor((E,), "int32")):
        with T.Kernel(1, threads=MAX_EXPERTS) as _:
            tx = T.get_thread_binding()
            if tx < E:
                counts[tx] = 0
        with T.Kernel(T.ceildiv(N, COUNT_SLOTS), threads=THREADS) as b:
            tx = T.get_thread_binding()
            h = T.alloc_shared((MAX_EXPERTS,), "int32")
            v = T.alloc_var("int32")
            for i in T.serial(MAX_EXPERTS // THREADS):
                h[i * THREADS + tx] = 0
            T.sync_threads()
            for i in T.unroll(per):
                n = b * COUNT_SLOTS + i * THREADS + tx
                if n < N:
                    v = topk_idx[n // K, n % K]
                    if v >= 0 and v < E:
                        T.atomic_add(h[v], 1)
            T.sync_threads()
            for i in T.serial(MAX_EXPERTS // THREADS):
                e = i * THREADS + tx
                if e < E:
                    if h[e] > 0:
                        T.atomic_add(counts[e], h[e])

    return expert_counts


SPECS = (
    OpSpec(
        name="tkreg.expert_counts",
        doc="topk_idx[T, K] int32 -> tokens per expert [E] int32 (ids outside [0, E) skipped)",
        tensors=(Tensor("topk_idx", ("T", "K"), dtype="int32"),
                 Tensor("counts", ("E",), dtype="int32", role="output")),
        scalars=(Scalar("E", "int32"),),
        factory=counts_kernel,
        variants=(Variant({}, rule=f"E >= 1 and E <= {MAX_EXPERTS}"),),
        reference=REFERENCE + "expert_counts"),
)
