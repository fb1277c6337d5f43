"""qk_norm_rope_cache: per-head RMSNorm (optional) + rotary on q and k, K/V written into a paged
cache (optional), in one launch: the kernel and its spec.

Layout: as rotary/embedding.py, a thread owns 16 elements (8 rotation pairs, the same 8 cos and 8
sin for both styles) at one slot of HEADS (2) consecutive heads of q, of k or of v, of one token;
D / 16 threads (a lane group, aligned in a warp) cover a head.  Per token the head groups are q's
ceil(HQ/2), then k's ceil(HK/2), then v's ceil(HK/2); groups and tokens are flattened over a 1-D
grid.  The norm's sum of squares is reduced by shuffles inside the lane group, in control flow
every thread of the grid takes alike (the null tests of the optional tensors), so q, k and v
groups may share a warp.  q and k are read in place through their token and head strides (the q
and k slices of a fused qkv output); v only feeds the cache, so without a cache its threads exit.
The cache is addressed as rows of HK * D elements, slot s = page * PS + row: the page size never
enters the kernel (`s < 0` writes nothing).
"""
from kernels_src.common import DTYPES
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from .embedding import HEAD_DIMS, HEADS, THREADS
from .rotation import rotation


def qk_norm_rope_cache_kernel(D: int, dtype: str):
    """See the module docstring; one kernel for every presence of the optional tensors."""
    import tilelang.language as T

    heads, threads = HEADS, THREADS
    Tn, HQ, HK, P = T.dynamic("T"), T.dynamic("HQ"), T.dynamic("HK"), T.dynamic("P")
    NP, PS = T.dynamic("NP"), T.dynamic("PS")
    sqt, skt, svt = T.dynamic("sqt", "int64"), T.dynamic("skt", "int64"), T.dynamic("svt", "int64")
    sqh, skh, svh = T.dynamic("sqh"), T.dynamic("skh"), T.dynamic("svh")
    S = D // 16                    # threads per head
    f32 = "float32"
    parts, rotate = rotation(T, D, dtype, heads)

    Q = T.StridedTensor((Tn, HQ, D), (sqt, sqh, 1), dtype)
    K = T.StridedTensor((Tn, HK, D), (skt, skh, 1), dtype)
    V = T.StridedTensor((Tn, HK, D), (svt, svh, 1), dtype)
    KC = T.Tensor((NP, PS, HK, D), dtype)    # one annotation object a tensor: a shared one is one buffer
    VC = T.Tensor((NP, PS, HK, D), dtype)

    @T.macro
    def load(src, t, h, lo, hi, xa, xb, j):
        for e in T.vectorized(8):
            xa[j, e] = src[t, h, lo + e]
        for e in T.vectorized(8):
            xb[j, e] = src[t, h, hi + e]

    @T.macro
    def store(dst, t, h, lo, hi, xa, xb, j):
        for e in T.vectorized(8):
            dst[t, h, lo + e] = xa[j, e]
        for e in T.vectorized(8):
            dst[t, h, hi + e] = xb[j, e]

    @T.macro
    def store_row(cache, slot, h, lo, hi, xa, xb, j):
        """Row `slot` of the cache's NP * PS rows (page slot // PS, row slot % PS): indexed as
        page 0, so the page size never enters the kernel (no guard reads it: see PASS_CONFIGS)."""
        for e in T.vectorized(8):
            cache[0, slot, h, lo + e] = xa[j, e]
        for e in T.vectorized(8):
            cache[0, slot, h, hi + e] = xb[j, e]

    @T.macro
    def body(q, k, v, positions, cos_sin_cache, q_weight, k_weight, k_cache, v_cache, slot_mapping,
             q_out, k_out, eps, t, g, GQ, GK, s, neox: bool):
        """Heads g's (of q, k or v by the group index) of token t, slot s; one rotary style."""
        xa = T.alloc_local((heads, 8), dtype)
        xb = T.alloc_local((heads, 8), dtype)
        cs = T.alloc_local((8,), dtype)
        sn = T.alloc_local((8,), dtype)
        wa = T.alloc_local((8,), dtype)
        wb = T.alloc_local((8,), dtype)
        acc = T.alloc_local((heads,), f32)
        lo, hi = parts(neox, s)
        live = t < Tn
        is_q = g < GQ
        is_v = g >= GQ + GK
        h0 = T.alloc_var("int32")
        h0 = T.if_then_else(is_q, g, T.if_then_else(is_v, g - GQ - GK, g - GQ)) * heads
        nh = T.if_then_else(is_q, HQ, HK)
        p = T.alloc_var("int64")
        slot = T.alloc_var("int64")
        p = T.int64(0)
        slot = T.int64(-1)
        if live and not is_v:
            p = positions[t]                    # issued first, waited for after the x loads
        if live and not is_q and not T.isnullptr(slot_mapping.data):
            slot = slot_mapping[t]
        for j in T.unroll(heads):
            for e in T.unroll(8):
                xa[j, e] = T.cast(0, dtype)
                xb[j, e] = T.cast(0, dtype)
            if live and h0 + j < nh:
                if is_q:
                    load(q, t, h0 + j, lo, hi, xa, xb, j)
                elif is_v:
                    if not T.isnullptr(v_cache.data):
                        load(v, t, h0 + j, lo, hi, xa, xb, j)
                else:
                    load(k, t, h0 + j, lo, hi, xa, xb, j)
        if not T.isnullptr(q_weight.data):      # the same for every thread: shuffles stay convergent
            if live and is_q:
                for e in T.vectorized(8):
                    wa[e] = q_weight[lo + e]
                for e in T.vectorized(8):
                    wb[e] = q_weight[hi + e]
            elif live and not is_v:
                for e in T.vectorized(8):
                    wa[e] = k_weight[lo + e]
                for e in T.vectorized(8):
                    wb[e] = k_weight[hi + e]
            for j in T.unroll(heads):
                acc[j] = T.float32(0)
                for e in T.unroll(8):
                    acc[j] = acc[j] + T.cast(xa[j, e], f32) * T.cast(xa[j, e], f32)
                for e in T.unroll(8):
                    acc[j] = acc[j] + T.cast(xb[j, e], f32) * T.cast(xb[j, e], f32)
                for i in T.unroll(S.bit_length() - 1):
                    acc[j] = acc[j] + T.shfl_xor(acc[j], (S // 2) >> i)
            if not is_v:
                for j in T.unroll(heads):
                    r = T.rsqrt(acc[j] / T.float32(D) + eps)
                    for e in T.unroll(8):
                        xa[j, e] = T.cast(T.cast(xa[j, e], f32) * r * T.cast(wa[e], f32), dtype)
                    for e in T.unroll(8):
                        xb[j, e] = T.cast(T.cast(xb[j, e], f32) * r * T.cast(wb[e], f32), dtype)
        if live and not is_v:
            rotate(cos_sin_cache, P, p, s, xa, xb, cs, sn, neox)
        for j in T.unroll(heads):
            if live and h0 + j < nh:
                if is_q:
                    store(q_out, t, h0 + j, lo, hi, xa, xb, j)
                else:
                    if not is_v:
                        store(k_out, t, h0 + j, lo, hi, xa, xb, j)
                    if slot >= 0:
                        if is_v:
                            store_row(v_cache, slot, h0 + j, lo, hi, xa, xb, j)
                        else:
                            store_row(k_cache, slot, h0 + j, lo, hi, xa, xb, j)

    @T.prim_func
    def qk_norm_rope_cache(q: Q, k: K, v: V, positions: T.Tensor((Tn,), "int64"),
                           cos_sin_cache: T.Tensor((P, D), dtype), q_weight: T.Tensor((D,), dtype),
                           k_weight: T.Tensor((D,), dtype), k_cache: KC, v_cache: VC,
                           slot_mapping: T.Tensor((Tn,), "int64"), q_out: T.Tensor((Tn, HQ, D), dtype),
                           k_out: T.Tensor((Tn, HK, D), dtype), eps: T.float32, is_neox: T.bool):
        GQ, GK = T.ceildiv(HQ, heads), T.ceildiv(HK, heads)    # head groups of q, of k (and of v)
        G = GQ + 2 * GK
        with T.Kernel(T.ceildiv(Tn * G * S, threads), threads=threads) as bx:
            T.assume(HQ > 0)
            T.assume(HK > 0)
            T.assume(P > 0)
            T.assume(sqt % 8 == 0)              # the rule (a size-1 dim's stride only multiplies 0)
            T.assume(skt % 8 == 0)
            T.assume(svt % 8 == 0)
            T.assume(sqh % 8 == 0)
            T.assume(skh % 8 == 0)
            T.assume(svh % 8 == 0)
            gid = bx * threads + T.get_thread_binding()
            s = gid % S
            tg = T.alloc_var("int32")
            tg = gid // S
            t = T.alloc_var("int32")
            t = tg // G
            g = T.alloc_var("int32")
            g = tg - t * G
            args = (q, k, v, positions, cos_sin_cache, q_weight, k_weight, k_cache, v_cache, slot_mapping,
                    q_out, k_out, eps, t, g, GQ, GK, s)
            if is_neox:
                body(*args, True)
            else:
                body(*args, False)

    return qk_norm_rope_cache


# 16-byte vectors: every token and head stride a multiple of 8 elements (a size-1 dim's is never used)
_STRIDES = " and ".join(f"({n} == 1 or {s} % 8 == 0)" for n, s in
                        (("T", "sqt"), ("T", "skt"), ("T", "svt"), ("HQ", "sqh"), ("HK", "skh"), ("HK", "svh")))
RULE = ("HQ > 0 and HK > 0 and P > 0 and has_q_weight == has_k_weight and has_k_cache == has_v_cache "
        "and has_k_cache == has_slot_mapping and " + _STRIDES)

# Every access is in bounds by construction (guarded by T, the head counts and the slot sign;
# positions clamped), so tilelang's per-access guards would only cost registers and vector loads.
PASS_CONFIGS = {"tl.disable_safe_memory_legalize": True}

SPECS = (
    OpSpec(
        name="tkreg.qk_norm_rope_cache",
        doc="q[T, HQ, D], k/v[T, HK, D] (strided views, e.g. of a fused qkv) -> q_out, k_out [T, H, D]: "
            "optional per-head RMSNorm (q_weight/k_weight[D]), then rotary (neox or gptj) by "
            "cos_sin_cache[P, D] rows at int64 positions[T]; optional paged NHD k/v_cache[NP, PS, HK, D] "
            "written at slot_mapping[T] (int64, < 0: skipped); D = 64 or 128",
        tensors=(Tensor("q", ("T", "HQ", "D"), dtypes=DTYPES, strides=("sqt", "sqh", 1)),
                 Tensor("k", ("T", "HK", "D"), dtype_of="q", strides=("skt", "skh", 1)),
                 Tensor("v", ("T", "HK", "D"), dtype_of="q", strides=("svt", "svh", 1)),
                 Tensor("positions", ("T",), dtype="int64"),
                 Tensor("cos_sin_cache", ("P", "D"), dtype_of="q"),
                 Tensor("q_weight", ("D",), dtype_of="q", optional=True),
                 Tensor("k_weight", ("D",), dtype_of="q", optional=True),
                 Tensor("k_cache", ("NP", "PS", "HK", "D"), dtype_of="q", role="inplace", optional=True),
                 Tensor("v_cache", ("NP", "PS", "HK", "D"), dtype_of="q", role="inplace", optional=True),
                 Tensor("slot_mapping", ("T",), dtype="int64", optional=True),
                 Tensor("q_out", ("T", "HQ", "D"), dtype_of="q", role="output"),
                 Tensor("k_out", ("T", "HK", "D"), dtype_of="q", role="output")),
        scalars=(Scalar("eps", "float32", 1e-6), Scalar("is_neox", "bool", True)),
        factory=qk_norm_rope_cache_kernel,
        variants=tuple(Variant({"D": d, "dtype": dt}, rule=RULE, pass_configs=PASS_CONFIGS)
                       for d in HEAD_DIMS for dt in DTYPES),
        reference="tkreg.reference.rotary:qk_norm_rope_cache",
    ),
)
