"""RMSNorm family: rms_norm, fused_add_rms_norm (vLLM's in-place residual form), rms_norm_backward.

y = x * rsqrt(mean(x^2) + eps) * w, accumulated in fp32 and rounded once to x's dtype.  One CTA
per token row (two at N = 4096 forward); tokens M are symbolic.

Hidden sizes: the sizes in HIDDEN get kernels with N baked in, so a row lives in registers and is
read once (4096-7168, WPRE: the any-N resident-row code below at that fixed N, the weight loaded
with the row).  Every other N with N % 8 == 0 (2880, 3584, 6144, 12288, 16384, ...) runs the any-N
kernels (`N=0` variants, lower priority): in the RESIDENT ranges the row is loaded in 16-byte
slots into registers and read once, like the static kernels; otherwise pass 1 streams the row
summing squares and pass 2 re-reads it (from L2) and writes.  Their sum order differs from the
static kernels', so the two may differ in the last bit of a rounding.
Head-dim rows (N = 64-256, qk-norm) can run `lanes` threads a row, several rows a CTA side by side
(`Resident.lanes`; staged: docs/sweeps/r29n.py).
N % 8 != 0: NoKernelError (or the torch reference with TKREG_FALLBACK=reference).
rms_norm_backward: the HIDDEN sizes; any other N % 8 == 0 for the dtypes in BWD_ANY_N
(`_any_n_backward`; none until docs/sweeps/r29b.py has run on a GPU).
"""
from typing import NamedTuple

from tkreg.spec import OpSpec, Scalar, Tensor, Variant

HIDDEN = (1024, 2048, 4096, 5120, 7168, 8192)
DTYPES = ("bfloat16", "float16")
BWD_ROWS = 16   # rows per CTA in the backward: fewer partial dw rows to reduce


class Resident(NamedTuple):
    """An any-N range lo < N <= hi whose rows stay in registers, hi / (8 * lanes) 16-byte slots a
    thread: `threads` a CTA, the weight loaded with the row (`wpre`), `lanes` threads a row when
    fewer than `threads` (head-dim rows: threads / lanes rows side by side), `rows` rows a thread."""
    lo: int
    hi: int
    threads: int
    wpre: int = 0
    dtypes: tuple = DTYPES
    lanes: int = 0
    rows: int = 1


# Any-N kernels: rows of lo < N <= hi (`Resident`) stay in registers; other N use the two-pass
# kernel.  8192-16384: 8 slots (56-82 registers).  2048-4096 (2880, 3584, ...): 4 slots with the weight loaded beside the row,
# against the two-pass kernel 0.85-0.93 -> 1.00-1.09 of a same-size copy (rms_norm 16384 x 3584
# 1.12 -> 1.20x torch.compile), fused_add 0.88-0.99 -> 0.98-1.05 (docs/sweeps/r28n.py; sized for
# 16384 columns it read 75% of copy at 3584 against the two-pass kernel's 87%).  bf16 only for now:
# those cubins are byte for byte the sweep's, which passed its checks on the H200; fp16 keeps the
# two-pass kernel until its cubins have run on a GPU.
RESIDENT = (Resident(2048, 4096, 128, wpre=1, dtypes=("bfloat16",)), Resident(8192, 16384, 256))
# dtypes whose rms_norm_backward gets the any-N kernel (`_any_n_backward`) for N outside HIDDEN:
# none until it has run on a GPU (docs/sweeps/r29b.py); those N raise NoKernelError meanwhile.
BWD_ANY_N: tuple = ()
# Forward hidden sizes on the resident-row kernel (8 bf16 per 16-byte slot, 256 threads) with the
# weight loaded with the row instead of after the row's reduction; the T.Parallel kernels (8-byte
# accesses, the weight read after the barrier) measured 3-14% slower at 1024-4096 tokens and within
# 1% at 16384 (docs/sweeps/r23n.py).
WPRE = (4096, 5120, 7168)
# N = 4096 forward: two rows a 128-thread CTA (both rows' loads first, one barrier): rms_norm +3-11%
# at 1024-4096 tokens (4096 x 4096 1.135 -> 1.187x torch.compile), fused_add +5% at 1024 tokens and
# equal above; at N = 7168 it lost 1-3% (docs/sweeps/r24n.py)
TWO_ROWS = (4096,)


def _threads(n: int) -> int:
    return 256 if n >= 4096 else 128


