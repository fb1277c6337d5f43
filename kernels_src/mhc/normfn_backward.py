"""mhc_pre_norm_fn_backward: gradients of mixes = (x @ w^T) * r, w = fn * norm_weight, r = rstd =
rsqrt(sum(x^2) / K + eps), x = residual[t] flattened (K = m * H), from the forward's mixes and rstd:

  g'[t, n]   = grad_mixes[t, n] * r[t]
  coef[t]    = r[t]^2 / K * sum over n of grad_mixes[t, n] * mixes[t, n]
  grad_x     = g' @ w - coef * x                                   (bf16)
  grad_w     = g'^T @ x, grad_fn = grad_w * norm_weight, grad_norm_weight = sum over n of grad_w * fn

Four kernels, fp32 FMA, no atomics:
1. g' and coef, one thread a token (scratch).
2. grad_x: a CTA takes TILE_T tokens x 512 columns (GX_THREADS threads); a thread holds w for its
   4 columns (24 x 4 fp32 registers) and walks the tokens, UNROLL_T tokens' loads at a time (g' and
   coef staged in shared memory, broadcast reads).
3. grad_w partials: a CTA takes 1024 columns and one of W_SPLITS token ranges; a thread sums
   g'[t, n] * x[t, 4 columns] into 24 x 4 registers, written to partial[split, N, K].
4. one thread a column sums the splits in order, then forms grad_fn and grad_norm_weight.
m = 4, H % 64 == 0 (as the forward).
"""
from tkreg.spec import OpSpec, Tensor, Variant

from .normfn import DTYPES, F32, KC, MULT, NMIX, PASS_CONFIGS

TILE_T = 128         # tokens a grad_x CTA (w read once a CTA from L2)
W_SPLITS = 16        # token ranges of the grad_w partial sums
COLS = 4             # columns a thread (two 8-byte bf16 vectors would need 192 registers of w)
UNROLL_T = 4         # tokens whose x loads a thread issues before their math
THREADS = 256
GX_THREADS = 128     # grad_x CTA: w takes 96 of ~150 registers, so smaller CTAs fit 3 an SM (12 warps, not 8)


