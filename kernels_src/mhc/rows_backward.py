"""Backward of the mHC row ops: mhc_pre_apply_mix_backward, mhc_post_backward, expand_to_mhc_backward.

- mhc_pre_apply_mix_backward(grad_out[T, H], residual[T, m, H], pre[T, m, 1]) -> grad_residual =
  pre * grad_out [T, m, H] bf16, grad_pre[t, h] = sum over c of grad_out * residual[t, h] fp32.
- mhc_post_backward(grad_out[T, m, H], x[T, H], residual[T, m, H], post[T, m, 1], comb[T, m, m]) ->
  grad_x[c] = sum over n of post[n] g[n, c] (bf16), grad_residual[h, c] = sum over n of comb[h, n]
  g[n, c] (bf16), grad_post[n] = sum over c of x[c] g[n, c], grad_comb[h, n] = sum over c of
  residual[h, c] g[n, c] (fp32).
- expand_to_mhc_backward(grad_out[T, m, H]) -> grad_x[T, H] = the sum over m: rows.py's grid, any m.

One CTA a token walks its row in 16-byte slots (every load of a step before its math), writes the
row gradients as it goes and keeps its share of the per-token sums in registers; one block
reduction (shuffles, then the warps' partials in order through shared memory) ends it: no
atomics, the same sums every run.  m baked in (MULTS); H run-time, H % 8 == 0.
"""
from tkreg.spec import OpSpec, Tensor, Variant

from .rows import DTYPES, MULTS, VEC

THREADS = 256
F32 = "float32"