def _any_n_kernel(dtype: str, threads: int, fused: bool, max_n: int = 0, unroll: int = 2, wpre: int = 0, n: int = 0,
                  rows: int = 1, lanes: int = 0):
    """rms_norm / fused_add_rms_norm for a symbolic N (N % 8 == 0), or for N = n when n > 0; one
    CTA per `rows` rows.

    max_n > 0: the row stays in registers (max_n / (lanes * 8) 16-byte slots per thread), read
    once.  max_n == 0: any N, two passes (sum of squares, then re-read and write).  wpre: the
    weight slices load with the row, before the reduction's barrier (resident rows only).  rows:
    resident rows a thread (every row's loads first, one barrier for all their sums; a CTA holds
    rows * threads / lanes rows).  lanes < threads
    (resident rows, lanes a power of two <= 32): `lanes` threads a row, threads / lanes rows side
    by side, each row's sum reduced by shuffles within its lane group, no barrier (head-dim rows).
    """
    import tilelang.language as T

    assert not wpre or max_n, "wpre: resident rows only"
    assert rows == 1 or max_n, "rows: resident rows only"
    lanes = lanes or threads
    group = threads // lanes                     # rows side by side in a CTA
    assert group == 1 or (max_n and lanes <= 32 and lanes & (lanes - 1) == 0), "lanes: resident rows, 2^k <= 32"
    M, N = T.dynamic("M"), (n or T.dynamic("N"))
    vec, warps, f32 = 8, threads // 32, "float32"
    chunk = lanes * vec                          # columns one 16-byte slot per thread covers
    slots = max_n // chunk if max_n else unroll

    @T.macro
    def load(x, residual, a, b, row, col, i):
        for v in T.vectorized(vec):
            a[i, v] = x[row, col + v]
        if fused:
            for v in T.vectorized(vec):
                b[i, v] = residual[row, col + v]

    @T.macro
    def add_square(residual, a, b, row, col, i, acc, rr):
        if fused:                                # round the sum first, as the static kernel
            for v in T.unroll(vec):
                a[i, v] = T.cast(T.cast(a[i, v], f32) + T.cast(b[i, v], f32), dtype)
            for v in T.vectorized(vec):
                residual[row, col + v] = a[i, v]
        for v in T.unroll(vec):
            acc[rr] = acc[rr] + T.cast(a[i, v], f32) * T.cast(a[i, v], f32)

    @T.macro
    def scale_store(a, i, si, weight, out, row, col, r, w):
        wi = si if wpre else 0
        if not wpre:
            for v in T.vectorized(vec):
                w[0, v] = weight[col + v]
        for v in T.unroll(vec):
            a[i, v] = T.cast(T.cast(a[i, v], f32) * r * T.cast(w[wi, v], f32), dtype)
        for v in T.vectorized(vec):
            out[row, col + v] = a[i, v]

    def lane_of(tx):                             # a thread's place in its row
        return tx % lanes if group > 1 else tx

    def row_of(bx, tx, rr):                      # the thread's resident row rr
        return (bx * rows + rr) * group + tx // lanes if group > 1 else bx * rows + rr

    @T.macro
    def run(x, residual, weight, out, eps):
        with T.Kernel(T.ceildiv(M, rows * group), threads=threads) as bx:
            if not n:
                T.assume(N % vec == 0)
            tx = T.get_thread_binding()
            lane = lane_of(tx)
            red = T.alloc_shared((rows, warps), f32) if group == 1 else None
            a = T.alloc_local((rows * slots, vec), dtype)
            b = T.alloc_local((rows * slots, vec), dtype)
            w = T.alloc_local((slots if wpre else 1, vec), dtype)
            acc = T.alloc_local((rows,), f32)
            tot = T.alloc_local((1,), f32)
            for rr in T.unroll(rows):
                acc[rr] = T.float32(0)
            if max_n:
                for rr in T.unroll(rows):        # every load first
                    for i in T.unroll(slots):
                        if row_of(bx, tx, rr) < M and i * chunk + lane * vec < N:
                            load(x, residual, a, b, row_of(bx, tx, rr), i * chunk + lane * vec, rr * slots + i)
                if wpre:                         # the weight slices too, before the barrier
                    for i in T.unroll(slots):
                        if i * chunk + lane * vec < N:
                            for v in T.vectorized(vec):
                                w[i, v] = weight[i * chunk + lane * vec + v]
                for rr in T.unroll(rows):
                    for i in T.unroll(slots):
                        if row_of(bx, tx, rr) < M and i * chunk + lane * vec < N:
                            add_square(residual, a, b, row_of(bx, tx, rr), i * chunk + lane * vec, rr * slots + i, acc, rr)
            else:
                for it in T.serial(T.ceildiv(N, chunk * slots)):
                    for i in T.unroll(slots):
                        if (it * slots + i) * chunk + tx * vec < N:
                            load(x, residual, a, b, bx, (it * slots + i) * chunk + tx * vec, i)
                    for i in T.unroll(slots):
                        if (it * slots + i) * chunk + tx * vec < N:
                            add_square(residual, a, b, bx, (it * slots + i) * chunk + tx * vec, i, acc, 0)
            if group > 1:                        # a row's lanes are one aligned group of a warp
                for rr in T.unroll(rows):
                    for k in T.unroll(lanes.bit_length() - 1):
                        acc[rr] = acc[rr] + T.shfl_xor(acc[rr], (lanes // 2) >> k)
            else:
                for rr in T.unroll(rows):
                    for k in T.unroll(5):
                        acc[rr] = acc[rr] + T.shfl_xor(acc[rr], 16 >> k)
                    if tx % 32 == 0:
                        red[rr, tx // 32] = acc[rr]
                T.sync_threads()
            for rr in T.unroll(rows):
                if group > 1:
                    tot[0] = acc[rr]
                else:
                    tot[0] = T.float32(0)
                    for i in T.unroll(warps):
                        tot[0] = tot[0] + red[rr, i]
                r = T.rsqrt(tot[0] / T.cast(N, f32) + eps)
                if max_n:
                    for i in T.unroll(slots):
                        if row_of(bx, tx, rr) < M and i * chunk + lane * vec < N:
                            scale_store(a, rr * slots + i, i, weight, out, row_of(bx, tx, rr), i * chunk + lane * vec, r, w)
                else:                            # pass 2 re-reads the row (from L2)
                    for it in T.serial(T.ceildiv(N, chunk)):
                        if it * chunk + tx * vec < N:
                            for v in T.vectorized(vec):
                                a[0, v] = (residual if fused else x)[bx, it * chunk + tx * vec + v]
                            scale_store(a, 0, 0, weight, out, bx, it * chunk + tx * vec, r, w)

    if fused:
        @T.prim_func
        def fused_add_rms_norm(x: T.Tensor((M, N), dtype), residual: T.Tensor((M, N), dtype),
                               weight: T.Tensor((N,), dtype), eps: T.float32):
            run(x, residual, weight, x, eps)
        return fused_add_rms_norm

    @T.prim_func
    def rms_norm(x: T.Tensor((M, N), dtype), weight: T.Tensor((N,), dtype),
                 out: T.Tensor((M, N), dtype), eps: T.float32):
        run(x, None, weight, out, eps)
    return rms_norm


def rms_norm_kernel(N: int, dtype: str, threads: int = 128, max_n: int = 0, wpre: int = 0, rows: int = 1, lanes: int = 0):
    import tilelang.language as T

    if N == 0 or wpre:
        return _any_n_kernel(dtype, threads, fused=False, max_n=max_n, wpre=wpre, n=N, rows=rows, lanes=lanes)
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


def fused_add_rms_norm_kernel(N: int, dtype: str, threads: int = 128, max_n: int = 0, wpre: int = 0, rows: int = 1, lanes: int = 0):
    """residual <- x + residual (rounded); x <- rms_norm(residual) * w: both in place."""
    import tilelang.language as T

    if N == 0 or wpre:
        return _any_n_kernel(dtype, threads, fused=True, max_n=max_n, wpre=wpre, n=N, rows=rows, lanes=lanes)
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


def _backward_func(T, M, N, dtype, row_blocks, guard: bool):
    """rms_norm_backward's signature around its two kernels: `row_blocks(dy, x, weight, dx, partial,
    eps)`, the first (dx and a partial dw row a CTA), then one thread a column summing the partial
    rows (`guard`: columns past a symbolic N)."""
    rows = BWD_ROWS

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


def rms_norm_backward_kernel(N: int, dtype: str, threads: int = 128):
    """dx = r*g - (r^3/N) * sum(g*x) * x with g = dy*w; dw = sum_rows dy*x*r.

    Two kernels: BWD_ROWS rows per CTA write dx and a partial dw row (fp32 scratch), then one
    thread per column sums the partial rows.  N = 0: any N % 8 == 0 (`_any_n_backward`).
    """
    import tilelang.language as T

    if N == 0:
        return _any_n_backward(dtype, threads)
    M = T.dynamic("M")
    rows = BWD_ROWS
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
    """rms_norm_backward for a symbolic N (N % 8 == 0): a CTA's BWD_ROWS rows one at a time, each in
    two passes of 16-byte slots -- sums of x^2 and g*x, then x, dy and w re-read (from L1/L2) for
    dx -- while each thread adds dy*x*r into its own columns of the CTA's partial dw row in global
    memory (no other thread touches them, so no atomics; the row stays in L2)."""
    import tilelang.language as T

    M, N = T.dynamic("M"), T.dynamic("N")
    vec, warps, f32, rows = 8, threads // 32, "float32", BWD_ROWS
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


def _static(n: int, d: str, forward: bool) -> dict:
    """A HIDDEN size's kernel: 4096-7168 forward, the resident-row kernel at N = n with the weight
    loaded before the barrier (16-byte slots; two rows a CTA at TWO_ROWS); the rest, T.Parallel code."""
    if forward and n in WPRE:
        threads, rows = (128, 2) if n in TWO_ROWS else (256, 1)
        slot = threads * 8                       # columns a 16-byte slot per thread covers
        return {"N": n, "dtype": d, "threads": threads, "max_n": -(-n // slot) * slot, "wpre": 1,
                **({"rows": rows} if rows > 1 else {})}
    return {"N": n, "dtype": d, "threads": _threads(n)}


def _resident(r: Resident, d: str) -> dict:
    extra = dict(wpre=r.wpre, lanes=r.lanes, rows=r.rows if r.rows > 1 else 0)
    return {"N": 0, "dtype": d, "threads": r.threads, "max_n": r.hi, **{k: v for k, v in extra.items() if v}}


def _variants(any_n: bool = False, backward: bool = False):
    """Static N per HIDDEN size; with any_n (the forward ops), then the N=0 kernels for every
    other N % 8 == 0; the backward's N=0 kernel for the dtypes in BWD_ANY_N."""
    static = tuple(Variant(_static(n, d, any_n)) for n in HIDDEN for d in DTYPES)
    if backward:
        return static + tuple(Variant({"N": 0, "dtype": d, "threads": 256}, rule="N % 8 == 0", priority=-2)
                              for d in BWD_ANY_N)
    if not any_n:
        return static
    resident = tuple(Variant(_resident(r, d), rule=f"N % 8 == 0 and N > {r.lo} and N <= {r.hi}", priority=-1)
                     for r in RESIDENT for d in r.dtypes)
    return static + resident + tuple(Variant({"N": 0, "dtype": d, "threads": 256}, rule="N % 8 == 0", priority=-2)
                                     for d in DTYPES)


_EPS = Scalar("eps", "float32", 1e-6)
SPECS = (
    OpSpec(
        name="tkreg.rms_norm",
        doc="RMSNorm over the last dim: x[M, N], weight[N] -> out[M, N]",
        tensors=(Tensor("x", ("M", "N"), dtypes=DTYPES),
                 Tensor("weight", ("N",), dtype_of="x"),
                 Tensor("out", ("M", "N"), dtype_of="x", role="output")),
        scalars=(_EPS,), factory=rms_norm_kernel, variants=_variants(any_n=True),
        reference="tkreg.reference.norm:rms_norm", backward="tkreg.ops.norm:RmsNormGrad",
    ),
    OpSpec(
        name="tkreg.fused_add_rms_norm",
        doc="In place: residual += x; x = rms_norm(residual) * weight (vLLM's fused_add_rms_norm)",
        tensors=(Tensor("x", ("M", "N"), dtypes=DTYPES, role="inplace"),
                 Tensor("residual", ("M", "N"), dtype_of="x", role="inplace"),
                 Tensor("weight", ("N",), dtype_of="x")),
        scalars=(_EPS,), factory=fused_add_rms_norm_kernel, variants=_variants(any_n=True),
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
        scalars=(_EPS,), factory=rms_norm_backward_kernel, variants=_variants(backward=True),
        reference="tkreg.reference.norm:rms_norm_backward",
    ),
)
