"""RMSNorm family: rms_norm, fused_add_rms_norm (vLLM's in-place residual form), rms_norm_backward.

y = x * rsqrt(mean(x^2) + eps) * w, accumulated in fp32 and rounded once to x's dtype.  One CTA
per token row with the hidden size N baked in, so a row lives in registers and is read once;
tokens M are symbolic.  Served hidden sizes: HIDDEN below (others raise NoKernelError, or run the
torch reference with TKREG_FALLBACK=reference).
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

HIDDEN = (1024, 2048, 4096, 5120, 7168, 8192)
DTYPES = ("bfloat16", "float16")
BWD_ROWS = 16   # rows per CTA in the backward: fewer partial dw rows to reduce


def _threads(n: int) -> int:
    return 256 if n >= 4096 else 128


def rms_norm_kernel(N: int, dtype: str, threads: int = 128):
    import tilelang.language as T

    M = T.dynamic("M")

    @T.prim_func
    def rms_norm(x: T.Tensor((M, N), dtype), weight: T.Tensor((N,), dtype),
                 out: T.Tensor((M, N), dtype), eps: T.float32):
        with T.Kernel(M, threads=threads) as row:
            xf = T.alloc_fragment((N,), "float32")
            sq = T.alloc_fragment((N,), "float32")
            total = T.alloc_fragment((1,), "float32")
            for j in T.Parallel(N):
                xf[j] = T.cast(x[row, j], "float32")
                sq[j] = xf[j] * xf[j]
            T.reduce_sum(sq, total, dim=0)
            r = T.rsqrt(total[0] / N + eps)
            for j in T.Parallel(N):
                out[row, j] = T.cast(xf[j] * r * T.cast(weight[j], "float32"), dtype)

    return rms_norm


def fused_add_rms_norm_kernel(N: int, dtype: str, threads: int = 128):
    """residual <- x + residual (rounded); x <- rms_norm(residual) * w: both in place."""
    import tilelang.language as T

    M = T.dynamic("M")

    @T.prim_func
    def fused_add_rms_norm(x: T.Tensor((M, N), dtype), residual: T.Tensor((M, N), dtype),
                           weight: T.Tensor((N,), dtype), eps: T.float32):
        with T.Kernel(M, threads=threads) as row:
            z = T.alloc_fragment((N,), "float32")
            sq = T.alloc_fragment((N,), "float32")
            total = T.alloc_fragment((1,), "float32")
            for j in T.Parallel(N):
                # round the sum first: x becomes exactly rms_norm(new residual)
                z[j] = T.cast(T.cast(T.cast(x[row, j], "float32") + T.cast(residual[row, j], "float32"), dtype),
                              "float32")
                sq[j] = z[j] * z[j]
            T.reduce_sum(sq, total, dim=0)
            r = T.rsqrt(total[0] / N + eps)
            for j in T.Parallel(N):
                residual[row, j] = T.cast(z[j], dtype)
                x[row, j] = T.cast(z[j] * r * T.cast(weight[j], "float32"), dtype)

    return fused_add_rms_norm


def rms_norm_backward_kernel(N: int, dtype: str, threads: int = 128):
    """dx = r*g - (r^3/N) * sum(g*x) * x with g = dy*w; dw = sum_rows dy*x*r.

    Two kernels: BWD_ROWS rows per CTA write dx and a partial dw row (fp32 scratch), then one
    thread per column sums the partial rows.
    """
    import tilelang.language as T

    M = T.dynamic("M")
    rows = BWD_ROWS

    @T.prim_func
    def rms_norm_backward(dy: T.Tensor((M, N), dtype), x: T.Tensor((M, N), dtype),
                          weight: T.Tensor((N,), dtype), dx: T.Tensor((M, N), dtype),
                          dw: T.Tensor((N,), dtype), partial: T.Tensor((T.ceildiv(M, rows), N), "float32"),
                          eps: T.float32):
        with T.Kernel(T.ceildiv(M, rows), threads=threads) as blk:
            acc = T.alloc_fragment((N,), "float32")
            xf = T.alloc_fragment((N,), "float32")
            gf = T.alloc_fragment((N,), "float32")
            sq = T.alloc_fragment((N,), "float32")
            gx = T.alloc_fragment((N,), "float32")
            ss = T.alloc_fragment((1,), "float32")
            sg = T.alloc_fragment((1,), "float32")
            T.clear(acc)
            for rr in T.serial(rows):
                row = blk * rows + rr
                if row < M:
                    for j in T.Parallel(N):
                        xf[j] = T.cast(x[row, j], "float32")
                        gf[j] = T.cast(dy[row, j], "float32") * T.cast(weight[j], "float32")
                        sq[j] = xf[j] * xf[j]
                        gx[j] = gf[j] * xf[j]
                    T.reduce_sum(sq, ss, dim=0)
                    T.reduce_sum(gx, sg, dim=0)
                    r = T.rsqrt(ss[0] / N + eps)
                    for j in T.Parallel(N):
                        dx[row, j] = T.cast(r * gf[j] - r * r * r * sg[0] / N * xf[j], dtype)
                        acc[j] += T.cast(dy[row, j], "float32") * xf[j] * r
            for j in T.Parallel(N):
                partial[blk, j] = acc[j]
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bn:
            tx = T.get_thread_binding(0)
            s = T.alloc_local((1,), "float32")
            s[0] = 0.0
            for b in T.serial(T.ceildiv(M, rows)):
                s[0] += partial[b, bn * 128 + tx]
            dw[bn * 128 + tx] = T.cast(s[0], dtype)

    return rms_norm_backward


def _variants():
    return tuple(Variant({"N": n, "dtype": d, "threads": _threads(n)}) for n in HIDDEN for d in DTYPES)


_EPS = Scalar("eps", "float32", 1e-6)
SPECS = (
    OpSpec(
        name="tkreg.rms_norm",
        doc="RMSNorm over the last dim: x[M, N], weight[N] -> out[M, N]",
        tensors=(Tensor("x", ("M", "N"), dtypes=DTYPES),
                 Tensor("weight", ("N",), dtype_of="x"),
                 Tensor("out", ("M", "N"), dtype_of="x", role="output")),
        scalars=(_EPS,), factory=rms_norm_kernel, variants=_variants(),
        reference="tkreg.reference.norm:rms_norm",
    ),
    OpSpec(
        name="tkreg.fused_add_rms_norm",
        doc="In place: residual += x; x = rms_norm(residual) * weight (vLLM's fused_add_rms_norm)",
        tensors=(Tensor("x", ("M", "N"), dtypes=DTYPES, role="inplace"),
                 Tensor("residual", ("M", "N"), dtype_of="x", role="inplace"),
                 Tensor("weight", ("N",), dtype_of="x")),
        scalars=(_EPS,), factory=fused_add_rms_norm_kernel, variants=_variants(),
        reference="tkreg.reference.norm:fused_add_rms_norm",
    ),
    OpSpec(
        name="tkreg.rms_norm_backward",
        doc="Gradients of rms_norm: (dy, x, weight) -> (dx, dweight)",
        tensors=(Tensor("dy", ("M", "N"), dtypes=DTYPES),
                 Tensor("x", ("M", "N"), dtype_of="dy"),
                 Tensor("weight", ("N",), dtype_of="dy"),
                 Tensor("dx", ("M", "N"), dtype_of="dy", role="output"),
                 Tensor("dw", ("N",), dtype_of="dy", role="output"),
                 Tensor("partial", (f"(M + {BWD_ROWS - 1}) // {BWD_ROWS}", "N"), dtype="float32", role="scratch")),
        scalars=(_EPS,), factory=rms_norm_backward_kernel, variants=_variants(),
        reference="tkreg.reference.norm:rms_norm_backward",
    ),
)
