"""The memory-bound mHC row ops: expand_to_mhc, mhc_pre_apply_mix, mhc_post (forward).

- expand_to_mhc(x[T, H], mhc_mult) -> out[T, mhc_mult, H]: each 16-byte slot of x read once and
  stored mhc_mult times.
- mhc_pre_apply_mix(residual[T, m, H], pre[T, m, 1] fp32) -> out[T, H]: sum over h of
  pre[t, h] * residual[t, h] in fp32, rounded once.
- mhc_post(x[T, H], residual[T, m, H], post[T, m, 1], comb[T, m, m]) -> out[T, m, H]:
  out[t, n] = post[t, n] * x[t] + sum over h of comb[t, h, n] * residual[t, h] in fp32, rounded
  once (TileKernels' einsum('mn,mc->nc')).

Grid (T, column blocks): tokens on grid x (no 65535 limit), one 16-byte slot of each of the m rows
a thread, all of a thread's loads issued before its math (m + 1 slots in flight).  A token's mix
coefficients are read by every thread of its CTAs (broadcast loads, L1).  m is baked in (MULT) for
apply_mix and post; apply_mix also has an any-m kernel.  H is run-time, H % 8 == 0.
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

DTYPES = ("bfloat16",)   # TileKernels' mHC residual stream is bf16
VEC = 8                  # bf16 a 16-byte slot holds
THREADS = 128
MULTS = (4,)             # hyper-connection widths with their own unrolled kernels (V4: 4)


def expand_kernel(dtype: str):
    import tilelang.language as T

    Tn, H, m = T.dynamic("T"), T.dynamic("H"), T.dynamic("mhc_mult")
    vec, threads = VEC, THREADS

    @T.prim_func
    def expand_to_mhc(x: T.Tensor((Tn, H), dtype), out: T.Tensor((Tn, m, H), dtype)):
        with T.Kernel(Tn, T.ceildiv(H, threads * vec), threads=threads) as (tok, bx):
            T.assume(H % vec == 0)
            tx = T.get_thread_binding()
            a = T.alloc_local((vec,), dtype)
            col = (bx * threads + tx) * vec
            if col < H:
                for e in T.vectorized(vec):
                    a[e] = x[tok, col + e]
                for h in T.serial(m):
                    for e in T.vectorized(vec):
                        out[tok, h, col + e] = a[e]

    return expand_to_mhc


def apply_mix_kernel(dtype: str, mult: int):
    """mult > 0 bakes m in (every load before the math); mult == 0 takes any m."""
    import tilelang.language as T

    Tn, H = T.dynamic("T"), T.dynamic("H")
    m = mult or T.dynamic("m")
    vec, threads, f32 = VEC, THREADS, "float32"

    @T.prim_func
    def mhc_pre_apply_mix(residual: T.Tensor((Tn, m, H), dtype), pre: T.Tensor((Tn, m, 1), f32),
                          out: T.Tensor((Tn, H), dtype)):
        with T.Kernel(Tn, T.ceildiv(H, threads * vec), threads=threads) as (tok, bx):
            T.assume(H % vec == 0)
            tx = T.get_thread_binding()
            col = (bx * threads + tx) * vec
            acc = T.alloc_local((vec,), f32)
            o = T.alloc_local((vec,), dtype)
            if col < H:
                for e in T.unroll(vec):
                    acc[e] = T.float32(0)
                if mult:
                    a = T.alloc_local((mult, vec), dtype)
                    for h in T.unroll(mult):
                        for e in T.vectorized(vec):
                            a[h, e] = residual[tok, h, col + e]
                    for h in T.unroll(mult):
                        p = pre[tok, h, 0]
                        for e in T.unroll(vec):
                            acc[e] = acc[e] + p * T.cast(a[h, e], f32)
                else:
                    b = T.alloc_local((vec,), dtype)
                    for h in T.serial(m):
                        for e in T.vectorized(vec):
                            b[e] = residual[tok, h, col + e]
                        p = pre[tok, h, 0]
                        for e in T.unroll(vec):
                            acc[e] = acc[e] + p * T.cast(b[e], f32)
                for e in T.unroll(vec):
                    o[e] = T.cast(acc[e], dtype)
                for e in T.vectorized(vec):
                    out[tok, col + e] = o[e]

    return mhc_pre_apply_mix


def post_kernel(dtype: str, mult: int):
    import tilelang.language as T

    Tn, H = T.dynamic("T"), T.dynamic("H")
    m, vec, threads, f32 = mult, VEC, THREADS, "float32"

    @T.prim_func
    def mhc_post(x: T.Tensor((Tn, H), dtype), residual: T.Tensor((Tn, m, H), dtype),
                 post: T.Tensor((Tn, m, 1), f32), comb: T.Tensor((Tn, m, m), f32),
                 out: T.Tensor((Tn, m, H), dtype)):
        with T.Kernel(Tn, T.ceildiv(H, threads * vec), threads=threads) as (tok, bx):
            T.assume(H % vec == 0)
            tx = T.get_thread_binding()
            col = (bx * threads + tx) * vec
            xa = T.alloc_local((vec,), dtype)
            ra = T.alloc_local((m, vec), dtype)
            acc = T.alloc_local((m, vec), f32)
            o = T.alloc_local((vec,), dtype)
            if col < H:
                for e in T.vectorized(vec):
                    xa[e] = x[tok, col + e]
                for h in T.unroll(m):
                    for e in T.vectorized(vec):
                        ra[h, e] = residual[tok, h, col + e]
                for n in T.unroll(m):
                    p = post[tok, n, 0]
                    for e in T.unroll(vec):
                        acc[n, e] = p * T.cast(xa[e], f32)
                for h in T.unroll(m):
                    for n in T.unroll(m):
                        c = comb[tok, h, n]
                        for e in T.unroll(vec):
                            acc[n, e] = acc[n, e] + c * T.cast(ra[h, e], f32)
                for n in T.unroll(m):
                    for e in T.unroll(vec):
                        o[e] = T.cast(acc[n, e], dtype)
                    for e in T.vectorized(vec):
                        out[tok, n, col + e] = o[e]

    return mhc_post


ROW = ("T", "m", "H")
SPECS = (
    OpSpec(
        name="tkreg.expand_to_mhc",
        doc="x[T, H] -> out[T, mhc_mult, H]: each token's row copied to its mhc_mult hyper-connection rows",
        tensors=(Tensor("x", ("T", "H"), dtypes=DTYPES),
                 Tensor("out", ("T", "mhc_mult", "H"), dtype_of="x", role="output")),
        scalars=(Scalar("mhc_mult", "int32"),),
        factory=expand_kernel,
        variants=tuple(Variant({"dtype": d}, rule="H % 8 == 0 and mhc_mult >= 1") for d in DTYPES),
        reference="tkreg.reference.mhc:expand_to_mhc", backward="tkreg.ops.mhc:ExpandGrad",
    ),
    OpSpec(
        name="tkreg.mhc_pre_apply_mix",
        doc="residual[T, m, H], pre[T, m, 1] fp32 -> out[T, H] = sum over m of pre * residual (fp32 math)",
        tensors=(Tensor("residual", ROW, dtypes=DTYPES),
                 Tensor("pre", ("T", "m", 1), dtype="float32"),
                 Tensor("out", ("T", "H"), dtype_of="residual", role="output")),
        factory=apply_mix_kernel,
        variants=tuple(Variant({"dtype": d, "mult": k}, rule="H % 8 == 0") for d in DTYPES for k in MULTS)
        + tuple(Variant({"dtype": d, "mult": 0}, rule="H % 8 == 0 and m >= 1", priority=-1) for d in DTYPES),
        reference="tkreg.reference.mhc:mhc_pre_apply_mix", backward="tkreg.ops.mhc:MhcPreApplyMixGrad",
    ),
    OpSpec(
        name="tkreg.mhc_post",
        doc="x[T, H], residual[T, m, H], post[T, m, 1], comb[T, m, m] (fp32) -> out[T, m, H] = "
            "x * post + einsum('mn,mc->nc', comb, residual) (fp32 math)",
        tensors=(Tensor("x", ("T", "H"), dtypes=DTYPES),
                 Tensor("residual", ROW, dtype_of="x"),
                 Tensor("post", ("T", "m", 1), dtype="float32"),
                 Tensor("comb", ("T", "m", "m"), dtype="float32"),
                 Tensor("out", ROW, dtype_of="x", role="output")),
        factory=post_kernel,
        variants=tuple(Variant({"dtype": d, "mult": k}, rule="H % 8 == 0") for d in DTYPES for k in MULTS),
        reference="tkreg.reference.mhc:mhc_post", backward="tkreg.ops.mhc:MhcPostGrad",
    ),
)
