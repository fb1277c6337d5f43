"""The example plugin's kernels: `example.scale_add(x, y, alpha) -> out = x * alpha + y`.

Built at wheel-build time by `python -m build_tools build --src tkreg_example/kernels.py
--namespace example` (CMakeLists.txt runs it through `tkreg_add_pack`); never imported at run
time.  Tokens M and hidden size N are both symbolic, so one variant per dtype serves every
shape: a CTA covers a BLOCK_M x BLOCK_N tile, in fp32, rounded once to x's dtype.
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

DTYPES = ("bfloat16", "float16")


def scale_add_kernel(dtype: str, block_M: int = 4, block_N: int = 256, threads: int = 128):
    import tilelang.language as T

    M, N = T.dynamic("M"), T.dynamic("N")

    @T.prim_func
    def scale_add(x: T.Tensor((M, N), dtype), y: T.Tensor((M, N), dtype),
                  out: T.Tensor((M, N), dtype), alpha: T.float32):
        # Rows on grid x (up to 2^31 - 1 blocks), columns on grid y (up to 65535 * block_N).
        with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                r, c = bx * block_M + i, by * block_N + j
                if r < M and c < N:
                    out[r, c] = T.cast(T.cast(x[r, c], "float32") * alpha
                                       + T.cast(y[r, c], "float32"), dtype)

    return scale_add


SPECS = (
    OpSpec(
        name="example.scale_add",
        doc="out = x * alpha + y for x, y[M, N] (bf16/fp16), computed in fp32",
        tensors=(Tensor("x", ("M", "N"), dtypes=DTYPES),
                 Tensor("y", ("M", "N"), dtype_of="x"),
                 Tensor("out", ("M", "N"), dtype_of="x", role="output")),
        scalars=(Scalar("alpha", "float32", 1.0),),
        factory=scale_add_kernel,
        variants=tuple(Variant({"dtype": d}) for d in DTYPES),
        reference="tkreg_example.reference:scale_add",
    ),
)
