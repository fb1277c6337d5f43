"""Backward of the per-token mix math: sinkhorn_normalize_backward, mhc_pre_split_mixes_backward.

sinkhorn_normalize_backward(grad_out[T, m, m], comb[T, m, m], repeat, eps) -> grad_comb: the
forward is replayed (m * m lanes a token, small.py's layout), each normalisation's input y kept in
a per-lane array (at most MAX_REPEAT rounds), then walked back: through z = y / (S + eps), S the
row or column sum, g <- (g - S'(g * z)) / (S + eps) with S' the same sum; through the softmax,
g <- (g - rowsum(g * p)) * p.

mhc_head_compute_mix_backward(grad_out, input_mix [T, m], scale[1], base[m]) -> grad_input,
grad_scale, grad_base: the same two-kernel sums, dv = grad_out * sig'(input_mix * scale + base).

mhc_pre_split_mixes_backward(grad_pre, grad_post [T, m, 1], grad_comb [T, m, m], mixes[T, N],
scale[3], base[N], post_mult_value) -> grad_mixes[T, N], grad_scale[3], grad_base[N]: with
v = mixes * s + base and dv = grad_pre * sig'(v) | grad_post * post_mult_value * sig'(v) |
grad_comb, grad_mixes = dv * s; grad_base and grad_scale sum dv (and dv * mixes) over tokens in
two kernels, no atomics: lane j of each warp takes element j of its tokens (ROWS a CTA), the warps'
sums meet in shared memory in order into part[blocks, 2, N], then one CTA sums the blocks in
order.  N = m(m+2) <= 32 (m <= 4).
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from .rows import MULTS
from .small import F32, NMIX, THREADS

MAX_REPEAT = 32          # Sinkhorn rounds the backward keeps per lane (2 * MAX_REPEAT - 1 values)
ROWS = 64                # tokens a CTA in the split_mixes backward's partial sums


def sinkhorn_backward_kernel(mult: int):
    import tilelang.language as T

    Tn, m, mm = T.dynamic("T"), mult, mult * mult
    per = THREADS // mm
    bits = mult.bit_length() - 1
    rows, cols = mult // 2, mm // 2

    @T.macro
    def lane_sum(x, s, top):
        """s[0] = x summed over the lanes of its row (top = rows) or column (top = cols)."""
        s[0] = x
        for b in T.unroll(bits):
            s[0] = s[0] + T.shfl_xor(s[0], top >> b)

    @T.macro
    def softmax(p, s):
        s[0] = p[0]
        for b in T.unroll(bits):
            s[0] = T.max(s[0], T.shfl_xor(s[0], rows >> b))
        p[0] = T.exp(p[0] - s[0])
        lane_sum(p[0], s, rows)
        p[0] = p[0] / s[0]

    @T.prim_func
    def sinkhorn_normalize_backward(grad_out: T.Tensor((Tn, m, m), F32), comb: T.Tensor((Tn, m, m), F32),
                                    grad_comb: T.Tensor((Tn, m, m), F32), repeat: T.int32, eps: T.float32):
        with T.Kernel(T.ceildiv(Tn, per), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            tok = bx * per + tx // mm
            r = (tx % mm) // m
            c = tx % m
            ys = T.alloc_local((2 * MAX_REPEAT,), F32)
            p = T.alloc_local((1,), F32)
            y = T.alloc_local((1,), F32)
            g = T.alloc_local((1,), F32)
            s = T.alloc_local((1,), F32)
            d = T.alloc_local((1,), F32)
            p[0] = T.float32(0)
            g[0] = T.float32(0)
            if tok < Tn:
                p[0] = comb[tok, r, c]
                g[0] = grad_out[tok, r, c]
            softmax(p, s)
            y[0] = p[0] + eps
            steps = 2 * repeat - 1                  # column, then (row, column) x (repeat - 1)
            for k in T.serial(steps):
                ys[k] = y[0]
                lane_sum(y[0], s, T.if_then_else(k % 2 == 0, cols, rows))
                y[0] = y[0] / (s[0] + eps)
            for kk in T.serial(steps):
                k = steps - 1 - kk
                top = T.if_then_else(k % 2 == 0, cols, rows)
                lane_sum(ys[k], s, top)
                lane_sum(g[0] * ys[k] / (s[0] + eps), d, top)
                g[0] = (g[0] - d[0]) / (s[0] + eps)
            lane_sum(g[0] * p[0], d, rows)
            g[0] = (g[0] - d[0]) * p[0]
            if tok < Tn:
                grad_comb[tok, r, c] = g[0]

    return sinkhorn_normalize_backward


def split_mixes_backward_kernel():
    import tilelang.language as T

    Tn, m = T.dynamic("T"), T.dynamic("mhc_mult")
    N = m * (m + 2)
    warps = THREADS // 32
    NB = T.ceildiv(Tn, ROWS)

    @T.macro
    def partial_sums(grad_pre, grad_post, grad_comb, mixes, scale, base, grad_mixes, part, post_mult_value):
        with T.Kernel(NB, threads=THREADS) as blk:
            tx = T.get_thread_binding()
            w = tx // 32
            j = tx % 32
            acc = T.alloc_local((2,), F32)
            red = T.alloc_shared((warps, 2, 32), F32)
            acc[0] = T.float32(0)
            acc[1] = T.float32(0)
            if j < N:
                grp = T.if_then_else(j < m, 0, T.if_then_else(j < 2 * m, 1, 2))
                sc = scale[grp]
                for rr in T.serial(ROWS // warps):
                    tok = blk * ROWS + rr * warps + w
                    if tok < Tn:
                        x = mixes[tok, j]
                        sg = T.sigmoid(x * sc + base[j])
                        dv = T.alloc_var(F32)
                        if j < m:
                            dv = grad_pre[tok, j, 0] * sg * (1 - sg)
                        elif j < 2 * m:
                            dv = grad_post[tok, j - m, 0] * post_mult_value * sg * (1 - sg)
                        else:
                            dv = grad_comb[tok, T.truncdiv(j - 2 * m, m), T.truncmod(j - 2 * m, m)]
                        grad_mixes[tok, j] = dv * sc
                        acc[0] = acc[0] + dv
                        acc[1] = acc[1] + dv * x
            red[w, 0, j] = acc[0]
            red[w, 1, j] = acc[1]
            T.sync_threads()
            if tx < 64:
                a = T.alloc_var(F32)
                a = T.float32(0)
                for ww in T.unroll(warps):
                    a = a + red[ww, tx // 32, tx % 32]
                if tx % 32 < N:
                    part[blk, tx // 32, tx % 32] = a

    @T.prim_func
    def mhc_pre_split_mixes_backward(grad_pre: T.Tensor((Tn, m, 1), F32), grad_post: T.Tensor((Tn, m, 1), F32),
                                     grad_comb: T.Tensor((Tn, m, m), F32), mixes: T.Tensor((Tn, N), F32),
                                     scale: T.Tensor((3,), F32), base: T.Tensor((N,), F32),
                                     grad_mixes: T.Tensor((Tn, N), F32), grad_scale: T.Tensor((3,), F32),
                                     grad_base: T.Tensor((N,), F32), part: T.Tensor((NB, 2, N), F32),
                                     post_mult_value: T.float32):
        partial_sums(grad_pre, grad_post, grad_comb, mixes, scale, base, grad_mixes, part, post_mult_value)
        with T.Kernel(1, threads=32) as _:
            j = T.get_thread_binding()
            b = T.alloc_var(F32)
            sc = T.alloc_var(F32)
            b = T.float32(0)
            sc = T.float32(0)
            for blk in T.serial(NB):
                if j < N:
                    b = b + part[blk, 0, j]
                if j < 3:
                    for i in T.serial(N):
                        if T.if_then_else(i < m, 0, T.if_then_else(i < 2 * m, 1, 2)) == j:
                            sc = sc + part[blk, 1, i]
            if j < N:
                grad_base[j] = b
            if j < 3:
                grad_scale[j] = sc

    return mhc_pre_split_mixes_backward


def head_compute_mix_backward_kernel():
    """Two kernels as the split_mixes backward: lane j of each warp takes mix j of its tokens."""
    import tilelang.language as T

    Tn, m, st = T.dynamic("T"), T.dynamic("m"), T.dynamic("st")
    warps = THREADS // 32
    NB = T.ceildiv(Tn, ROWS)

    @T.macro
    def partial_sums(grad_out, input_mix, scale, base, grad_input, part):
        with T.Kernel(NB, threads=THREADS) as blk:
            tx = T.get_thread_binding()
            w = tx // 32
            j = tx % 32
            acc = T.alloc_local((2,), F32)
            red = T.alloc_shared((warps, 2, 32), F32)
            acc[0] = T.float32(0)
            acc[1] = T.float32(0)
            if j < m:
                for rr in T.serial(ROWS // warps):
                    tok = blk * ROWS + rr * warps + w
                    if tok < Tn:
                        x = input_mix[tok, j]
                        sg = T.sigmoid(x * scale[0] + base[j])
                        dv = grad_out[tok, j] * sg * (1 - sg)
                        grad_input[tok, j] = dv * scale[0]
                        acc[0] = acc[0] + dv
                        acc[1] = acc[1] + dv * x
            red[w, 0, j] = acc[0]
            red[w, 1, j] = acc[1]
            T.sync_threads()
            if tx < 64:
                a = T.alloc_var(F32)
                a = T.float32(0)
                for ww in T.unroll(warps):
                    a = a + red[ww, tx // 32, tx % 32]
                if tx % 32 < m:
                    part[blk, tx // 32, tx % 32] = a

    @T.prim_func
    def mhc_head_compute_mix_backward(grad_out: T.Tensor((Tn, m), F32),
                                      input_mix: T.StridedTensor((Tn, m), (st, 1), F32),
                                      scale: T.Tensor((1,), F32), base: T.Tensor((m,), F32),
                                      grad_input: T.Tensor((Tn, m), F32), grad_scale: T.Tensor((1,), F32),
                                      grad_base: T.Tensor((m,), F32), part: T.Tensor((NB, 2, m), F32)):
        partial_sums(grad_out, input_mix, scale, base, grad_input, part)
        with T.Kernel(1, threads=32) as _:
            j = T.get_thread_binding()
            b = T.alloc_var(F32)
            sc = T.alloc_var(F32)
            b = T.float32(0)
            sc = T.float32(0)
            for blk in T.serial(NB):
                if j < m:
                    b = b + part[blk, 0, j]
                if j == 0:
                    for i in T.serial(m):
                        sc = sc + part[blk, 1, i]
            if j < m:
                grad_base[j] = b
            if j == 0:
                grad_scale[0] = sc

    return mhc_head_compute_mix_backward


SPECS = (
    OpSpec(
        name="tkreg.sinkhorn_normalize_backward",
        doc="Gradient of sinkhorn_normalize: grad_out[T, m, m], comb[T, m, m] (the forward's input) -> grad_comb (fp32)",
        tensors=(Tensor("grad_out", ("T", "m", "m"), dtype=F32),
                 Tensor("comb", ("T", "m", "m"), dtype=F32),
                 Tensor("grad_comb", ("T", "m", "m"), dtype=F32, role="output")),
        scalars=(Scalar("repeat", "int32", 10), Scalar("eps", "float32", 1e-6)),
        factory=sinkhorn_backward_kernel,
        variants=tuple(Variant({"mult": k}, rule=f"repeat >= 1 and repeat <= {MAX_REPEAT}") for k in MULTS),
        reference="tkreg.reference.mhc:sinkhorn_normalize_backward",
    ),
    OpSpec(
        name="tkreg.mhc_pre_split_mixes_backward",
        doc="Gradients of mhc_pre_split_mixes: grad_pre, grad_post [T, m, 1], grad_comb [T, m, m], mixes, scale, "
            "base -> grad_mixes [T, m(m+2)], grad_scale [3], grad_base [m(m+2)] (fp32); deterministic",
        tensors=(Tensor("grad_pre", ("T", "mhc_mult", 1), dtype=F32),
                 Tensor("grad_post", ("T", "mhc_mult", 1), dtype=F32),
                 Tensor("grad_comb", ("T", "mhc_mult", "mhc_mult"), dtype=F32),
                 Tensor("mixes", ("T", NMIX), dtype=F32),
                 Tensor("scale", (3,), dtype=F32),
                 Tensor("base", (NMIX,), dtype=F32),
                 Tensor("grad_mixes", ("T", NMIX), dtype=F32, role="output"),
                 Tensor("grad_scale", (3,), dtype=F32, role="output"),
                 Tensor("grad_base", (NMIX,), dtype=F32, role="output"),
                 Tensor("part", (f"(T + {ROWS - 1}) // {ROWS}", 2, NMIX), dtype=F32, role="scratch")),
        scalars=(Scalar("mhc_mult", "int32"), Scalar("post_mult_value", "float32")),
        factory=split_mixes_backward_kernel, variants=(Variant({}, rule="mhc_mult >= 1 and mhc_mult <= 4"),),
        reference="tkreg.reference.mhc:mhc_pre_split_mixes_backward",
    ),
    OpSpec(
        name="tkreg.mhc_head_compute_mix_backward",
        doc="Gradients of mhc_head_compute_mix: grad_out[T, m], input_mix[T, m] (rows may be strided), scale[1], "
            "base[m] -> grad_input [T, m], grad_scale [1], grad_base [m] (fp32); deterministic",
        tensors=(Tensor("grad_out", ("T", "m"), dtype=F32),
                 Tensor("input_mix", ("T", "m"), dtype=F32, strides=("st", 1)),
                 Tensor("scale", (1,), dtype=F32),
                 Tensor("base", ("m",), dtype=F32),
                 Tensor("grad_input", ("T", "m"), dtype=F32, role="output"),
                 Tensor("grad_scale", (1,), dtype=F32, role="output"),
                 Tensor("grad_base", ("m",), dtype=F32, role="output"),
                 Tensor("part", (f"(T + {ROWS - 1}) // {ROWS}", 2, "m"), dtype=F32, role="scratch")),
        factory=head_compute_mix_backward_kernel, variants=(Variant({}, rule="m >= 1 and m <= 32"),),
        reference="tkreg.reference.mhc:mhc_head_compute_mix_backward",
    ),
)
