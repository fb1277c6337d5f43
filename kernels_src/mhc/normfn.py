"""mhc_pre_norm_fn: mixes[T, N] = (residual[T, m*H] @ (fn * norm_weight)[N, m*H]^T) * rstd, rstd =
rsqrt(mean over m*H of residual^2 + eps); N = m(m+2) = 24 at m = 4.

N is tiny and K = m*H large, so this is a skinny GEMM run on the CUDA cores in fp32 FMA (exact
bf16 inputs, fp32 fn, fp32 accumulation: no TF32 rounding of fn as TileKernels' tensor-core path
has).  Two kernels:
1. partial products (`partial_products`, shared with mhc_pre_big_fuse): a CTA takes TILE tokens and
   one of `splits` contiguous K ranges, stepping KC columns at a time.  Each step stages the x tile
   (fp32, [KC, TILE]) and the fn tile ([KC, 32]: output n at column (n // 6) * 8 + n % 6, so a
   thread's 6 outputs load as two 16-byte vectors) in shared memory; the next step's global loads
   are issued before this step's math.  Warp w sums k rows w, w + 8, ... of each step; lane (ti, ni)
   owns 4 tokens x 6 outputs (24 fp32 accumulators, 24 FMAs per 3 vector shared loads).  The 8 warps'
   sums meet in shared memory at the end and go to part_mul[split, T, N]; each token's sum of
   squares (summed by the threads that stage its x) to part_sq[split, T].
2. finish: one thread a (token, n): the split partials summed in order (deterministic), scaled by
   rstd.
`splits` grows as T shrinks (SPLITS) so small T still fills the GPU.  m = 4 baked in; H run-time,
H % KC == 0 (a step never straddles two of the m rows).
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

DTYPES = ("bfloat16",)
MULT = 4             # m: N = 24 outputs, 4 groups of 6 a thread
TILE = 32            # tokens a CTA
KC = 64              # K columns a step
THREADS = 256        # 8 warps: warp w takes k rows w * 8 .. w * 8 + 7 of a step
NPAD = 32            # fn tile row: 4 groups of 8 slots, 6 used
# (largest T, splits): K split over more CTAs as T shrinks (T <= 256: 8 token tiles x 32 splits)
SPLITS = ((256, 32), (4096, 4), (0, 1))
F32 = "float32"
# Every access is in bounds by construction (tokens guarded, H % KC == 0), so tilelang's per-element
# guards would only split the 16-byte loads.
PASS_CONFIGS = {"tl.disable_safe_memory_legalize": True}


def split_rules():
    """(splits, rule) for each SPLITS row, each T range once."""
    out, lo = [], None
    for hi, s in SPLITS:
        parts = ([f"T > {lo}"] if lo is not None else []) + ([f"T <= {hi}"] if hi else [])
        out.append((s, " and ".join(parts)))
        lo = hi
    return out


def partial_products(Tn, H, m, splits: int, dtype: str):
    """The split-K partial macro over residual[Tn, m, H], m == MULT (see the module docstring)."""
    import tilelang.language as T

    N = MULT * (MULT + 2)
    per_n, groups = N // 4, 4                   # outputs a thread, thread groups over N
    vec, warps = 8, THREADS // 32
    kw = KC // warps                            # k rows a warp a step
    fn_vecs = N * KC // 4                       # 16-byte fn loads a step

    @T.macro
    def fetch(residual, fn, norm_weight, xr, fr, nw, tok, kq, tx, c):
        """Step c's global loads into registers: 8 columns of the thread's token, its fn vectors."""
        head = c * KC // H
        col = c * KC - head * H + kq * vec
        if tok < Tn:
            for e in T.vectorized(vec):
                xr[e] = residual[tok, head, col + e]
        else:
            for e in T.unroll(vec):
                xr[e] = T.cast(0, dtype)
        for r in T.unroll(2):
            idx = r * THREADS + tx
            if idx < fn_vecs:
                n = idx % N
                q = idx // N
                for e in T.vectorized(4):
                    fr[r, e] = fn[n, c * KC + q * 4 + e]
                if not T.isnullptr(norm_weight.data):
                    for e in T.vectorized(4):
                        nw[e] = norm_weight[c * KC + q * 4 + e]
                    for e in T.unroll(4):
                        fr[r, e] = fr[r, e] * nw[e]

    @T.macro
    def run(residual, fn, norm_weight, part_mul, part_sq):
        with T.Kernel(T.ceildiv(Tn, TILE), splits, threads=THREADS) as (tile, sp):
            T.assume(H % KC == 0)
            tx = T.get_thread_binding()
            w = tx // 32
            lane = tx % 32
            ti = lane // groups                 # tokens ti*4 .. ti*4+3 of the tile
            ni = lane % groups                  # outputs ni*6 .. ni*6+5
            xs = T.alloc_shared((KC, TILE), F32)
            fs = T.alloc_shared((KC, NPAD), F32)
            red = T.alloc_shared((warps, TILE, N), F32)
            red_sq = T.alloc_shared((warps, TILE), F32)
            acc = T.alloc_local((4, per_n), F32)
            xr = T.alloc_local((vec,), dtype)
            fr = T.alloc_local((2, 4), F32)
            nw = T.alloc_local((4,), F32)
            xv = T.alloc_local((4,), F32)
            fv = T.alloc_local((8,), F32)
            sq = T.alloc_local((1,), F32)
            for a in T.unroll(4):
                for b in T.unroll(per_n):
                    acc[a, b] = T.float32(0)
            sq[0] = T.float32(0)
            chunks = m * H // KC
            c0 = sp * chunks // splits
            c1 = (sp + 1) * chunks // splits
            tok = tile * TILE + lane           # the token whose x this thread stages
            kq = w                              # its 8 columns of the step: kq * 8 ..

            if c0 < c1:
                fetch(residual, fn, norm_weight, xr, fr, nw, tok, kq, tx, c0)
            for c in T.serial(c1 - c0):
                for e in T.unroll(vec):
                    xf = T.cast(xr[e], F32)
                    sq[0] = sq[0] + xf * xf
                    xs[kq * vec + e, lane] = xf
                for r in T.unroll(2):
                    idx = r * THREADS + tx
                    if idx < fn_vecs:
                        n = idx % N
                        q = idx // N
                        for e in T.unroll(4):
                            fs[q * 4 + e, (n // per_n) * 8 + n % per_n] = fr[r, e]
                T.sync_threads()
                if c0 + c + 1 < c1:
                    fetch(residual, fn, norm_weight, xr, fr, nw, tok, kq, tx, c0 + c + 1)
                for j in T.unroll(kw):
                    k = w * kw + j
                    for e in T.vectorized(4):
                        xv[e] = xs[k, ti * 4 + e]
                    for e in T.vectorized(8):
                        fv[e] = fs[k, ni * 8 + e]
                    for a in T.unroll(4):
                        for b in T.unroll(per_n):
                            acc[a, b] = acc[a, b] + xv[a] * fv[b]
                T.sync_threads()
            for a in T.unroll(4):
                for b in T.unroll(per_n):
                    red[w, ti * 4 + a, ni * per_n + b] = acc[a, b]
            red_sq[kq, lane] = sq[0]
            T.sync_threads()
            for r in T.unroll(TILE * N // THREADS):
                o = r * THREADS + tx
                t = o // N
                n = o % N
                s = T.alloc_var(F32)
                s = T.float32(0)
                for ww in T.unroll(warps):
                    s = s + red[ww, t, n]
                if tile * TILE + t < Tn:
                    part_mul[sp, tile * TILE + t, n] = s
            if tx < TILE:
                s2 = T.alloc_var(F32)
                s2 = T.float32(0)
                for ww in T.unroll(warps):
                    s2 = s2 + red_sq[ww, tx]
                if tile * TILE + tx < Tn:
                    part_sq[sp, tile * TILE + tx] = s2

    return run


def norm_fn_kernel(dtype: str, splits: int):
    import tilelang.language as T

    Tn, H, m = T.dynamic("T"), T.dynamic("H"), T.dynamic("m")   # m == MULT by the rule
    N = MULT * (MULT + 2)
    partial = partial_products(Tn, H, m, splits, dtype)

    @T.prim_func
    def mhc_pre_norm_fn(residual: T.Tensor((Tn, m, H), dtype), fn: T.Tensor((N, m * H), F32),
                        norm_weight: T.Tensor((m * H,), F32), mixes: T.Tensor((Tn, N), F32),
                        rstd: T.Tensor((Tn,), F32), part_mul: T.Tensor((splits, Tn, N), F32),
                        part_sq: T.Tensor((splits, Tn), F32), eps: T.float32):
        partial(residual, fn, norm_weight, part_mul, part_sq)
        with T.Kernel(T.ceildiv(Tn * N, THREADS), threads=THREADS) as bx:
            idx = bx * THREADS + T.get_thread_binding()
            if idx < Tn * N:
                tok = idx // N
                n = idx % N
                s = T.alloc_var(F32)
                q = T.alloc_var(F32)
                s = T.float32(0)
                q = T.float32(0)
                for sp in T.serial(splits):
                    s = s + part_mul[sp, tok, n]
                    q = q + part_sq[sp, tok]
                r = T.rsqrt(q / T.cast(m * H, F32) + eps)
                mixes[tok, n] = s * r
                if n == 0:
                    rstd[tok] = r

    return mhc_pre_norm_fn


NMIX = "m * (m + 2)"
SPECS = (
    OpSpec(
        name="tkreg.mhc_pre_norm_fn",
        doc="residual[T, m, H] bf16, fn[m(m+2), m*H], norm_weight[m*H] | None (fp32) -> mixes[T, m(m+2)] = "
            "rmsnorm(residual over m*H) @ (fn * norm_weight)^T and rstd[T] (fp32 FMA, deterministic split-K)",
        tensors=(Tensor("residual", ("T", "m", "H"), dtypes=DTYPES),
                 Tensor("fn", (NMIX, "m * H"), dtype=F32),
                 Tensor("norm_weight", ("m * H",), dtype=F32, optional=True),
                 Tensor("mixes", ("T", NMIX), dtype=F32, role="output"),
                 Tensor("rstd", ("T",), dtype=F32, role="output"),
                 Tensor("part_mul", ("splits", "T", NMIX), dtype=F32, role="scratch"),
                 Tensor("part_sq", ("splits", "T"), dtype=F32, role="scratch")),
        scalars=(Scalar("eps", "float32"),),
        factory=norm_fn_kernel,
        variants=tuple(Variant({"dtype": d, "splits": s}, rule=f"m == {MULT} and H % {KC} == 0 and {r}",
                               pass_configs=PASS_CONFIGS)
                       for d in DTYPES for s, r in split_rules()),
        reference="tkreg.reference.mhc:mhc_pre_norm_fn", backward="tkreg.ops.mhc:NormFnGrad",
    ),
)
