"""rms_norm and fused_add_rms_norm: static-N kernels for the HIDDEN sizes, any-N kernels for the rest.

Static N (HIDDEN): one CTA a row (two at N = 4096), the row read once.  At PRELOAD_WEIGHT sizes the
resident-row kernel runs at that fixed N, the weight loaded with the row before the reduction's
barrier; the other HIDDEN sizes run T.Parallel code.
Any N % 8 == 0 (`N=0` variants, lower priority): in a RESIDENT range the row stays in registers,
loaded once in 16-byte slots; head-dim rows (N <= 256, qk-norm) give a row `threads_per_row`
threads, several rows a CTA side by side, each row's sum reduced by shuffles inside its lane group
(no barrier).  Outside the ranges, pass 1 streams the row summing squares and pass 2 re-reads it
(from L2) and writes.
"""
from typing import NamedTuple

from kernels_src.common import DTYPES
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

HIDDEN = (1024, 2048, 4096, 5120, 7168, 8192)
VEC = 8            # elements a 16-byte slot holds (bf16 / fp16)
UNROLL = 2         # 16-byte slots a thread loads at once in the two-pass kernel


class Resident(NamedTuple):
    """An any-N range lo < N <= hi whose rows stay in registers, hi / (8 * threads_per_row) 16-byte
    slots a thread: `threads` a CTA, the weight loaded with the row (`preload_weight`),
    `threads_per_row` threads a row when fewer than `threads` (head-dim rows: threads /
    threads_per_row rows side by side)."""
    lo: int
    hi: int
    threads: int
    preload_weight: int = 0
    dtypes: tuple = DTYPES
    threads_per_row: int = 0


# Head-dim rows: one 16-byte slot a thread, N / 8 threads a row (1.00x a same-size copy at 1M rows;
# the two-pass kernel, one row a CTA, read 0.07-0.25x).  2048-4096 (2880, 3584, ...): 4 slots a thread
# with the weight loaded beside the row.  8192-16384: 8 slots (56-82 registers).
RESIDENT = (Resident(0, 64, 256, preload_weight=1, threads_per_row=8),
            Resident(64, 128, 256, preload_weight=1, threads_per_row=16),
            Resident(128, 256, 256, preload_weight=1, threads_per_row=32),
            Resident(2048, 4096, 128, preload_weight=1),
            Resident(8192, 16384, 256))
# Hidden sizes on the resident-row kernel (8 bf16 per 16-byte slot, 256 threads) with the weight
# loaded with the row: the T.Parallel kernels (8-byte accesses, the weight read after the barrier)
# measured 3-14% slower at 1024-4096 tokens.
PRELOAD_WEIGHT = (4096, 5120, 7168)
# N = 4096: two rows a 128-thread CTA, both rows' loads first and one barrier (+3-11% at 1024-4096 tokens).
TWO_ROWS = (4096,)


def _threads(n: int) -> int:
    return 256 if n >= 4096 else 128


