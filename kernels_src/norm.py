"""RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w, accumulated in fp32, rounded once to x's dtype.

One CTA per token row, the hidden size N baked in (so the row lives in registers and is read
once); tokens M are symbolic.  Served hidden sizes: HIDDEN below; others raise NoKernelError
(or run the torch reference with TKREG_FALLBACK=reference).
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

HIDDEN = (1024, 2048, 4096, 5120, 7168, 8192)
DTYPES = ("bfloat16", "float16")


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


SPECS = (
    OpSpec(
        name="tkreg.rms_norm",
        doc="RMSNorm over the last dim: x[M, N], weight[N] -> out[M, N]",
        tensors=(Tensor("x", ("M", "N"), dtypes=DTYPES),
                 Tensor("weight", ("N",), dtype_of="x"),
                 Tensor("out", ("M", "N"), dtype_of="x", role="output")),
        scalars=(Scalar("eps", "float32", 1e-6),),
        factory=rms_norm_kernel,
        variants=tuple(Variant({"N": n, "dtype": d, "threads": 256 if n >= 4096 else 128})
                       for n in HIDDEN for d in DTYPES),
        reference="tkreg.reference.norm:rms_norm",
    ),
)