def norm_fn_backward_kernel(dtype: str):
    import tilelang.language as T

    Tn, H, m = T.dynamic("T"), T.dynamic("H"), T.dynamic("m")   # m == MULT by the rule
    N = MULT * (MULT + 2)
    K = m * H
    span = THREADS * COLS

    @T.macro
    def prep(grad_mixes, mixes, rstd, gp, coef):
        with T.Kernel(T.ceildiv(Tn, THREADS), threads=THREADS) as bx:
            t = bx * THREADS + T.get_thread_binding()
            if t < Tn:
                r = rstd[t]
                s = T.alloc_var(F32)
                s = T.float32(0)
                for n in T.unroll(N):
                    g = grad_mixes[t, n]
                    s = s + g * mixes[t, n]
                    gp[t, n] = g * r
                coef[t] = r * r / T.cast(K, F32) * s

    @T.macro
    def grad_x_rows(residual, fn, norm_weight, gp, coef, grad_residual):
        with T.Kernel(T.ceildiv(Tn, TILE_T), T.ceildiv(K, GX_THREADS * COLS), threads=GX_THREADS) as (tile, cb):
            T.assume(H % KC == 0)
            tx = T.get_thread_binding()
            k = cb * GX_THREADS * COLS + tx * COLS
            head = k // H
            col = k - head * H
            w = T.alloc_local((N, COLS), F32)
            nw = T.alloc_local((COLS,), F32)
            xa = T.alloc_local((UNROLL_T, COLS), dtype)
            o = T.alloc_local((COLS,), dtype)
            acc = T.alloc_local((COLS,), F32)
            gv = T.alloc_local((4,), F32)
            gs = T.alloc_shared((TILE_T, N), F32)
            cs = T.alloc_shared((TILE_T,), F32)
            for i in T.serial(TILE_T * N // GX_THREADS):
                idx = i * GX_THREADS + tx
                t = tile * TILE_T + idx // N
                gs[idx // N, idx % N] = T.if_then_else(t < Tn, gp[T.min(t, Tn - 1), idx % N], T.float32(0))
            if tx < TILE_T:
                t = tile * TILE_T + tx
                cs[tx] = T.if_then_else(t < Tn, coef[T.min(t, Tn - 1)], T.float32(0))
            if k < K:
                for e in T.unroll(COLS):
                    nw[e] = T.float32(1)
                if not T.isnullptr(norm_weight.data):
                    for e in T.vectorized(COLS):
                        nw[e] = norm_weight[k + e]
                for n in T.unroll(N):
                    for e in T.vectorized(COLS):
                        w[n, e] = fn[n, k + e]
                    for e in T.unroll(COLS):
                        w[n, e] = w[n, e] * nw[e]
            T.sync_threads()
            cnt = T.min(TILE_T, Tn - tile * TILE_T)
            if k < K:
                for g4 in T.serial(T.ceildiv(cnt, UNROLL_T)):
                    for u in T.unroll(UNROLL_T):         # UNROLL_T tokens' loads in flight
                        if g4 * UNROLL_T + u < cnt:
                            for e in T.vectorized(COLS):
                                xa[u, e] = residual[tile * TILE_T + g4 * UNROLL_T + u, head, col + e]
                    for u in T.unroll(UNROLL_T):
                        tt = g4 * UNROLL_T + u
                        if tt < cnt:
                            for e in T.unroll(COLS):
                                acc[e] = -cs[tt] * T.cast(xa[u, e], F32)
                            for q in T.unroll(N // 4):
                                for e in T.vectorized(4):
                                    gv[e] = gs[tt, q * 4 + e]
                                for a in T.unroll(4):
                                    for e in T.unroll(COLS):
                                        acc[e] = acc[e] + gv[a] * w[q * 4 + a, e]
                            for e in T.unroll(COLS):
                                o[e] = T.cast(acc[e], dtype)
                            for e in T.vectorized(COLS):
                                grad_residual[tile * TILE_T + tt, head, col + e] = o[e]

    @T.macro
    def grad_w_partials(residual, gp, partial):
        with T.Kernel(T.ceildiv(K, span), W_SPLITS, threads=THREADS) as (cb, sp):
            T.assume(H % KC == 0)
            tx = T.get_thread_binding()
            k = cb * span + tx * COLS
            head = k // H
            col = k - head * H
            acc = T.alloc_local((N, COLS), F32)
            xa = T.alloc_local((UNROLL_T, COLS), dtype)
            xf = T.alloc_local((COLS,), F32)
            gv = T.alloc_local((4,), F32)
            gt = T.alloc_shared((TILE_T, N), F32)
            for n in T.unroll(N):
                for e in T.unroll(COLS):
                    acc[n, e] = T.float32(0)
            t0 = sp * Tn // W_SPLITS
            t1 = (sp + 1) * Tn // W_SPLITS
            for c in T.serial(T.ceildiv(t1 - t0, TILE_T)):
                base = t0 + c * TILE_T
                T.sync_threads()                    # the previous chunk's reads are done
                for i in T.serial(TILE_T * N // THREADS):
                    idx = i * THREADS + tx
                    t = base + idx // N
                    gt[idx // N, idx % N] = T.if_then_else(t < t1, gp[T.min(t, Tn - 1), idx % N], T.float32(0))
                T.sync_threads()
                cnt = T.min(TILE_T, t1 - base)
                if k < K:
                    for g4 in T.serial(T.ceildiv(cnt, UNROLL_T)):
                        for u in T.unroll(UNROLL_T):
                            if g4 * UNROLL_T + u < cnt:
                                for e in T.vectorized(COLS):
                                    xa[u, e] = residual[base + g4 * UNROLL_T + u, head, col + e]
                        for u in T.unroll(UNROLL_T):
                            tt = g4 * UNROLL_T + u
                            if tt < cnt:
                                for e in T.unroll(COLS):
                                    xf[e] = T.cast(xa[u, e], F32)
                                for q in T.unroll(N // 4):
                                    for e in T.vectorized(4):
                                        gv[e] = gt[tt, q * 4 + e]
                                    for a in T.unroll(4):
                                        for e in T.unroll(COLS):
                                            acc[q * 4 + a, e] = acc[q * 4 + a, e] + gv[a] * xf[e]
            if k < K:
                for n in T.unroll(N):
                    for e in T.vectorized(COLS):
                        partial[sp, n, k + e] = acc[n, e]

    @T.macro
    def weight_sums(fn, norm_weight, partial, grad_fn, grad_norm_weight):
        with T.Kernel(T.ceildiv(K, THREADS), threads=THREADS) as bx:
            k = bx * THREADS + T.get_thread_binding()
            if k < K:
                nwk = T.alloc_var(F32)
                nwk = T.float32(1)
                if not T.isnullptr(norm_weight.data):
                    nwk = norm_weight[k]
                gn = T.alloc_var(F32)
                gn = T.float32(0)
                for n in T.serial(N):
                    s = T.alloc_var(F32)
                    s = T.float32(0)
                    for sp in T.serial(W_SPLITS):
                        s = s + partial[sp, n, k]
                    grad_fn[n, k] = s * nwk
                    gn = gn + s * fn[n, k]
                if T.isnullptr(norm_weight.data):
                    grad_norm_weight[k] = T.float32(0)
                else:
                    grad_norm_weight[k] = gn

    @T.prim_func
    def mhc_pre_norm_fn_backward(grad_mixes: T.Tensor((Tn, N), F32), residual: T.Tensor((Tn, m, H), dtype),
                                 fn: T.Tensor((N, K), F32), norm_weight: T.Tensor((K,), F32),
                                 mixes: T.Tensor((Tn, N), F32), rstd: T.Tensor((Tn,), F32),
                                 grad_residual: T.Tensor((Tn, m, H), dtype), grad_fn: T.Tensor((N, K), F32),
                                 grad_norm_weight: T.Tensor((K,), F32), gp: T.Tensor((Tn, N), F32),
                                 coef: T.Tensor((Tn,), F32), partial: T.Tensor((W_SPLITS, N, K), F32)):
        prep(grad_mixes, mixes, rstd, gp, coef)
        grad_x_rows(residual, fn, norm_weight, gp, coef, grad_residual)
        grad_w_partials(residual, gp, partial)
        weight_sums(fn, norm_weight, partial, grad_fn, grad_norm_weight)

    return mhc_pre_norm_fn_backward


SPECS = (
    OpSpec(
        name="tkreg.mhc_pre_norm_fn_backward",
        doc="Gradients of mhc_pre_norm_fn from its mixes and rstd: grad_mixes[T, m(m+2)] -> grad_residual "
            "[T, m, H] bf16, grad_fn [m(m+2), m*H], grad_norm_weight [m*H] fp32 (zeros without a norm_weight); "
            "deterministic",
        tensors=(Tensor("grad_mixes", ("T", NMIX), dtype=F32),
                 Tensor("residual", ("T", "m", "H"), dtypes=DTYPES),
                 Tensor("fn", (NMIX, "m * H"), dtype=F32),
                 Tensor("norm_weight", ("m * H",), dtype=F32, optional=True),
                 Tensor("mixes", ("T", NMIX), dtype=F32),
                 Tensor("rstd", ("T",), dtype=F32),
                 Tensor("grad_residual", ("T", "m", "H"), dtype_of="residual", role="output"),
                 Tensor("grad_fn", (NMIX, "m * H"), dtype=F32, role="output"),
                 Tensor("grad_norm_weight", ("m * H",), dtype=F32, role="output"),
                 Tensor("gp", ("T", NMIX), dtype=F32, role="scratch"),
                 Tensor("coef", ("T",), dtype=F32, role="scratch"),
                 Tensor("partial", (W_SPLITS, NMIX, "m * H"), dtype=F32, role="scratch")),
        factory=norm_fn_backward_kernel,
        variants=tuple(Variant({"dtype": d}, rule=f"m == {MULT} and H % {KC} == 0", pass_configs=PASS_CONFIGS)
                       for d in DTYPES),
        reference="tkreg.reference.mhc:mhc_pre_norm_fn_backward",
    ),
)
