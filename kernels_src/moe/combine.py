"""moe_combine: the k expert outputs of each token, weighted and summed back into its row.

One CTA a token, 16-byte vectors: a thread loads its vector of every routed row (and of `shared`)
before it sums them, in fp32 and slot order, each product and sum rounded (no FMA).  The variant
for k <= 8 holds half the registers (5 CTAs/SM instead of 3) and stores evict-first; up to 128
tokens (at most a CTA an SM) 256 threads put twice the bytes in flight a CTA.
Measurements: docs/moe-tuning.md.
"""
from kernels_src.common import ST16_CS
from tkreg.spec import OpSpec, Tensor, Variant

from .limits import MAX_K, MOVE_RULE, MOVE_THREADS, REFERENCE


def combine_kernel(max_k: int = MAX_K, threads: int = MOVE_THREADS, evict_first: int = 0):
    """y_e[R, H] -> out[T, H] = sum_j w[t, j] * y_e[row_of_slot[t, j]] (+ shared[t]), fp32, bf16 out.

    max_k: the largest k the variant serves (registers: max_k vectors a thread); evict_first:
    evict-first stores."""
    import tilelang.language as T

    Tn, H, K, R = T.dynamic("T"), T.dynamic("H"), T.dynamic("K"), T.dynamic("R")
    vec, dt, f32 = 8, "bfloat16", "float32"
    span = threads * vec

    @T.prim_func
    def moe_combine(y_e: T.Tensor((R, H), dt), row_of_slot: T.Tensor((Tn, K), "int32"),
                    topk_weights: T.Tensor((Tn, K), f32), shared: T.Tensor((Tn, H), dt),
                    out: T.Tensor((Tn, H), dt)):
        with T.Kernel(Tn, threads=threads, **(dict(prelude=ST16_CS) if evict_first else {})) as t:
            T.assume(H % vec == 0)
            tx = T.get_thread_binding()
            rows = T.alloc_local((max_k,), "int32")
            wts = T.alloc_local((max_k,), f32)
            yv = T.alloc_local((max_k * vec,), dt)
            sv = T.alloc_local((vec,), dt)
            acc = T.alloc_local((vec,), f32)
            ov = T.alloc_local((vec,), dt)
            for j in T.unroll(max_k):
                rows[j] = -1
                wts[j] = T.float32(0)
                if j < K:
                    rows[j] = row_of_slot[t, j]
                    wts[j] = topk_weights[t, j]
            for c in T.serial(T.ceildiv(H, span)):
                col = (c * threads + tx) * vec
                if col < H:
                    for j in T.unroll(max_k):             # every load first
                        if rows[j] >= 0:
                            for v in T.vectorized(vec):
                                yv[j * vec + v] = y_e[rows[j], col + v]
                    if not T.isnullptr(shared.data):
                        for v in T.vectorized(vec):
                            sv[v] = shared[t, col + v]
                    for v in T.unroll(vec):
                        acc[v] = T.float32(0)
                    for j in T.unroll(max_k):
                        if rows[j] >= 0:
                            for v in T.unroll(vec):
                                acc[v] = T.ieee_add(acc[v], T.ieee_mul(wts[j], T.cast(yv[j * vec + v], f32)))
                    if not T.isnullptr(shared.data):
                        for v in T.unroll(vec):
                            acc[v] = T.ieee_add(acc[v], T.cast(sv[v], f32))
                    for v in T.unroll(vec):
                        ov[v] = T.cast(acc[v], dt)
                    if evict_first:
                        T.call_extern("handle", "tk_st16_cs", T.address_of(out[t, col]), T.address_of(ov[0]))
                    else:
                        for v in T.vectorized(vec):
                            out[t, col + v] = ov[v]

    return moe_combine


SPECS = (
    OpSpec(
        name="tkreg.moe_combine",
        doc="y_e[R, H] bf16 -> out[T, H] = bf16(sum_j topk_weights[t, j] * y_e[row_of_slot[t, j]] (+ shared[t])), "
            "fp32 in slot order; H % 8 == 0",
        tensors=(Tensor("y_e", ("R", "H"), dtypes=("bfloat16",)),
                 Tensor("row_of_slot", ("T", "K"), dtype="int32"),
                 Tensor("topk_weights", ("T", "K"), dtype="float32"),
                 Tensor("shared", ("T", "H"), dtype_of="y_e", optional=True),
                 Tensor("out", ("T", "H"), dtype_of="y_e", role="output")),
        factory=combine_kernel,
        # k <= 8 (DeepSeek-V3's 8): 1.11-1.16x the k <= 16 kernel on the H200; up to 128 tokens
        # (at most a CTA an SM) 256 threads
        variants=(Variant(dict(max_k=8, threads=256), rule="H % 8 == 0 and K <= 8 and T <= 128", priority=2),
                  Variant(dict(max_k=8, evict_first=1), rule="H % 8 == 0 and K <= 8", priority=1),
                  Variant({}, rule=f"H % 8 == 0 and {MOVE_RULE}")),
        reference=REFERENCE + "moe_combine", backward="tkreg.ops.moe:CombineBackward"),
)
