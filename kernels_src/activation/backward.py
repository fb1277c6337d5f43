"""silu_and_mul_backward: the gradient of silu_and_mul, in forward.py's layout (tokens on grid x,
column blocks on y, every load of a thread's tokens issued before any math)."""
from kernels_src.common import DTYPES
from tkreg.spec import OpSpec, Tensor, Variant

from .forward import load_halves

ROWS_PER_THREAD, THREADS = 4, 128


def silu_and_mul_backward_kernel(dtype: str, vector_width: int):
    """dx = [dy * u * s * (1 + g * (1 - s)) | dy * g * s] with s = sigmoid(g), fp32, rounded once.

    Each thread loads ROWS_PER_THREAD slices of g, u and dy, then stores both halves of dx.
    """
    import tilelang.language as T

    rows, threads, vec = ROWS_PER_THREAD, THREADS, vector_width
    Tn, N = T.dynamic("T"), T.dynamic("N")
    I = N // 2  # noqa: E741
    f32 = "float32"
    load = load_halves(T, rows, vec, Tn, I)

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


SPECS = (
    OpSpec(
        name="tkreg.silu_and_mul_backward",
        doc="Gradient of silu_and_mul: (dy[T, N/2], x[T, N]) -> dx[T, N]",
        tensors=(Tensor("dy", ("T", "N // 2"), dtypes=DTYPES),
                 Tensor("x", ("T", "N"), dtype_of="dy"),
                 Tensor("dx", ("T", "N"), dtype_of="dy", role="output")),
        factory=silu_and_mul_backward_kernel,
        variants=tuple(v for d in DTYPES for v in (
            Variant({"dtype": d, "vector_width": 8}, rule="N % 16 == 0", priority=10),
            Variant({"dtype": d, "vector_width": 1}, rule="N % 2 == 0"))),
        reference="tkreg.reference.activation:silu_and_mul_backward",
    ),
)