def block_sums(count: int, threads: int):
    """A macro: acc[count] of every thread summed over the CTA into tot[count] (shared), in a fixed
    order (shuffles within warps, then the warps' sums in order by threads 0 .. count - 1)."""
    import tilelang.language as T

    warps = threads // 32

    @T.macro
    def run(acc, red, tot):
        tx = T.get_thread_binding()
        for j in T.unroll(count):
            for s in T.unroll(5):
                acc[j] = acc[j] + T.shfl_xor(acc[j], 16 >> s)
            if tx % 32 == 0:
                red[j, tx // 32] = acc[j]
        T.sync_threads()
        if tx < count:
            t = T.alloc_var(F32)
            t = T.float32(0)
            for w in T.unroll(warps):
                t = t + red[tx, w]
            tot[tx] = t

    return run


def apply_mix_backward_kernel(dtype: str, mult: int):
    import tilelang.language as T

    Tn, H, m, vec = T.dynamic("T"), T.dynamic("H"), mult, VEC
    chunk = THREADS * vec

    @T.prim_func
    def mhc_pre_apply_mix_backward(grad_out: T.Tensor((Tn, H), dtype), residual: T.Tensor((Tn, m, H), dtype),
                                   pre: T.Tensor((Tn, m, 1), F32), grad_residual: T.Tensor((Tn, m, H), dtype),
                                   grad_pre: T.Tensor((Tn, m, 1), F32)):
        with T.Kernel(Tn, threads=THREADS) as tok:
            T.assume(H % vec == 0)
            tx = T.get_thread_binding()
            ga = T.alloc_local((vec,), dtype)
            ra = T.alloc_local((m, vec), dtype)
            o = T.alloc_local((vec,), dtype)
            p = T.alloc_local((m,), F32)
            acc = T.alloc_local((m,), F32)
            red = T.alloc_shared((m, THREADS // 32), F32)
            tot = T.alloc_shared((m,), F32)
            for h in T.unroll(m):
                p[h] = pre[tok, h, 0]
                acc[h] = T.float32(0)
            for i in T.serial(T.ceildiv(H, chunk)):
                col = i * chunk + tx * vec
                if col < H:
                    for e in T.vectorized(vec):
                        ga[e] = grad_out[tok, col + e]
                    for h in T.unroll(m):
                        for e in T.vectorized(vec):
                            ra[h, e] = residual[tok, h, col + e]
                    for h in T.unroll(m):
                        for e in T.unroll(vec):
                            g = T.cast(ga[e], F32)
                            acc[h] = acc[h] + g * T.cast(ra[h, e], F32)
                            o[e] = T.cast(p[h] * g, dtype)
                        for e in T.vectorized(vec):
                            grad_residual[tok, h, col + e] = o[e]
            block_sums(m, THREADS)(acc, red, tot)
            if tx < m:
                grad_pre[tok, tx, 0] = tot[tx]

    return mhc_pre_apply_mix_backward


def post_backward_kernel(dtype: str, mult: int):
    import tilelang.language as T

    Tn, H, m, vec = T.dynamic("T"), T.dynamic("H"), mult, VEC
    chunk = THREADS * vec
    nsum = m + m * m                         # grad_post (m), then grad_comb (m * m, row-major)

    @T.prim_func
    def mhc_post_backward(grad_out: T.Tensor((Tn, m, H), dtype), x: T.Tensor((Tn, H), dtype),
                          residual: T.Tensor((Tn, m, H), dtype), post: T.Tensor((Tn, m, 1), F32),
                          comb: T.Tensor((Tn, m, m), F32), grad_x: T.Tensor((Tn, H), dtype),
                          grad_residual: T.Tensor((Tn, m, H), dtype), grad_post: T.Tensor((Tn, m, 1), F32),
                          grad_comb: T.Tensor((Tn, m, m), F32)):
        with T.Kernel(Tn, threads=THREADS) as tok:
            T.assume(H % vec == 0)
            tx = T.get_thread_binding()
            ga = T.alloc_local((m, vec), dtype)
            ra = T.alloc_local((m, vec), dtype)
            xa = T.alloc_local((vec,), dtype)
            o = T.alloc_local((vec,), dtype)
            f = T.alloc_local((vec,), F32)
            p = T.alloc_local((m,), F32)
            c = T.alloc_local((m, m), F32)
            acc = T.alloc_local((nsum,), F32)
            red = T.alloc_shared((nsum, THREADS // 32), F32)
            tot = T.alloc_shared((nsum,), F32)
            for n in T.unroll(m):
                p[n] = post[tok, n, 0]
                for h in T.unroll(m):
                    c[h, n] = comb[tok, h, n]
            for j in T.unroll(nsum):
                acc[j] = T.float32(0)
            for i in T.serial(T.ceildiv(H, chunk)):
                col = i * chunk + tx * vec
                if col < H:
                    for n in T.unroll(m):
                        for e in T.vectorized(vec):
                            ga[n, e] = grad_out[tok, n, col + e]
                    for e in T.vectorized(vec):
                        xa[e] = x[tok, col + e]
                    for h in T.unroll(m):
                        for e in T.vectorized(vec):
                            ra[h, e] = residual[tok, h, col + e]
                    for e in T.unroll(vec):
                        f[e] = T.float32(0)
                    for n in T.unroll(m):
                        for e in T.unroll(vec):
                            g = T.cast(ga[n, e], F32)
                            f[e] = f[e] + p[n] * g
                            acc[n] = acc[n] + T.cast(xa[e], F32) * g
                    for e in T.unroll(vec):
                        o[e] = T.cast(f[e], dtype)
                    for e in T.vectorized(vec):
                        grad_x[tok, col + e] = o[e]
                    for h in T.unroll(m):
                        for e in T.unroll(vec):
                            f[e] = T.float32(0)
                        for n in T.unroll(m):
                            for e in T.unroll(vec):
                                g = T.cast(ga[n, e], F32)
                                f[e] = f[e] + c[h, n] * g
                                acc[m + h * m + n] = acc[m + h * m + n] + T.cast(ra[h, e], F32) * g
                        for e in T.unroll(vec):
                            o[e] = T.cast(f[e], dtype)
                        for e in T.vectorized(vec):
                            grad_residual[tok, h, col + e] = o[e]
            block_sums(nsum, THREADS)(acc, red, tot)
            if tx < m:
                grad_post[tok, tx, 0] = tot[tx]
            elif tx < nsum:
                grad_comb[tok, (tx - m) // m, (tx - m) % m] = tot[tx]

    return mhc_post_backward


def expand_backward_kernel(dtype: str):
    """grad_x[t] = sum over h of grad_out[t, h] (fp32, rounded once); grid and slots as rows.py."""
    import tilelang.language as T

    Tn, H, m, vec = T.dynamic("T"), T.dynamic("H"), T.dynamic("m"), VEC
    threads = 128

    @T.prim_func
    def expand_to_mhc_backward(grad_out: T.Tensor((Tn, m, H), dtype), grad_x: T.Tensor((Tn, H), dtype)):
        with T.Kernel(Tn, T.ceildiv(H, threads * vec), threads=threads) as (tok, bx):
            T.assume(H % vec == 0)
            col = (bx * threads + T.get_thread_binding()) * vec
            a = T.alloc_local((vec,), dtype)
            acc = T.alloc_local((vec,), F32)
            if col < H:
                for e in T.unroll(vec):
                    acc[e] = T.float32(0)
                for h in T.serial(m):
                    for e in T.vectorized(vec):
                        a[e] = grad_out[tok, h, col + e]
                    for e in T.unroll(vec):
                        acc[e] = acc[e] + T.cast(a[e], F32)
                for e in T.unroll(vec):
                    a[e] = T.cast(acc[e], dtype)
                for e in T.vectorized(vec):
                    grad_x[tok, col + e] = a[e]

    return expand_to_mhc_backward


ROW = ("T", "m", "H")
SPECS = (
    OpSpec(
        name="tkreg.mhc_pre_apply_mix_backward",
        doc="Gradients of mhc_pre_apply_mix: grad_out[T, H] -> grad_residual = pre * grad_out [T, m, H], "
            "grad_pre = sum over H of grad_out * residual [T, m, 1] fp32; deterministic",
        tensors=(Tensor("grad_out", ("T", "H"), dtypes=DTYPES),
                 Tensor("residual", ROW, dtype_of="grad_out"),
                 Tensor("pre", ("T", "m", 1), dtype=F32),
                 Tensor("grad_residual", ROW, dtype_of="grad_out", role="output"),
                 Tensor("grad_pre", ("T", "m", 1), dtype=F32, role="output")),
        factory=apply_mix_backward_kernel,
        variants=tuple(Variant({"dtype": d, "mult": k}, rule="H % 8 == 0") for d in DTYPES for k in MULTS),
        reference="tkreg.reference.mhc:mhc_pre_apply_mix_backward",
    ),
    OpSpec(
        name="tkreg.mhc_post_backward",
        doc="Gradients of mhc_post: grad_out[T, m, H] -> grad_x [T, H], grad_residual [T, m, H] (bf16), "
            "grad_post [T, m, 1], grad_comb [T, m, m] (fp32); deterministic",
        tensors=(Tensor("grad_out", ROW, dtypes=DTYPES),
                 Tensor("x", ("T", "H"), dtype_of="grad_out"),
                 Tensor("residual", ROW, dtype_of="grad_out"),
                 Tensor("post", ("T", "m", 1), dtype=F32),
                 Tensor("comb", ("T", "m", "m"), dtype=F32),
                 Tensor("grad_x", ("T", "H"), dtype_of="grad_out", role="output"),
                 Tensor("grad_residual", ROW, dtype_of="grad_out", role="output"),
                 Tensor("grad_post", ("T", "m", 1), dtype=F32, role="output"),
                 Tensor("grad_comb", ("T", "m", "m"), dtype=F32, role="output")),
        factory=post_backward_kernel,
        variants=tuple(Variant({"dtype": d, "mult": k}, rule="H % 8 == 0") for d in DTYPES for k in MULTS),
        reference="tkreg.reference.mhc:mhc_post_backward",
    ),
    OpSpec(
        name="tkreg.expand_to_mhc_backward",
        doc="Gradient of expand_to_mhc: grad_out[T, m, H] -> grad_x[T, H] = the sum over m (fp32, rounded once)",
        tensors=(Tensor("grad_out", ROW, dtypes=DTYPES),
                 Tensor("grad_x", ("T", "H"), dtype_of="grad_out", role="output")),
        factory=expand_backward_kernel,
        variants=tuple(Variant({"dtype": d}, rule="H % 8 == 0 and m >= 1") for d in DTYPES),
        reference="tkreg.reference.mhc:expand_to_mhc_backward",
    ),
)
