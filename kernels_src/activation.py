"""Gated activations: silu_and_mul and swiglu over x[T, N] = [gate | up] -> out[T, N // 2].

Both read each input element once and write each output once, in fp32 with one rounding:

    silu_and_mul:  out = g / (1 + exp(-g)) * u
    swiglu:        g' = min(g, limit), u' = clamp(u, -limit, limit)   (only when limit > 0)
                   out = g' / (1 + exp(-(alpha * g'))) * (u' + beta)

with g = x[:, :N/2] and u = x[:, N/2:] widened to fp32.  Every step is an IEEE fp32 operation in
that order (precise `expf`, IEEE division, no fused multiply-add, as torch's CUDA kernels do), so
`tkreg.reference.activation` reproduces the kernels bit for bit.  Clamps keep NaN (torch.clamp's
rule).  GPT-OSS's activation is swiglu(limit=7, alpha=1.702, beta=1) on *de-interleaved*
gate/up rows (its checkpoints interleave them; reorder the weight once at load time).

Layout: a 2-D grid, tokens on x (so any T up to the int32 element limit launches) and column
blocks of `threads * vec` outputs on y (or both folded into one index, `raster="flat"`).  Each
thread owns one `vec`-wide column slice of `rows` consecutive tokens (rows and threads per op in
TUNED): it issues all 2 * rows loads (16 bytes each when vec == 8) before any math, then writes
`rows` 16-byte stores (`T.stg128`: left to itself, nvcc 13.0 splits the local-array
copy into 4-byte stores on sm_90a); no shared memory, one pass.

silu_and_mul_backward (the gradient training needs) follows the same layout.

Variants (per dtype bf16/fp16, per arch): vec=8 serves N % 16 == 0 (I = N/2 a multiple of 8:
every intermediate size of real models, TP-sharded or not); vec=1 serves any other even N at
lower bandwidth; odd N is rejected (no variant: `needs N % 2 == 0`).  silu_and_mul has a third,
for big calls (T * N >= 3 * 2^25, I >= 2048): 3 tokens a thread on the "flat" grid order
(kernels_src/_grid.py: the CTAs resident at once stream whole rows), and a fourth for prefill
chunks (T * I of 4-12.6 M): 128-thread CTAs.  The precise expf and IEEE
division (~22 instructions an element) keep big calls near issue-bound, so 6 loads in flight
before the math pay: 0.96 -> 0.99x torch.compile at 16384 x 14336 / 8192 x 18432; below that size,
or at I = 704, the one-token CTAs stay ahead (docs/sweeps/r22.py on the H200).  torch.compile's
own kernel is not bit-exact (approximate division, exp fused with the + 1).  Tried for the mid
sizes and dropped (docs/sweeps/r23.py): __expf / rcp.approx with an exact recomputation only where
the two could round to different bf16 values (bit-exact, 1 element in ~1000 recomputed) ran no
faster than the exact kernel; fast math alone 0.97-1.03x torch.compile.
"""
from kernels_src._grid import raster as _raster
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

DTYPES = ("bfloat16", "float16")
ROWS, THREADS = 4, 128
# (rows, threads) per op, from a sweep on the H200 (rows 1-8, 128/256 threads): silu_and_mul
# gains 3-7% with one row per 256-thread CTA; swiglu, which does more math, peaks at 2 x 128.
TUNED = {"silu_and_mul": (1, 256), "swiglu": (2, 128)}


def _load_halves(T, rows: int, vec: int, Tn, I):  # noqa: E741
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


def gated_kernel(op: str, dtype: str, vec: int, rows: int | None = None, threads: int | None = None,
                 raster: str = "rows"):
    """op: "silu_and_mul" (no scalars) or "swiglu" (limit, alpha, beta); raster: kernels_src/_grid.py."""
    import tilelang.language as T

    rows, threads = rows or TUNED[op][0], threads or TUNED[op][1]

    Tn, N = T.dynamic("T"), T.dynamic("N")
    I = N // 2  # noqa: E741
    f32 = "float32"
    load = _load_halves(T, rows, vec, Tn, I)
    grid, unpack = _raster(T, raster, T.ceildiv(Tn, rows), T.ceildiv(I, threads * vec))

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


