"""The per-token mix math: mhc_pre_split_mixes, sinkhorn_normalize, mhc_head_compute_mix (fp32).

- mhc_pre_split_mixes(mixes[T, N], scale[3], base[N], mhc_mult, post_mult_value, pre_eps), N =
  m(m+2): v = mixes * scale[group] + base; pre = sigmoid(v[:m]) + pre_eps, post =
  sigmoid(v[m:2m]) * post_mult_value, comb = v[2m:] as m x m.  One thread an element, any m.
- sinkhorn_normalize(comb[T, m, m], repeat, eps): softmax over rows + eps, column-normalise, then
  repeat - 1 rounds of row then column normalisation (each sum + eps).  m * m lanes a token, one
  element a lane: row and column sums are xor-shuffles inside the token's lane group (no shared
  memory, no barrier); m baked in (MULTS), m * m a power of two <= 32.
- mhc_head_compute_mix(input_mix[T, m] (rows may be strided), scale[1], base[m], pre_eps):
  sigmoid(input_mix * scale + base) + pre_eps.  One thread an element, any m.
"""
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from .rows import MULTS

THREADS = 256
F32 = "float32"


def sinkhorn_lanes(mult: int):
    """A macro normalising v[0], element (lane // m, lane % m) of a token's m x m block held by m * m
    neighbouring lanes (every lane of the warp runs it: the shuffles are full-warp)."""
    import tilelang.language as T

    bits = mult.bit_length() - 1
    assert mult == 1 << bits and mult * mult <= 32, mult
    rows, cols = mult // 2, mult * mult // 2          # the largest xor mask of a row / a column

    @T.macro
    def row_sum(v, s):
        s[0] = v[0]
        for b in T.unroll(bits):
            s[0] = s[0] + T.shfl_xor(s[0], rows >> b)

    @T.macro
    def col_sum(v, s):
        s[0] = v[0]
        for b in T.unroll(bits):
            s[0] = s[0] + T.shfl_xor(s[0], cols >> b)

    @T.macro
    def normalize(v, s, repeat, eps):
        s[0] = v[0]
        for b in T.unroll(bits):
            s[0] = T.max(s[0], T.shfl_xor(s[0], rows >> b))
        v[0] = T.exp(v[0] - s[0])
        row_sum(v, s)
        v[0] = v[0] / s[0] + eps
        col_sum(v, s)
        v[0] = v[0] / (s[0] + eps)
        for _ in T.serial(repeat - 1):
            row_sum(v, s)
            v[0] = v[0] / (s[0] + eps)
            col_sum(v, s)
            v[0] = v[0] / (s[0] + eps)

    return normalize


