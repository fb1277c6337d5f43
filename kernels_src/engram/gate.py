"""engram_gate forward and engram_fused_weight.

engram_gate: for each token t and hyper-connection head h (rows of H),
  dot  = sum(x * wh * k * we)                       (raw, fp32; saved for the backward)
  rstd = rsqrt(mean(x^2) + eps), rsqrt(mean(k^2) + eps)
  s    = dot * rstd_x * rstd_k / sqrt(H)
  gate = sigmoid(sign(s) * sqrt(max(|s|, clamp)))   (sign(0) = 0, as torch's)
  out  = x + gate * v[t]                            (fp32, rounded once to x's dtype)
wh * we is formed in fp32 in the kernel (a bf16 x bf16 product is exact in fp32), so the forward
reads the two bf16 weights and needs no engram_fused_weight launch.

One CTA a row (t, h), the row resident in registers: x, k and the weight slices load in 16-byte
slots before the one barrier of the three sums, v after it; x is never re-read.  k and v may be
strided views (token and head strides multiples of 8 elements, contiguous last dim).  H is baked in
at STATIC sizes; every other H % 8 == 0 up to the last RESIDENT bound runs an any-H kernel.
"""
from typing import NamedTuple

from tkreg.spec import OpSpec, Scalar, Tensor, Variant

DTYPES = ("bfloat16",)   # TileKernels' engram is bf16 only
VEC = 8                  # bf16 a 16-byte slot holds


class Resident(NamedTuple):
    """Rows lo < H <= hi on `threads` threads, hi / (8 * threads) 16-byte slots a thread."""
    lo: int
    hi: int
    threads: int


# V4's hidden sizes with H baked in (no bounds checks; 7168 pads to 4 slots of 2048 columns).
STATIC = ((4096, 256), (7168, 256))
RESIDENT = (Resident(0, 2048, 256), Resident(2048, 4096, 256), Resident(4096, 8192, 256),
            Resident(8192, 16384, 512))