def silu_and_mul_backward_kernel(dtype: str, vec: int, rows: int = ROWS, threads: int = THREADS):
    """dx = [dy * u * s * (1 + g * (1 - s)) | dy * g * s] with s = sigmoid(g), fp32, rounded once.

    Same layout as the forward: each thread loads `rows` slices of g, u and dy, then stores both
    halves of dx.
    """
    import tilelang.language as T

    Tn, N = T.dynamic("T"), T.dynamic("N")
    I = N // 2  # noqa: E741
    f32 = "float32"
    load = _load_halves(T, rows, vec, Tn, I)

    @T.prim_func
    def silu_and_mul_backward(x: T.Tensor((Tn, N), dtype), dy: T.Tensor((Tn, I), dtype),
                              dx: T.Tensor((Tn, N), dtype)):  # x first: TVM binds N from it
        with T.Kernel(T.ceildiv(Tn, rows), T.ceildiv(I, threads * vec), threads=threads) as (bt, bc):
            if vec > 1:
                T.assume(N % (2 * vec) == 0)
            g = T.alloc_local((rows, vec), dtype)
            u = T.alloc_local((rows, vec), dtype)
            d = T.alloc_local((rows, vec), dtype)
            og = T.alloc_local((rows, vec), dtype)
            ou = T.alloc_local((rows, vec), dtype)
            c = (bc * threads + T.get_thread_binding()) * vec
            if c < I:
                load(x, g, u, bt, c)           # every load before any math
                for r in T.unroll(rows):
                    if bt * rows + r < Tn:
                        for e in T.vectorized(vec):
                            d[r, e] = dy[bt * rows + r, c + e]
                for r in T.unroll(rows):
                    if bt * rows + r < Tn:
                        for e in T.unroll(vec):
                            gf = T.cast(g[r, e], f32)
                            df = T.cast(d[r, e], f32)
                            sg = T.float32(1) / (T.float32(1) + T.exp(-gf))
                            og[r, e] = T.cast(df * T.cast(u[r, e], f32) * sg * (T.float32(1) + gf * (T.float32(1) - sg)), dtype)
                            ou[r, e] = T.cast(df * gf * sg, dtype)
                        for e in T.vectorized(vec):
                            dx[bt * rows + r, c + e] = og[r, e]
                        for e in T.vectorized(vec):
                            dx[bt * rows + r, I + c + e] = ou[r, e]

    return silu_and_mul_backward


# silu_and_mul on big calls: (T x I) 8192 x 7168 and up gain 1-4%, 4096 x 7168 and 16384 x 2048
# lose 1-4% (docs/sweeps/r22.py round 3).
BIG = "N % 16 == 0 and N >= 4096 and T * N >= 100663296"
# and on prefill chunks of 4-12.6 M outputs (1024-3000 x 4096, 2048 x 5120): 128-thread CTAs,
# 0.96-0.97 -> 0.975-0.985x torch.compile; from 3000 x 5120 up the 256-thread CTAs stay ahead
# (docs/sweeps/r23.py rounds 2-3).
MID = "N % 16 == 0 and T * N >= 8388608 and T * N <= 25165824"


def _variants(op):
    sized = tuple(v for d in DTYPES for v in (
        Variant({"op": op, "dtype": d, "vec": 8, "rows": 3, "raster": "flat"}, rule=BIG, priority=20),
        Variant({"op": op, "dtype": d, "vec": 8, "threads": 128}, rule=MID, priority=15))) if op == "silu_and_mul" else ()
    return sized + tuple(v for d in DTYPES for v in (
        Variant({"op": op, "dtype": d, "vec": 8}, rule="N % 16 == 0", priority=10),
        Variant({"op": op, "dtype": d, "vec": 1}, rule="N % 2 == 0")))


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
    OpSpec(
        name="tkreg.silu_and_mul_backward",
        doc="Gradient of silu_and_mul: (dy[T, N/2], x[T, N]) -> dx[T, N]",
        tensors=(Tensor("dy", ("T", "N // 2"), dtypes=DTYPES),
                 Tensor("x", ("T", "N"), dtype_of="dy"),
                 Tensor("dx", ("T", "N"), dtype_of="dy", role="output")),
        factory=silu_and_mul_backward_kernel,
        variants=tuple(v for d in DTYPES for v in (
            Variant({"dtype": d, "vec": 8}, rule="N % 16 == 0", priority=10),
            Variant({"dtype": d, "vec": 1}, rule="N % 2 == 0"))),
        reference="tkreg.reference.activation:silu_and_mul_backward",
    ),
)