def split_mixes_kernel():
    import tilelang.language as T

    Tn, m = T.dynamic("T"), T.dynamic("mhc_mult")
    N = m * (m + 2)

    @T.prim_func
    def mhc_pre_split_mixes(pre: T.Tensor((Tn, m, 1), F32), post: T.Tensor((Tn, m, 1), F32),
                            comb: T.Tensor((Tn, m, m), F32), mixes: T.Tensor((Tn, N), F32),
                            scale: T.Tensor((3,), F32), base: T.Tensor((N,), F32),
                            post_mult_value: T.float32, pre_eps: T.float32):
        # (outputs first: m is read from pre's shape, then checked against the mixes' m(m+2))
        with T.Kernel(T.ceildiv(Tn * N, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            idx = bx * THREADS + tx
            if idx < Tn * N:
                tok = T.alloc_var("int32")
                j = T.alloc_var("int32")
                tok = T.truncdiv(idx, N)
                j = idx - tok * N
                if j < m:
                    pre[tok, j, 0] = T.sigmoid(mixes[tok, j] * scale[0] + base[j]) + pre_eps
                elif j < 2 * m:
                    post[tok, j - m, 0] = T.sigmoid(mixes[tok, j] * scale[1] + base[j]) * post_mult_value
                else:
                    c = j - 2 * m
                    comb[tok, T.truncdiv(c, m), T.truncmod(c, m)] = mixes[tok, j] * scale[2] + base[j]

    return mhc_pre_split_mixes


def sinkhorn_kernel(mult: int):
    import tilelang.language as T

    Tn, m, mm = T.dynamic("T"), mult, mult * mult
    per = THREADS // mm                               # tokens a CTA
    normalize = sinkhorn_lanes(mult)

    @T.prim_func
    def sinkhorn_normalize(comb: T.Tensor((Tn, m, m), F32), out: T.Tensor((Tn, m, m), F32),
                           repeat: T.int32, eps: T.float32):
        with T.Kernel(T.ceildiv(Tn, per), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            tok = bx * per + tx // mm
            r = (tx % mm) // m
            c = tx % m
            v = T.alloc_local((1,), F32)
            s = T.alloc_local((1,), F32)
            v[0] = T.float32(0)
            if tok < Tn:
                v[0] = comb[tok, r, c]
            rep = T.alloc_var("int32")                # (big_fuse.py says why the copies)
            ep = T.alloc_var(F32)
            rep = repeat
            ep = eps
            normalize(v, s, rep, ep)                  # every lane: the shuffles need the whole warp
            if tok < Tn:
                out[tok, r, c] = v[0]

    return sinkhorn_normalize


def head_compute_mix_kernel():
    import tilelang.language as T

    Tn, m, st = T.dynamic("T"), T.dynamic("m"), T.dynamic("st")

    @T.prim_func
    def mhc_head_compute_mix(input_mix: T.StridedTensor((Tn, m), (st, 1), F32), scale: T.Tensor((1,), F32),
                             base: T.Tensor((m,), F32), out: T.Tensor((Tn, m), F32), pre_eps: T.float32):
        with T.Kernel(T.ceildiv(Tn * m, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            idx = bx * THREADS + tx
            if idx < Tn * m:
                tok = T.alloc_var("int32")
                j = T.alloc_var("int32")
                tok = T.truncdiv(idx, m)
                j = idx - tok * m
                out[tok, j] = T.sigmoid(input_mix[tok, j] * scale[0] + base[j]) + pre_eps

    return mhc_head_compute_mix


NMIX = "mhc_mult * (mhc_mult + 2)"
SPECS = (
    OpSpec(
        name="tkreg.mhc_pre_split_mixes",
        doc="mixes[T, m(m+2)], scale[3], base[m(m+2)] (fp32) -> pre = sigmoid(.) + pre_eps [T, m, 1], "
            "post = sigmoid(.) * post_mult_value [T, m, 1], comb [T, m, m] (the raw m x m block)",
        tensors=(Tensor("mixes", ("T", NMIX), dtype=F32),
                 Tensor("scale", (3,), dtype=F32),
                 Tensor("base", (NMIX,), dtype=F32),
                 Tensor("pre", ("T", "mhc_mult", 1), dtype=F32, role="output"),
                 Tensor("post", ("T", "mhc_mult", 1), dtype=F32, role="output"),
                 Tensor("comb", ("T", "mhc_mult", "mhc_mult"), dtype=F32, role="output")),
        scalars=(Scalar("mhc_mult", "int32"), Scalar("post_mult_value", "float32"), Scalar("pre_eps", "float32")),
        factory=split_mixes_kernel, variants=(Variant({}, rule="mhc_mult >= 1"),),
        reference="tkreg.reference.mhc:mhc_pre_split_mixes", backward="tkreg.ops.mhc:SplitMixesGrad",
    ),
    OpSpec(
        name="tkreg.sinkhorn_normalize",
        doc="comb[T, m, m] fp32 -> Sinkhorn-normalised: softmax over rows + eps, column-normalised, "
            "then repeat - 1 rounds of row and column normalisation (sums + eps)",
        tensors=(Tensor("comb", ("T", "m", "m"), dtype=F32),
                 Tensor("out", ("T", "m", "m"), dtype=F32, role="output")),
        scalars=(Scalar("repeat", "int32", 10), Scalar("eps", "float32", 1e-6)),
        factory=sinkhorn_kernel,
        variants=tuple(Variant({"mult": k}, rule="repeat >= 1") for k in MULTS),
        reference="tkreg.reference.mhc:sinkhorn_normalize", backward="tkreg.ops.mhc:SinkhornGrad",
    ),
    OpSpec(
        name="tkreg.mhc_head_compute_mix",
        doc="input_mix[T, m] (rows may be strided), scale[1], base[m] (fp32) -> sigmoid(input_mix * scale + base) + pre_eps",
        tensors=(Tensor("input_mix", ("T", "m"), dtype=F32, strides=("st", 1)),
                 Tensor("scale", (1,), dtype=F32),
                 Tensor("base", ("m",), dtype=F32),
                 Tensor("out", ("T", "m"), dtype=F32, role="output")),
        scalars=(Scalar("pre_eps", "float32"),),
        factory=head_compute_mix_kernel, variants=(Variant({}, rule="m >= 1"),),
        reference="tkreg.reference.mhc:mhc_head_compute_mix", backward="tkreg.ops.mhc:HeadComputeMixGrad",
    ),
)
