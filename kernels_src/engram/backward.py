"""engram_gate_backward: gradients of engram_gate from the forward's saved (dot, gate, rstd_x, rstd_k).

With w = wh * we, c = 1/sqrt(H), s = dot * rstd_x * rstd_k * c and, per row (t, h),
  dg = sum(grad_out * v[t]),  D = dg * gate * (1 - gate) * c * rstd_x * rstd_k / (2 sqrt(|s|))
  (D = 0 where |s| < clamp or s == 0: the clamp's flat part):
  grad_x = grad_out + D * (k * w - x * dot * rstd_x^2 / H)
  grad_k = D * (x * w - k * dot * rstd_k^2 / H)
  grad_v[t] = sum over h of gate * grad_out
  grad_wh = we * sum over t of D * x * k,  grad_we = wh * (the same sum)   (fp32)

Three kernels a call, none with float atomics:
1. ROWS tokens of one head a CTA, the row resident in 16-byte slots (grad_out, x, k, v; the
   head's w loaded once a CTA): one barrier for dg, then grad_x and grad_k; each thread adds
   D * x * k into its own columns of the CTA's partial row (registers), written once at the end
   into an fp32 scratch[blocks, m, H].
2. grad_v: 8 columns a thread, the m heads summed in order.
3. one thread a column sums the partial rows in block order and scales by we and wh.
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from .gate import DTYPES, STRIDES, VEC, Resident, row_variants

ROWS = 16          # tokens a CTA in kernel 1: fewer partial rows to sum
STATIC = ((4096, 512), (7168, 512))
RESIDENT = (Resident(0, 4096, 512), Resident(4096, 8192, 512), Resident(8192, 16384, 512))


def engram_gate_backward_kernel(H: int, dtype: str, threads: int, max_h: int):
    """H > 0 bakes the row length in; H == 0 takes any H % 8 == 0 up to max_h."""
    import tilelang.language as T

    Tn, m = T.dynamic("T"), T.dynamic("m")
    Hs = H or T.dynamic("H")
    kst, ksh, vst = T.dynamic("kst", "int64"), T.dynamic("ksh", "int64"), T.dynamic("vst", "int64")
    f32, vec, warps, rows = "float32", VEC, threads // 32, ROWS
    chunk = threads * vec
    slots = max_h // chunk
    assert slots * chunk == max_h, (max_h, threads)
    NB = T.ceildiv(Tn, rows)

    @T.macro
    def row_blocks(grad_out, x, k, v, wh, we, dot, gate, rstd_x, rstd_k, grad_x, grad_k, partial, clamp):
        with T.Kernel(NB, m, threads=threads) as (blk, head):
            if not H:
                T.assume(Hs % vec == 0)
            T.assume(kst % vec == 0)
            T.assume(ksh % vec == 0)
            T.assume(vst % vec == 0)
            tx = T.get_thread_binding()
            w = T.alloc_local((slots, vec), f32)
            acc = T.alloc_local((slots, vec), f32)
            ga = T.alloc_local((slots, vec), dtype)
            xa = T.alloc_local((slots, vec), dtype)
            ka = T.alloc_local((slots, vec), dtype)
            va = T.alloc_local((slots, vec), dtype)
            ba = T.alloc_local((2, vec), dtype)
            part = T.alloc_local((1,), f32)
            dg = T.alloc_local((1,), f32)
            red = T.alloc_shared((2, warps), f32)
            for i in T.unroll(slots):
                for e in T.unroll(vec):
                    acc[i, e] = T.float32(0)
                    w[i, e] = T.float32(0)
                if i * chunk + tx * vec < Hs:
                    for e in T.vectorized(vec):
                        ba[0, e] = wh[head, i * chunk + tx * vec + e]
                    for e in T.vectorized(vec):
                        ba[1, e] = we[head, i * chunk + tx * vec + e]
                    for e in T.unroll(vec):
                        w[i, e] = T.cast(ba[0, e], f32) * T.cast(ba[1, e], f32)
            for rr in T.serial(rows):
                tok = blk * rows + rr
                if tok < Tn:                          # the same for every thread of the CTA
                    part[0] = T.float32(0)
                    for i in T.unroll(slots):
                        if i * chunk + tx * vec < Hs:
                            for e in T.vectorized(vec):
                                ga[i, e] = grad_out[tok, head, i * chunk + tx * vec + e]
                            for e in T.vectorized(vec):
                                va[i, e] = v[tok, i * chunk + tx * vec + e]
                            for e in T.vectorized(vec):
                                xa[i, e] = x[tok, head, i * chunk + tx * vec + e]
                            for e in T.vectorized(vec):
                                ka[i, e] = k[tok, head, i * chunk + tx * vec + e]
                    for i in T.unroll(slots):
                        if i * chunk + tx * vec < Hs:
                            for e in T.unroll(vec):
                                part[0] = part[0] + T.cast(ga[i, e], f32) * T.cast(va[i, e], f32)
                    for s in T.unroll(5):
                        part[0] = part[0] + T.shfl_xor(part[0], 16 >> s)
                    if tx % 32 == 0:
                        red[rr % 2, tx // 32] = part[0]   # two buffers: the next token's writes wait for no one
                    T.sync_threads()
                    dg[0] = T.float32(0)
                    for j in T.unroll(warps):
                        dg[0] = dg[0] + red[rr % 2, j]
                    g = gate[tok, head]
                    d = dot[tok, head]
                    rx = rstd_x[tok, head]
                    rk = rstd_k[tok, head]
                    crr = rx * rk / T.sqrt(T.cast(Hs, f32))
                    sa = T.abs(d * crr)
                    D = T.if_then_else(T.Or(sa < clamp, sa == 0), T.float32(0),
                                       dg[0] * g * (1 - g) * crr * T.float32(0.5) / T.sqrt(sa))
                    cx = d * rx * rx / T.cast(Hs, f32)
                    ck = d * rk * rk / T.cast(Hs, f32)
                    for i in T.unroll(slots):
                        if i * chunk + tx * vec < Hs:
                            for e in T.unroll(vec):
                                xf = T.cast(xa[i, e], f32)
                                kf = T.cast(ka[i, e], f32)
                                acc[i, e] = acc[i, e] + D * xf * kf
                                ga[i, e] = T.cast(T.cast(ga[i, e], f32) + D * (kf * w[i, e] - xf * cx), dtype)
                                ka[i, e] = T.cast(D * (xf * w[i, e] - kf * ck), dtype)
                            for e in T.vectorized(vec):
                                grad_x[tok, head, i * chunk + tx * vec + e] = ga[i, e]
                            for e in T.vectorized(vec):
                                grad_k[tok, head, i * chunk + tx * vec + e] = ka[i, e]
            for i in T.unroll(slots):
                if i * chunk + tx * vec < Hs:
                    for e in T.vectorized(vec):
                        partial[blk, head, i * chunk + tx * vec + e] = acc[i, e]

    @T.macro
    def grad_v_sum(grad_out, gate, grad_v):
        with T.Kernel(T.ceildiv(Hs, 128 * vec), Tn, threads=128) as (bx, tok):
            if not H:
                T.assume(Hs % vec == 0)
            tx = T.get_thread_binding()
            col = (bx * 128 + tx) * vec
            a = T.alloc_local((vec,), dtype)
            s = T.alloc_local((vec,), f32)
            if col < Hs:
                for e in T.unroll(vec):
                    s[e] = T.float32(0)
                for h in T.serial(m):
                    for e in T.vectorized(vec):
                        a[e] = grad_out[tok, h, col + e]
                    for e in T.unroll(vec):
                        s[e] = s[e] + gate[tok, h] * T.cast(a[e], f32)
                for e in T.unroll(vec):
                    a[e] = T.cast(s[e], dtype)
                for e in T.vectorized(vec):
                    grad_v[tok, col + e] = a[e]

    @T.macro
    def weight_sum(partial, wh, we, grad_wh, grad_we):
        with T.Kernel(T.ceildiv(Hs, 128), m, threads=128) as (bx, head):
            tx = T.get_thread_binding()
            col = bx * 128 + tx
            s = T.alloc_local((1,), f32)
            if col < Hs:
                s[0] = T.float32(0)
                for b in T.serial(NB):
                    s[0] = s[0] + partial[b, head, col]
                grad_wh[head, col] = s[0] * T.cast(we[head, col], f32)
                grad_we[head, col] = s[0] * T.cast(wh[head, col], f32)

    @T.prim_func
    def engram_gate_backward(grad_out: T.Tensor((Tn, m, Hs), dtype), x: T.Tensor((Tn, m, Hs), dtype),
                             k: T.StridedTensor((Tn, m, Hs), (kst, ksh, 1), dtype),
                             v: T.StridedTensor((Tn, Hs), (vst, 1), dtype), wh: T.Tensor((m, Hs), dtype),
                             we: T.Tensor((m, Hs), dtype), dot: T.Tensor((Tn, m), f32), gate: T.Tensor((Tn, m), f32),
                             rstd_x: T.Tensor((Tn, m), f32), rstd_k: T.Tensor((Tn, m), f32),
                             grad_x: T.Tensor((Tn, m, Hs), dtype), grad_k: T.Tensor((Tn, m, Hs), dtype),
                             grad_v: T.Tensor((Tn, Hs), dtype), grad_wh: T.Tensor((m, Hs), f32),
                             grad_we: T.Tensor((m, Hs), f32), partial: T.Tensor((NB, m, Hs), f32),
                             clamp: T.float32):
        row_blocks(grad_out, x, k, v, wh, we, dot, gate, rstd_x, rstd_k, grad_x, grad_k, partial, clamp)
        grad_v_sum(grad_out, gate, grad_v)
        weight_sum(partial, wh, we, grad_wh, grad_we)

    return engram_gate_backward


ROW = ("T", "m", "H")
SAVED = ("T", "m")
SPECS = (
    OpSpec(
        name="tkreg.engram_gate_backward",
        doc="Gradients of engram_gate from its saved (dot, gate, rstd_x, rstd_k): "
            "-> grad_x, grad_k, grad_v, grad_wh (fp32), grad_we (fp32); deterministic",
        tensors=(Tensor("grad_out", ROW, dtypes=DTYPES),
                 Tensor("x", ROW, dtype_of="grad_out"),
                 Tensor("k", ROW, dtype_of="grad_out", strides=("kst", "ksh", 1)),
                 Tensor("v", ("T", "H"), dtype_of="grad_out", strides=("vst", 1)),
                 Tensor("wh", ("m", "H"), dtype_of="grad_out"),
                 Tensor("we", ("m", "H"), dtype_of="grad_out"),
                 *(Tensor(n, SAVED, dtype="float32") for n in ("dot", "gate", "rstd_x", "rstd_k")),
                 Tensor("grad_x", ROW, dtype_of="grad_out", role="output"),
                 Tensor("grad_k", ROW, dtype_of="grad_out", role="output"),
                 Tensor("grad_v", ("T", "H"), dtype_of="grad_out", role="output"),
                 Tensor("grad_wh", ("m", "H"), dtype="float32", role="output"),
                 Tensor("grad_we", ("m", "H"), dtype="float32", role="output"),
                 Tensor("partial", (f"(T + {ROWS - 1}) // {ROWS}", "m", "H"), dtype="float32", role="scratch")),
        scalars=(Scalar("clamp", "float32"),),
        factory=engram_gate_backward_kernel, variants=row_variants(STATIC, RESIDENT),
        reference="tkreg.reference.engram:engram_gate_backward",
    ),
)
