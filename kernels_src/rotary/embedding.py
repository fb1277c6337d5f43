"""rotary_embedding (vLLM's), in place on q and k: the kernel and its spec.

Layout: a thread owns 16 elements (8 rotation pairs) at one slot of HEADS (2) consecutive heads
of q, or of k (never both), of one token; it reads the 16-byte cos and sin vectors of its slot
(the same 8 cos and 8 sin serve both styles) once for those heads.  Per token q's heads form
ceil(HQ/2) groups and k's ceil(HK/2); groups and tokens are flattened over a 1-D grid, so any
head counts keep the threads busy.  The x loads and the position load are issued together,
before the (dependent) cache loads; no shared memory, one pass.
"""
from kernels_src.common import DTYPES
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from .rotation import rotation

HEAD_DIMS = (64, 128)
HEADS, THREADS = 2, 128     # heads a thread; threads a CTA


def rotary_kernel(D: int, dtype: str):
    """q, k rotated in place (neox or gptj pairs), heads of D elements; see the module docstring."""
    import tilelang.language as T

    heads, threads = HEADS, THREADS

    Tn, NQ, NK, P = T.dynamic("T"), T.dynamic("NQ"), T.dynamic("NK"), T.dynamic("P")
    HQ, HK = NQ // D, NK // D
    S = D // 16                    # threads per head
    parts, rotate = rotation(T, D, dtype, heads)

    @T.macro
    def body(positions, x, nh, cache, t, h0, s, neox: bool):
        """Heads h0 .. h0 + heads - 1 (those < nh) of token t of x, slot s; one style."""
        xa = T.alloc_local((heads, 8), dtype)
        xb = T.alloc_local((heads, 8), dtype)
        cs = T.alloc_local((8,), dtype)
        sn = T.alloc_local((8,), dtype)
        lo, hi = parts(neox, s)
        p = T.alloc_var("int64")
        p = positions[t]                        # issued first, waited for after the x loads
        for j in T.unroll(heads):
            if h0 + j < nh:
                for e in T.vectorized(8):
                    xa[j, e] = x[t, (h0 + j) * D + lo + e]
                for e in T.vectorized(8):
                    xb[j, e] = x[t, (h0 + j) * D + hi + e]
        rotate(cache, P, p, s, xa, xb, cs, sn, neox)
        for j in T.unroll(heads):
            if h0 + j < nh:
                for e in T.vectorized(8):
                    x[t, (h0 + j) * D + lo + e] = xa[j, e]
                for e in T.vectorized(8):
                    x[t, (h0 + j) * D + hi + e] = xb[j, e]

    @T.macro
    def styles(positions, x, nh, cache, t, h0, s, is_neox):
        if is_neox:
            body(positions, x, nh, cache, t, h0, s, True)
        else:
            body(positions, x, nh, cache, t, h0, s, False)

    @T.prim_func
    def rotary_embedding(positions: T.Tensor((Tn,), "int64"), q: T.Tensor((Tn, NQ), dtype),
                         k: T.Tensor((Tn, NK), dtype), cos_sin_cache: T.Tensor((P, D), dtype),
                         is_neox: T.bool):
        GQ = T.ceildiv(HQ, heads)           # head groups of q per token
        G = GQ + T.ceildiv(HK, heads)       # ... of q and k
        with T.Kernel(T.ceildiv(Tn * G * S, threads), threads=threads) as bx:
            T.assume(NQ % D == 0)
            T.assume(NK % D == 0)
            T.assume(NQ > 0)
            T.assume(NK > 0)
            T.assume(P > 0)
            gid = bx * threads + T.get_thread_binding()
            s = gid % S
            tg = T.alloc_var("int32")
            tg = gid // S
            t = T.alloc_var("int32")
            t = tg // G
            g = T.alloc_var("int32")
            g = tg - t * G
            if t < Tn:
                if g < GQ:
                    styles(positions, q, HQ, cos_sin_cache, t, g * heads, s, is_neox)
                else:
                    styles(positions, k, HK, cos_sin_cache, t, (g - GQ) * heads, s, is_neox)

    return rotary_embedding


def _rule(d):
    return f"NQ % {d} == 0 and NK % {d} == 0 and NQ > 0 and NK > 0 and P > 0"


SPECS = (
    OpSpec(
        name="tkreg.rotary_embedding",
        doc="vLLM-style rotary embedding in place on q[T, HQ*D] and k[T, HK*D] (neox or gptj), "
            "cos_sin_cache[P, D] in q's dtype, int64 positions[T]; D = 64 or 128",
        tensors=(Tensor("positions", ("T",), dtype="int64"),
                 Tensor("q", ("T", "NQ"), dtypes=DTYPES, role="inplace"),
                 Tensor("k", ("T", "NK"), dtype_of="q", role="inplace"),
                 Tensor("cos_sin_cache", ("P", "D"), dtype_of="q")),
        scalars=(Scalar("is_neox", "bool", True),),
        factory=rotary_kernel,
        variants=tuple(Variant({"D": d, "dtype": dt}, rule=_rule(d))
                       for d in HEAD_DIMS for dt in DTYPES),
        reference="tkreg.reference.rotary:rotary_embedding",
    ),
)