def _any_n_kernel(dtype: str, threads: int, fused: bool, max_n: int = 0, preload_weight: int = 0, n: int = 0,
                  rows_per_thread: int = 1, threads_per_row: int = 0, heads: bool = False):
    """rms_norm / fused_add_rms_norm for a symbolic N (N % 8 == 0), or for N = n when n > 0; one
    CTA per rows_per_thread * threads / threads_per_row rows.

    max_n > 0: the row stays in registers (max_n / (threads_per_row * 8) 16-byte slots a thread),
    read once.  max_n == 0: any N, two passes (sum of squares, then re-read and write).
    preload_weight: the weight slices load with the row, before the reduction's barrier (resident
    rows only).  rows_per_thread: resident rows a thread (every row's loads first, one barrier for
    all their sums).  threads_per_row < threads (resident rows, a power of two <= 32): each row's
    sum reduced by shuffles within its lane group, no barrier.  heads: rms_norm_heads, row r being
    head r % H of token r // H of a strided x[T, H, N] (out[T, H, N] contiguous).
    """
    import tilelang.language as T

    wpre, rows = preload_weight, rows_per_thread
    assert not wpre or max_n, "preload_weight: resident rows only"
    assert rows == 1 or max_n, "rows_per_thread: resident rows only"
    assert not heads or (max_n and not fused), "heads: resident rows of rms_norm only"
    lanes = threads_per_row or threads
    group = threads // lanes                     # rows side by side in a CTA
    assert group == 1 or (max_n and lanes <= 32 and lanes & (lanes - 1) == 0), "threads_per_row: resident rows, 2^k <= 32"
    N = n or T.dynamic("N")
    if heads:
        Tn, H = T.dynamic("T"), T.dynamic("H")
        st, sh = T.dynamic("st", "int64"), T.dynamic("sh")
        M = Tn * H
    else:
        M = T.dynamic("M")
    vec, warps, f32 = VEC, threads // 32, "float32"
    chunk = lanes * vec                          # columns one 16-byte slot per thread covers
    slots = max_n // chunk if max_n else UNROLL

    @T.macro
    def load(x, residual, a, b, row, col, i):
        for v in T.vectorized(vec):
            if heads:
                a[i, v] = x[row // H, row % H, col + v]
            else:
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
        if heads:                                # token and head in 32 bits (the 64-bit address divided)
            tok = T.alloc_var("int32")
            tok = row // H
            for v in T.vectorized(vec):
                out[tok, row - tok * H, col + v] = a[i, v]
        else:
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
            if heads:                            # the rule: 16-byte rows (H = 0 launches nothing)
                T.assume(H > 0)
                T.assume(st % vec == 0)
                T.assume(sh % vec == 0)
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

    if heads:
        @T.prim_func
        def rms_norm_heads(x: T.StridedTensor((Tn, H, N), (st, sh, 1), dtype), weight: T.Tensor((N,), dtype),
                           out: T.Tensor((Tn, H, N), dtype), eps: T.float32):
            run(x, None, weight, out, eps)
        return rms_norm_heads

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


def rms_norm_kernel(N: int, dtype: str, threads: int = 128, max_n: int = 0, preload_weight: int = 0,
                    rows_per_thread: int = 1, threads_per_row: int = 0):
    import tilelang.language as T

    if N == 0 or preload_weight:
        return _any_n_kernel(dtype, threads, fused=False, max_n=max_n, preload_weight=preload_weight, n=N,
                             rows_per_thread=rows_per_thread, threads_per_row=threads_per_row)
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


def fused_add_rms_norm_kernel(N: int, dtype: str, threads: int = 128, max_n: int = 0, preload_weight: int = 0,
                              rows_per_thread: int = 1, threads_per_row: int = 0):
    """residual <- x + residual (rounded); x <- rms_norm(residual) * w: both in place."""
    import tilelang.language as T

    if N == 0 or preload_weight:
        return _any_n_kernel(dtype, threads, fused=True, max_n=max_n, preload_weight=preload_weight, n=N,
                             rows_per_thread=rows_per_thread, threads_per_row=threads_per_row)
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


def _static(n: int, d: str) -> dict:
    """A HIDDEN size's kernel: at PRELOAD_WEIGHT sizes the resident-row kernel at N = n (16-byte
    slots; two rows a CTA at TWO_ROWS); the rest, T.Parallel code."""
    if n in PRELOAD_WEIGHT:
        threads, rows = (128, 2) if n in TWO_ROWS else (256, 1)
        slot = threads * VEC                     # columns a 16-byte slot per thread covers
        return {"N": n, "dtype": d, "threads": threads, "max_n": -(-n // slot) * slot, "preload_weight": 1,
                **({"rows_per_thread": rows} if rows > 1 else {})}
    return {"N": n, "dtype": d, "threads": _threads(n)}


def _resident(r: Resident, d: str) -> dict:
    extra = dict(preload_weight=r.preload_weight, threads_per_row=r.threads_per_row)
    return {"N": 0, "dtype": d, "threads": r.threads, "max_n": r.hi, **{k: v for k, v in extra.items() if v}}


def _variants():
    """Static N per HIDDEN size, the resident any-N ranges, then the two-pass kernel for any N % 8 == 0."""
    static = tuple(Variant(_static(n, d)) for n in HIDDEN for d in DTYPES)
    resident = tuple(Variant(_resident(r, d), rule=f"N % 8 == 0 and N > {r.lo} and N <= {r.hi}", priority=-1)
                     for r in RESIDENT for d in r.dtypes)
    return static + resident + tuple(Variant({"N": 0, "dtype": d, "threads": 256}, rule="N % 8 == 0", priority=-2)
                                     for d in DTYPES)


EPS = Scalar("eps", "float32", 1e-6)
SPECS = (
    OpSpec(
        name="tkreg.rms_norm",
        doc="RMSNorm over the last dim: x[M, N], weight[N] -> out[M, N]",
        tensors=(Tensor("x", ("M", "N"), dtypes=DTYPES),
                 Tensor("weight", ("N",), dtype_of="x"),
                 Tensor("out", ("M", "N"), dtype_of="x", role="output")),
        scalars=(EPS,), factory=rms_norm_kernel, variants=_variants(),
        reference="tkreg.reference.norm:rms_norm", backward="tkreg.ops.norm:RmsNormGrad",
    ),
    OpSpec(
        name="tkreg.fused_add_rms_norm",
        doc="In place: residual += x; x = rms_norm(residual) * weight (vLLM's fused_add_rms_norm)",
        tensors=(Tensor("x", ("M", "N"), dtypes=DTYPES, role="inplace"),
                 Tensor("residual", ("M", "N"), dtype_of="x", role="inplace"),
                 Tensor("weight", ("N",), dtype_of="x")),
        scalars=(EPS,), factory=fused_add_rms_norm_kernel, variants=_variants(),
        reference="tkreg.reference.norm:fused_add_rms_norm",
    ),
)