def engram_gate_kernel(H: int, dtype: str, threads: int, max_h: int):
    """H > 0 bakes the row length in; H == 0 takes any H % 8 == 0 up to max_h."""
    import tilelang.language as T

    Tn, m = T.dynamic("T"), T.dynamic("m")
    Hs = H or T.dynamic("H")
    kst, ksh, vst = T.dynamic("kst", "int64"), T.dynamic("ksh", "int64"), T.dynamic("vst", "int64")
    f32, vec, warps = "float32", VEC, threads // 32
    chunk = threads * vec
    slots = max_h // chunk
    assert slots * chunk == max_h, (max_h, threads)

    @T.prim_func
    def engram_gate(x: T.Tensor((Tn, m, Hs), dtype), k: T.StridedTensor((Tn, m, Hs), (kst, ksh, 1), dtype),
                    v: T.StridedTensor((Tn, Hs), (vst, 1), dtype), wh: T.Tensor((m, Hs), dtype),
                    we: T.Tensor((m, Hs), dtype), out: T.Tensor((Tn, m, Hs), dtype),
                    dot: T.Tensor((Tn, m), f32), gate: T.Tensor((Tn, m), f32),
                    rstd_x: T.Tensor((Tn, m), f32), rstd_k: T.Tensor((Tn, m), f32),
                    clamp: T.float32, eps: T.float32):
        with T.Kernel(Tn * m, threads=threads) as row:
            if not H:
                T.assume(Hs % vec == 0)
            T.assume(kst % vec == 0)
            T.assume(ksh % vec == 0)
            T.assume(vst % vec == 0)
            tx = T.get_thread_binding()
            tok = T.alloc_var("int32")
            head = T.alloc_var("int32")
            tok = row // m
            head = row - tok * m
            xa = T.alloc_local((slots, vec), dtype)
            ka = T.alloc_local((slots, vec), dtype)
            wa = T.alloc_local((slots, vec), dtype)
            wb = T.alloc_local((slots, vec), dtype)
            va = T.alloc_local((vec,), dtype)
            acc = T.alloc_local((3,), f32)          # sum x^2, sum k^2, sum x * w * k
            tot = T.alloc_local((3,), f32)
            red = T.alloc_shared((3, warps), f32)
            g = T.alloc_local((1,), f32)
            for j in T.unroll(3):
                acc[j] = T.float32(0)
            for i in T.unroll(slots):                # every load before the barrier
                if i * chunk + tx * vec < Hs:
                    for e in T.vectorized(vec):
                        xa[i, e] = x[tok, head, i * chunk + tx * vec + e]
                    for e in T.vectorized(vec):
                        ka[i, e] = k[tok, head, i * chunk + tx * vec + e]
                    for e in T.vectorized(vec):
                        wa[i, e] = wh[head, i * chunk + tx * vec + e]
                    for e in T.vectorized(vec):
                        wb[i, e] = we[head, i * chunk + tx * vec + e]
            for i in T.unroll(slots):
                if i * chunk + tx * vec < Hs:
                    for e in T.unroll(vec):
                        xf = T.cast(xa[i, e], f32)
                        kf = T.cast(ka[i, e], f32)
                        acc[0] = acc[0] + xf * xf
                        acc[1] = acc[1] + kf * kf
                        acc[2] = acc[2] + xf * (T.cast(wa[i, e], f32) * T.cast(wb[i, e], f32)) * kf
            for j in T.unroll(3):
                for s in T.unroll(5):
                    acc[j] = acc[j] + T.shfl_xor(acc[j], 16 >> s)
                if tx % 32 == 0:
                    red[j, tx // 32] = acc[j]
            T.sync_threads()
            for j in T.unroll(3):
                tot[j] = T.float32(0)
                for w in T.unroll(warps):
                    tot[j] = tot[j] + red[j, w]
            rx = T.rsqrt(tot[0] / T.cast(Hs, f32) + eps)
            rk = T.rsqrt(tot[1] / T.cast(Hs, f32) + eps)
            sc = tot[2] * rx * rk / T.sqrt(T.cast(Hs, f32))
            root = T.sqrt(T.max(T.abs(sc), clamp))
            g[0] = T.sigmoid(T.if_then_else(sc > 0, root, T.if_then_else(sc < 0, -root, T.float32(0))))
            if tx == 0:
                dot[tok, head] = tot[2]
                gate[tok, head] = g[0]
                rstd_x[tok, head] = rx
                rstd_k[tok, head] = rk
            for i in T.unroll(slots):
                if i * chunk + tx * vec < Hs:
                    for e in T.vectorized(vec):
                        va[e] = v[tok, i * chunk + tx * vec + e]
                    for e in T.unroll(vec):
                        xa[i, e] = T.cast(T.cast(xa[i, e], f32) + g[0] * T.cast(va[e], f32), dtype)
                    for e in T.vectorized(vec):
                        out[tok, head, i * chunk + tx * vec + e] = xa[i, e]

    return engram_gate


def engram_fused_weight_kernel(dtype: str, threads: int):
    """wh * we in fp32, 8 elements a thread (any m, H % 8 == 0)."""
    import tilelang.language as T

    m, H = T.dynamic("m"), T.dynamic("H")
    vec = VEC

    @T.prim_func
    def engram_fused_weight(wh: T.Tensor((m, H), dtype), we: T.Tensor((m, H), dtype),
                            out: T.Tensor((m, H), "float32")):
        with T.Kernel(T.ceildiv(H, threads * vec), m, threads=threads) as (bx, head):
            T.assume(H % vec == 0)
            tx = T.get_thread_binding()
            a = T.alloc_local((vec,), dtype)
            b = T.alloc_local((vec,), dtype)
            c = T.alloc_local((vec,), "float32")
            col = (bx * threads + tx) * vec
            if col < H:
                for e in T.vectorized(vec):
                    a[e] = wh[head, col + e]
                for e in T.vectorized(vec):
                    b[e] = we[head, col + e]
                for e in T.unroll(vec):
                    c[e] = T.cast(a[e], "float32") * T.cast(b[e], "float32")
                for e in T.vectorized(vec):
                    out[head, col + e] = c[e]

    return engram_fused_weight


STRIDES = "kst % 8 == 0 and ksh % 8 == 0 and vst % 8 == 0"


def row_variants(static, resident):
    """The gate kernels' variants: a static-H one per (H, threads) of `static`, then the any-H
    resident ranges (priority -1) of `resident`, each for bf16 and with the stride rule."""
    fixed = tuple(Variant({"H": h, "dtype": d, "threads": t, "max_h": -(-h // (t * VEC)) * t * VEC},
                          rule=STRIDES) for h, t in static for d in DTYPES)
    ranges = tuple(Variant({"H": 0, "dtype": d, "threads": r.threads, "max_h": r.hi},
                           rule=f"H % 8 == 0 and H > {r.lo} and H <= {r.hi} and {STRIDES}", priority=-1)
                   for r in resident for d in DTYPES)
    return fixed + ranges


SPECS = (
    OpSpec(
        name="tkreg.engram_gate",
        doc="Engram gate forward: out = x + sigmoid(signed_sqrt(clamp(<rmsnorm(x, wh), rmsnorm(k, we)> / sqrt(H)))) * v, "
            "with (dot, gate, rstd_x, rstd_k)[T, m] fp32 saved for the backward",
        tensors=(Tensor("x", ("T", "m", "H"), dtypes=DTYPES),
                 Tensor("k", ("T", "m", "H"), dtype_of="x", strides=("kst", "ksh", 1)),
                 Tensor("v", ("T", "H"), dtype_of="x", strides=("vst", 1)),
                 Tensor("wh", ("m", "H"), dtype_of="x"),
                 Tensor("we", ("m", "H"), dtype_of="x"),
                 Tensor("out", ("T", "m", "H"), dtype_of="x", role="output"),
                 Tensor("dot", ("T", "m"), dtype="float32", role="output"),
                 Tensor("gate", ("T", "m"), dtype="float32", role="output"),
                 Tensor("rstd_x", ("T", "m"), dtype="float32", role="output"),
                 Tensor("rstd_k", ("T", "m"), dtype="float32", role="output")),
        scalars=(Scalar("clamp", "float32"), Scalar("eps", "float32")),
        factory=engram_gate_kernel, variants=row_variants(STATIC, RESIDENT),
        reference="tkreg.reference.engram:engram_gate", backward="tkreg.ops.engram:EngramGateGrad",
    ),
    OpSpec(
        name="tkreg.engram_fused_weight",
        doc="wh[m, H] * we[m, H] in fp32 (the engram gate backward's fused RMSNorm weight)",
        tensors=(Tensor("wh", ("m", "H"), dtypes=DTYPES),
                 Tensor("we", ("m", "H"), dtype_of="wh"),
                 Tensor("out", ("m", "H"), dtype="float32", role="output")),
        factory=engram_fused_weight_kernel,
        variants=tuple(Variant({"dtype": d, "threads": 128}, rule="H % 8 == 0") for d in DTYPES),
        reference="tkreg.reference.engram:engram_fused_weight",
    ),
)
