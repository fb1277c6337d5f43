"""silu_and_mul and swiglu: x[T, N] = [gate | up] -> out[T, N // 2], one pass.

Layout: a 2-D grid, tokens on x (so any T up to the int32 element limit launches) and column
blocks of `threads * vector_width` outputs on y (or both folded into one index, raster="flat":
kernels_src.common.raster).  Each thread owns one `vector_width`-wide column slice of
`rows_per_thread` consecutive tokens (per op in TUNED): it issues all 2 * rows_per_thread loads
(16 bytes each at vector_width 8) before any math, then writes one 16-byte store a token
(`T.stg128`: left to itself, nvcc 13.0 splits the local-array copy into 4-byte stores on sm_90a);
no shared memory.

Variants (per dtype, per arch): vector_width 8 serves N % 16 == 0 (I = N/2 a multiple of 8: every
intermediate size of real models, TP-sharded or not); vector_width 1 serves any other even N at
lower bandwidth; odd N has no variant.  silu_and_mul has two more, by call size (BIG, MID below).
The precise expf and IEEE division (~22 instructions an element) keep big calls near issue-bound,
so loads in flight before the math pay there.  Measurements: docs/activation-tuning.md.
"""
from kernels_src.common import DTYPES, raster as grid_order
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

# (rows_per_thread, threads) per op: silu_and_mul gains 3-7% with one token a thread on 256-thread
# CTAs; swiglu, which does more math, peaks at 2 x 128 (docs/activation-tuning.md).
TUNED = {"silu_and_mul": (1, 256), "swiglu": (2, 128)}


def load_halves(T, rows: int, vec: int, Tn, I):  # noqa: E741
    """Macro: a thread's `rows` x `vec` slices of the gate (x[:, c:]) and up (x[:, I + c:]) halves."""
    @T.macro
    def load(x, g, u, bt, c):
        for r in T.unroll(rows):
            if bt * rows + r < Tn:
                for e in T.vectorized(vec):
                    g[r, e] = x[bt * rows + r, c + e]
                for e in T.vectorized(vec):
                    u[r, e] = x[bt * rows + r, I + c + e]
    return load


def gated_kernel(op: str, dtype: str, vector_width: int, rows_per_thread: int | None = None,
                 threads: int | None = None, raster: str = "rows"):
    """op: "silu_and_mul" (no scalars) or "swiglu" (limit, alpha, beta); raster: kernels_src.common."""
    import tilelang.language as T

    rows, threads = rows_per_thread or TUNED[op][0], threads or TUNED[op][1]
    vec = vector_width

    Tn, N = T.dynamic("T"), T.dynamic("N")
    I = N // 2  # noqa: E741
    f32 = "float32"
    load = load_halves(T, rows, vec, Tn, I)
    grid, unpack = grid_order(T, raster, T.ceildiv(Tn, rows), T.ceildiv(I, threads * vec))

    @T.macro
    def run(x, out, limit, alpha, beta, clamp: bool, scaled: bool):
        with T.Kernel(*grid, threads=threads) as blk:
            bt, bc = unpack(blk)
            if vec > 1:
                T.assume(N % (2 * vec) == 0)
            g = T.alloc_local((rows, vec), dtype)
            u = T.alloc_local((rows, vec), dtype)
            o = T.alloc_local((rows, vec), dtype)
            c = (bc * threads + T.get_thread_binding()) * vec
            if c < I:
                load(x, g, u, bt, c)
                for r in T.unroll(rows):
                    if bt * rows + r < Tn:
                        for e in T.unroll(vec):
                            gf = T.cast(g[r, e], f32)
                            uf = T.cast(u[r, e], f32)
                            if clamp:
                                on = limit > T.float32(0)
                                gf = T.if_then_else(on and gf > limit, limit, gf)
                                uf = T.if_then_else(on and uf > limit, limit, uf)
                                uf = T.if_then_else(on and uf < -limit, -limit, uf)
                            if scaled:
                                o[r, e] = T.cast(gf / (T.float32(1) + T.exp(-(alpha * gf))) * (uf + beta), dtype)
                            else:
                                o[r, e] = T.cast(gf / (T.float32(1) + T.exp(-gf)) * uf, dtype)
                        if vec == 8:  # an explicit st.global.v4: nvcc splits the plain copy on sm_90a
                            T.stg128(out[bt * rows + r, c], T.reinterpret(o[r, T.Ramp(0, 1, 8)], "uint32x4"))
                        else:
                            for e in T.vectorized(vec):
                                out[bt * rows + r, c + e] = o[r, e]

    if op == "silu_and_mul":
        @T.prim_func
        def silu_and_mul(x: T.Tensor((Tn, N), dtype), out: T.Tensor((Tn, I), dtype)):
            run(x, out, None, None, None, False, False)
        return silu_and_mul

    @T.prim_func
    def swiglu(x: T.Tensor((Tn, N), dtype), out: T.Tensor((Tn, I), dtype),
               limit: T.float32, alpha: T.float32, beta: T.float32):
        run(x, out, limit, alpha, beta, True, True)
    return swiglu


# silu_and_mul on big calls (T * N >= 3 * 2^25, I >= 2048): 3 tokens a thread on the flat grid
# (the CTAs resident at once stream whole rows), 6 loads in flight before the math: 0.96 -> 0.99x
# torch.compile at 16384 x 14336; below that size the one-token CTAs stay ahead.
BIG = "N % 16 == 0 and N >= 4096 and T * N >= 100663296"
# and on prefill chunks (T * I of 4-12.6 M: 1024-3000 x 4096, 2048 x 5120): 128-thread CTAs;
# from 3000 x 5120 up the 256-thread CTAs stay ahead.
MID = "N % 16 == 0 and T * N >= 8388608 and T * N <= 25165824"


def _variants(op):
    sized = tuple(v for d in DTYPES for v in (
        Variant({"op": op, "dtype": d, "vector_width": 8, "rows_per_thread": 3, "raster": "flat"}, rule=BIG,
                priority=20),
        Variant({"op": op, "dtype": d, "vector_width": 8, "threads": 128}, rule=MID, priority=15))
    ) if op == "silu_and_mul" else ()
    return sized + tuple(v for d in DTYPES for v in (
        Variant({"op": op, "dtype": d, "vector_width": 8}, rule="N % 16 == 0", priority=10),
        Variant({"op": op, "dtype": d, "vector_width": 1}, rule="N % 2 == 0")))


def _tensors():
    return (Tensor("x", ("T", "N"), dtypes=DTYPES),
            Tensor("out", ("T", "N // 2"), dtype_of="x", role="output"))


SPECS = (
    OpSpec(
        name="tkreg.silu_and_mul",
        doc="out[T, N/2] = silu(x[:, :N/2]) * x[:, N/2:] in fp32, rounded once (bf16/fp16)",
        tensors=_tensors(),
        factory=gated_kernel,
        variants=_variants("silu_and_mul"),
        reference="tkreg.reference.activation:silu_and_mul",
        backward="tkreg.ops.activation:SiluAndMulGrad",
    ),
    OpSpec(
        name="tkreg.swiglu",
        doc="out[T, N/2] = g * sigmoid(alpha * g) * (u + beta), g/u = x's halves clamped at `limit` "
            "when limit > 0 (GPT-OSS style); fp32, rounded once",
        tensors=_tensors(),
        scalars=(Scalar("limit", "float32", 0.0), Scalar("alpha", "float32", 1.0),
                 Scalar("beta", "float32", 0.0)),
        factory=gated_kernel,
        variants=_variants("swiglu"),
        reference="tkreg.reference.activation:swiglu",
    ),
)
