"""The plugin's kernels: TileLang factories and one OpSpec per op (`SPECS`).

Built at wheel-build time by `python -m build_tools build --src tkreg_example/kernels.py --namespace example`
(CMakeLists.txt runs it through `tkreg_add_pack`); never imported at run time, and tilelang is
imported inside the factories only, so this module imports without it.  Token counts M and
widths N are run-time sizes; one variant per dtype serves every shape.  A CTA covers a
BLOCK_M x BLOCK_N tile in fp32 and rounds once to the input's dtype.
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

DTYPES = ("bfloat16", "float16")
BLOCK_M, BLOCK_N, THREADS = 4, 256, 128


def gelu_tanh_and_mul_kernel(dtype: str):
    import tilelang.language as T

    M, N = T.dynamic("M"), T.dynamic("N")

    # `out` first: the kernel binds N from its shape before it reads x's `2 * N`.
    @T.prim_func
    def gelu_tanh_and_mul(out: T.Tensor((M, N), dtype), x: T.Tensor((M, 2 * N), dtype)):
        with T.Kernel(T.ceildiv(M, BLOCK_M), T.ceildiv(N, BLOCK_N), threads=THREADS) as (bx, by):
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                r, c = bx * BLOCK_M + i, by * BLOCK_N + j
                if r < M and c < N:
                    g = T.cast(x[r, c], "float32")
                    inner = 0.7978845608028654 * (g + 0.044715 * g * g * g)
                    out[r, c] = T.cast(0.5 * g * (1.0 + T.tanh(inner)) * T.cast(x[r, N + c], "float32"), dtype)

    return gelu_tanh_and_mul


def axpy_kernel(dtype: str):
    import tilelang.language as T

    M, N = T.dynamic("M"), T.dynamic("N")

    @T.prim_func
    def axpy(x: T.Tensor((M, N), dtype), y: T.Tensor((M, N), dtype), alpha: T.float32):
        with T.Kernel(T.ceildiv(M, BLOCK_M), T.ceildiv(N, BLOCK_N), threads=THREADS) as (bx, by):
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                r, c = bx * BLOCK_M + i, by * BLOCK_N + j
                if r < M and c < N:
                    x[r, c] = T.cast(T.cast(x[r, c], "float32") + alpha * T.cast(y[r, c], "float32"), dtype)

    return axpy


SPECS = (
    OpSpec(
        name="example.gelu_tanh_and_mul",
        doc="gelu_tanh(x[:, :N]) * x[:, N:] for x[M, 2 * N] (bf16/fp16), fp32 math",
        tensors=(Tensor("x", ("M", "2 * N"), dtypes=DTYPES),
                 Tensor("out", ("M", "N"), dtype_of="x", role="output")),
        factory=gelu_tanh_and_mul_kernel,
        variants=tuple(Variant({"dtype": d}) for d in DTYPES),
        reference="tkreg_example.reference:gelu_tanh_and_mul",
    ),
    OpSpec(
        name="example.axpy",
        doc="in place: x += alpha * y for x, y[M, N] (bf16/fp16), fp32 math",
        tensors=(Tensor("x", ("M", "N"), dtypes=DTYPES, role="inplace"),
                 Tensor("y", ("M", "N"), dtype_of="x")),
        scalars=(Scalar("alpha", "float32", 1.0),),
        factory=axpy_kernel,
        variants=tuple(Variant({"dtype": d}) for d in DTYPES),
        reference="tkreg_example.reference:axpy",
    ),
)
