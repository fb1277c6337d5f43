"""A synthetic op that uses every launch-format feature at once, for the format's own tests.

`t.probe(x, bias=None, nblk) -> out`: out = 2 * x + colsum(x) (+ bias), where
- x is a strided view (`strides=("sx", 1)`: a slice of a wider buffer, read without a copy) and
  the second kernel reads it through a TMA descriptor built from that stride;
- colsum goes through a zero-filled fp32 scratch `acc[splits, N]`, `splits` a variant parameter;
  the first kernel adds rows into it with atomics, so unzeroed scratch gives a wrong answer;
- the first kernel's grid is `min(nblk, SM_COUNT)`: an int scalar and the device's SM count;
- `bias` is optional: the "with bias" variant (rule `has_bias`) takes it, the other does not
  take it at all (a variant using a subset of the op's tensors), and a rule tests the scalar.

Built by tests/build_tools/test_format_probe.py (which also checks that the committed pack in
tests/format_probe/pack is what this source builds to) and launched by
tests/tkreg/test_format_probe.py on a GPU, from the committed pack (no tilelang there).
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

BLOCK_M, BLOCK_N = 64, 64


def probe_kernel(with_bias: bool, splits: int, dtype: str = "bfloat16", arch: str = "sm_90a"):
    import tilelang.language as T

    M, N, sx = T.dynamic("M"), T.dynamic("N"), T.dynamic("sx")

    @T.macro
    def body(x, bias, out, acc, nblk, SM_COUNT):
        with T.Kernel(T.min(nblk, SM_COUNT), threads=128) as bx:
            grid = T.min(nblk, SM_COUNT)
            for r in T.serial(T.ceildiv(M - bx, grid)):
                for j in T.Parallel(N):
                    T.atomic_add(acc[(bx + r * grid) % splits, j], T.cast(x[bx + r * grid, j], "float32"))
        with T.Kernel(T.ceildiv(M, BLOCK_M), threads=128) as bm:
            xs = T.alloc_shared((BLOCK_M, BLOCK_N), dtype)
            for nb in T.Pipelined(T.ceildiv(N, BLOCK_N), num_stages=2):
                T.copy(x[bm * BLOCK_M, nb * BLOCK_N], xs)
                for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                    c = nb * BLOCK_N + j
                    if bm * BLOCK_M + i < M and c < N:
                        v = T.alloc_var("float32")
                        v = T.cast(xs[i, j], "float32") * 2
                        for s in T.serial(splits):
                            v += acc[s, c]
                        if with_bias:
                            v += T.cast(bias[c], "float32")
                        out[bm * BLOCK_M + i, c] = T.cast(v, dtype)

    X = T.StridedTensor((M, N), (sx, 1), dtype)
    if with_bias:
        @T.prim_func
        def probe(x: X, bias: T.Tensor((N,), dtype), out: T.Tensor((M, N), dtype),
                  acc: T.Tensor((splits, N), "float32"), nblk: T.int32, SM_COUNT: T.int32):
            body(x, bias, out, acc, nblk, SM_COUNT)
    else:
        @T.prim_func
        def probe(x: X, out: T.Tensor((M, N), dtype), acc: T.Tensor((splits, N), "float32"),
                  nblk: T.int32, SM_COUNT: T.int32):
            body(x, None, out, acc, nblk, SM_COUNT)
    return probe


SPECS = (OpSpec(
    name="t.probe",
    doc="out = 2 * x + colsum(x) (+ bias): every launch-format feature in one op",
    tensors=(Tensor("x", ("M", "N"), dtypes=("bfloat16",), strides=("sx", 1)),
             Tensor("bias", ("N",), dtype_of="x", optional=True),
             Tensor("out", ("M", "N"), dtype_of="x", role="output"),
             Tensor("acc", ("splits", "N"), dtype="float32", role="scratch", zero=True)),
    scalars=(Scalar("nblk", "int32", 8),),
    factory=probe_kernel,
    variants=(Variant({"with_bias": True, "splits": 4}, rule="has_bias and nblk >= 1"),
              Variant({"with_bias": False, "splits": 2}, rule="not has_bias and nblk >= 1")),
    archs=("sm_90a",),
),)
