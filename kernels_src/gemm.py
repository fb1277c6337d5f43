"""bf16 GEMM: out[M, N] = a[M, K] @ b[N, K]^T, fp32 accumulation; M, N, K all symbolic.

TMA loads (zero-filled out of bounds, so any M, N, K work), a pipelined K loop and a swizzled
block order, after tilelang's Hopper GEMM example.  TMA needs 16-byte row strides: K and N must
be multiples of 8.  Decode sizes (M <= 64) get a smaller tile.
"""
from tkreg.spec import OpSpec, Tensor, Variant


def gemm_kernel(block_M: int, block_N: int, block_K: int, stages: int, threads: int,
                dtype: str = "bfloat16"):
    import tilelang.language as T

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")

    @T.prim_func
    def gemm(a: T.Tensor((M, K), dtype), b: T.Tensor((N, K), dtype), out: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            a_s = T.alloc_shared((block_M, block_K), dtype)
            b_s = T.alloc_shared((block_N, block_K), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            c_s = T.alloc_shared((block_M, block_N), dtype)
            T.use_swizzle(panel_size=10)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(a[by * block_M, k * block_K], a_s)
                T.copy(b[bx * block_N, k * block_K], b_s)
                T.gemm(a_s, b_s, acc, transpose_B=True)
            T.copy(acc, c_s)
            T.copy(c_s, out[by * block_M, bx * block_N])

    return gemm


SPECS = (
    OpSpec(
        name="tkreg.gemm",
        doc="out[M, N] = a[M, K] @ b[N, K]^T (a Linear layer's weight layout)",
        tensors=(Tensor("a", ("M", "K"), dtypes=("bfloat16",)),
                 Tensor("b", ("N", "K"), dtype_of="a"),
                 Tensor("out", ("M", "N"), dtype_of="a", role="output")),
        factory=gemm_kernel,
        variants=(
            Variant(dict(block_M=128, block_N=256, block_K=64, stages=3, threads=256)),
            Variant(dict(block_M=64, block_N=128, block_K=64, stages=4, threads=128),
                    rule="M <= 64", priority=10),
        ),
        reference="tkreg.reference.gemm:gemm",
    ),
)
