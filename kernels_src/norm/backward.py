"""rms_norm_backward: dx = r*g - (r^3/N) * sum(g*x) * x with g = dy*w, r = rsqrt(mean(x^2) + eps);
dw = sum over rows of dy*x*r.

Two kernels a call: ROWS rows a CTA write dx and a partial dw row (fp32 scratch), then one thread a
column sums the partial rows (deterministic: no atomics).  The HIDDEN sizes have static-N kernels
(T.Parallel); every other N % 8 == 0 runs the any-N kernel: a CTA's rows one at a time in two
passes of 16-byte slots (the sums of x^2 and g*x, then x, dy and w re-read from L1/L2 for dx),
each thread adding dy*x*r into its own columns of the CTA's partial dw row.
"""
from kernels_src.common import DTYPES
from tkreg.spec import OpSpec, Tensor, Variant

from .forward import EPS, HIDDEN, VEC, _threads

ROWS = 16   # rows a CTA: fewer partial dw rows to reduce


def _backward_func(T, M, N, dtype, row_blocks, guard: bool):
    """rms_norm_backward's signature around its two kernels: `row_blocks(dy, x, weight, dx, partial,
    eps)`, the first (dx and a partial dw row a CTA), then one thread a column summing the partial
    rows (`guard`: columns past a symbolic N)."""
    rows = ROWS

    @T.macro
    def dw_sum(partial, dw):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bn:
            tx = T.get_thread_binding(0)
            s = T.alloc_local((1,), "float32")
            if not guard or bn * 128 + tx < N:
                s[0] = 0.0
                for b in T.serial(T.ceildiv(M, rows)):
                    s[0] += partial[b, bn * 128 + tx]
                dw[bn * 128 + tx] = T.cast(s[0], dtype)

    @T.prim_func
    def rms_norm_backward(dy: T.Tensor((M, N), dtype), x: T.Tensor((M, N), dtype),
                          weight: T.Tensor((N,), dtype), dx: T.Tensor((M, N), dtype),
                          dw: T.Tensor((N,), dtype), partial: T.Tensor((T.ceildiv(M, rows), N), "float32"),
                          eps: T.float32):
        row_blocks(dy, x, weight, dx, partial, eps)
        dw_sum(partial, dw)

    return rms_norm_backward


def rms_norm_backward_kernel(N: int, dtype: str, threads: int):
    """N > 0: the static-N kernel; N = 0: any N % 8 == 0 (`_any_n_backward`)."""
    import tilelang.language as T

    if N == 0:
        return _any_n_backward(dtype, threads)
    M = T.dynamic("M")
    rows = ROWS
    @T.macro
    def row_blocks(dy, x, weight, dx, partial, eps):
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

    return _backward_func(T, M, N, dtype, row_blocks, guard=False)


def _any_n_backward(dtype: str, threads: int):
    """rms_norm_backward for a symbolic N (N % 8 == 0): a CTA's ROWS rows one at a time, each in
    two passes of 16-byte slots -- sums of x^2 and g*x, then x, dy and w re-read (from L1/L2) for
    dx -- while each thread adds dy*x*r into its own columns of the CTA's partial dw row in global
    memory (no other thread touches them, so no atomics; the row stays in L2)."""
    import tilelang.language as T

    M, N = T.dynamic("M"), T.dynamic("N")
    vec, warps, f32, rows = VEC, threads // 32, "float32", ROWS
    chunk = threads * vec
    @T.macro
    def load(dy, x, weight, xs, gs, ws, row, col):     # one 16-byte slot of x, dy and the weight
        for v in T.vectorized(vec):
            xs[v] = x[row, col + v]
        for v in T.vectorized(vec):
            gs[v] = dy[row, col + v]
        for v in T.vectorized(vec):
            ws[v] = weight[col + v]

    @T.macro
    def row_blocks(dy, x, weight, dx, partial, eps):
        with T.Kernel(T.ceildiv(M, rows), threads=threads) as blk:
            T.assume(N % vec == 0)
            tx = T.get_thread_binding()
            red = T.alloc_shared((2, 2, warps), f32)     # double-buffered by row parity: one barrier a row
            xs = T.alloc_local((vec,), dtype)
            gs = T.alloc_local((vec,), dtype)
            ws = T.alloc_local((vec,), dtype)
            acc = T.alloc_local((2,), f32)
            tot = T.alloc_local((2,), f32)
            for col0 in T.serial(T.ceildiv(N, chunk)):   # partial dw starts at zero (rows past M add nothing)
                if col0 * chunk + tx * vec < N:
                    for v in T.vectorized(vec):
                        partial[blk, col0 * chunk + tx * vec + v] = T.float32(0)
            for rr in T.serial(rows):
                row = blk * rows + rr
                if row < M:                               # the same for every thread of the CTA
                    acc[0] = T.float32(0)
                    acc[1] = T.float32(0)
                    for it in T.serial(T.ceildiv(N, chunk)):
                        if it * chunk + tx * vec < N:
                            load(dy, x, weight, xs, gs, ws, row, it * chunk + tx * vec)
                            for v in T.unroll(vec):
                                acc[0] = acc[0] + T.cast(xs[v], f32) * T.cast(xs[v], f32)
                                acc[1] = acc[1] + T.cast(gs[v], f32) * T.cast(ws[v], f32) * T.cast(xs[v], f32)
                    for j in T.unroll(2):
                        for k in T.unroll(5):
                            acc[j] = acc[j] + T.shfl_xor(acc[j], 16 >> k)
                        if tx % 32 == 0:
                            red[rr % 2, j, tx // 32] = acc[j]
                    T.sync_threads()
                    for j in T.unroll(2):
                        tot[j] = T.float32(0)
                        for i in T.unroll(warps):
                            tot[j] = tot[j] + red[rr % 2, j, i]
                    r = T.rsqrt(tot[0] / T.cast(N, f32) + eps)
                    c = r * r * r * tot[1] / T.cast(N, f32)
                    for it in T.serial(T.ceildiv(N, chunk)):
                        if it * chunk + tx * vec < N:
                            load(dy, x, weight, xs, gs, ws, row, it * chunk + tx * vec)
                            for v in T.unroll(vec):
                                partial[blk, it * chunk + tx * vec + v] += T.cast(gs[v], f32) * T.cast(xs[v], f32) * r
                            for v in T.unroll(vec):
                                xs[v] = T.cast(r * (T.cast(gs[v], f32) * T.cast(ws[v], f32)) - c * T.cast(xs[v], f32), dtype)
                            for v in T.vectorized(vec):
                                dx[row, it * chunk + tx * vec + v] = xs[v]

    return _backward_func(T, M, N, dtype, row_blocks, guard=True)


# The any-N kernel on 256 threads: 0.30-0.43x a same-size copy (128 and 512 threads no better overall).
ANY_N_THREADS = 256

SPECS = (
    OpSpec(
        name="tkreg.rms_norm_backward",
        doc="Gradients of rms_norm: (dy, x, weight) -> (dx, dweight)",
        tensors=(Tensor("dy", ("M", "N"), dtypes=DTYPES),
                 Tensor("x", ("M", "N"), dtype_of="dy"),
                 Tensor("weight", ("N",), dtype_of="dy"),
                 Tensor("dx", ("M", "N"), dtype_of="dy", role="output"),
                 Tensor("dw", ("N",), dtype_of="dy", role="output"),
                 Tensor("partial", (f"(M + {ROWS - 1}) // {ROWS}", "N"), dtype="float32", role="scratch")),
        scalars=(EPS,), factory=rms_norm_backward_kernel,
        variants=tuple(Variant({"N": n, "dtype": d, "threads": _threads(n)}) for n in HIDDEN for d in DTYPES)
        + tuple(Variant({"N": 0, "dtype": d, "threads": ANY_N_THREADS}, rule="N % 8 == 0", priority=-2) for d in DTYPES),
        reference="tkreg.reference.norm:rms_norm_backward",
    ),
)
