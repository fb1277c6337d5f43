"""mhc_pre_big_fuse: the inference chain norm_fn -> split_mixes -> sinkhorn -> apply_mix in two
launches (the fewest the math allows: every token's apply needs its full-K mixes).

1. normfn.partial_products: the split-K partial products and sums of squares.
2. one CTA a token: every thread first issues the loads of its resident residual slots (m rows,
   RESIDENT bounds), then warp 0 sums the split partials in order into the token's N mixes
   (shared memory); after the one barrier every thread forms the m pre weights itself (sigmoid)
   and writes its columns of layer_input; warp 0 then forms post and runs Sinkhorn on the m x m
   comb block, one element a lane (small.sinkhorn_lanes).
Outputs (TileKernels' order): post_mix[T, m, 1], comb_mix[T, m, m] (fp32), layer_input[T, H] bf16.
m = 4 baked in; H run-time, H % 64 == 0 up to 16384.
"""
from typing import NamedTuple

from tkreg.spec import OpSpec, Scalar, Tensor, Variant

from .normfn import DTYPES, KC, MULT, NMIX, PASS_CONFIGS, partial_products, split_rules
from .small import sinkhorn_lanes

F32 = "float32"
VEC = 8


class Resident(NamedTuple):
    """Rows lo < H <= hi on `threads` threads, hi / (8 * threads) 16-byte slots of each of m rows a thread."""
    lo: int
    hi: int
    threads: int


RESIDENT = (Resident(0, 8192, 256), Resident(8192, 16384, 512))


def big_fuse_kernel(dtype: str, splits: int, threads: int, max_h: int):
    import tilelang.language as T

    Tn, H, m = T.dynamic("T"), T.dynamic("H"), T.dynamic("m")   # m == MULT by the rule
    mm, N, vec = MULT, MULT * (MULT + 2), VEC
    chunk = threads * vec
    slots = max_h // chunk
    assert slots * chunk == max_h, (max_h, threads)
    partial = partial_products(Tn, H, m, splits, dtype)
    normalize = sinkhorn_lanes(MULT)

    @T.prim_func
    def mhc_pre_big_fuse(residual: T.Tensor((Tn, m, H), dtype), fn: T.Tensor((N, m * H), F32),
                         scale: T.Tensor((3,), F32), base: T.Tensor((N,), F32), norm_weight: T.Tensor((m * H,), F32),
                         post_mix: T.Tensor((Tn, mm, 1), F32), comb_mix: T.Tensor((Tn, mm, mm), F32),
                         layer_input: T.Tensor((Tn, H), dtype), part_mul: T.Tensor((splits, Tn, N), F32),
                         part_sq: T.Tensor((splits, Tn), F32), rms_eps: T.float32, pre_eps: T.float32,
                         sinkhorn_eps: T.float32, post_mult_value: T.float32, sinkhorn_repeat: T.int32):
        partial(residual, fn, norm_weight, part_mul, part_sq)
        with T.Kernel(Tn, threads=threads) as tok:
            T.assume(H % KC == 0)
            tx = T.get_thread_binding()
            xa = T.alloc_local((slots, mm, vec), dtype)
            o = T.alloc_local((vec,), dtype)
            acc = T.alloc_local((vec,), F32)
            pre = T.alloc_local((mm,), F32)
            mix = T.alloc_shared((N,), F32)
            v = T.alloc_local((1,), F32)
            s = T.alloc_local((1,), F32)
            for i in T.unroll(slots):               # the loads first: in flight through the reduction
                if i * chunk + tx * vec < H:
                    for h in T.unroll(mm):
                        for e in T.vectorized(vec):
                            xa[i, h, e] = residual[tok, h, i * chunk + tx * vec + e]
            if tx < N:
                q = T.alloc_var(F32)
                a = T.alloc_var(F32)
                q = T.float32(0)
                a = T.float32(0)
                for sp in T.serial(splits):
                    a = a + part_mul[sp, tok, tx]
                    q = q + part_sq[sp, tok]
                mix[tx] = a * T.rsqrt(q / T.cast(m * H, F32) + rms_eps)
            T.sync_threads()
            for h in T.unroll(mm):
                pre[h] = T.sigmoid(mix[h] * scale[0] + base[h]) + pre_eps
            for i in T.unroll(slots):
                if i * chunk + tx * vec < H:
                    for e in T.unroll(vec):
                        acc[e] = T.float32(0)
                    for h in T.unroll(mm):
                        for e in T.unroll(vec):
                            acc[e] = acc[e] + pre[h] * T.cast(xa[i, h, e], F32)
                    for e in T.unroll(vec):
                        o[e] = T.cast(acc[e], dtype)
                    for e in T.vectorized(vec):
                        layer_input[tok, i * chunk + tx * vec + e] = o[e]
            if tx < 32:                              # warp 0, whole: the Sinkhorn shuffles
                j = tx % (mm * mm)
                v[0] = mix[2 * mm + j] * scale[2] + base[2 * mm + j]
                rep = T.alloc_var("int32")          # copies: a macro argument that is a bare
                eps = T.alloc_var(F32)              # parameter would be renamed after the macro's
                rep = sinkhorn_repeat
                eps = sinkhorn_eps
                normalize(v, s, rep, eps)
                if tx < mm * mm:
                    comb_mix[tok, j // mm, j % mm] = v[0]
                if tx < mm:
                    post_mix[tok, tx, 0] = T.sigmoid(mix[mm + tx] * scale[1] + base[mm + tx]) * post_mult_value

    return mhc_pre_big_fuse


SPECS = (
    OpSpec(
        name="tkreg.mhc_pre_big_fuse",
        doc="The fused mHC pre (inference): residual[T, m, H] bf16, fn[m(m+2), m*H], scale[3], base[m(m+2)], "
            "norm_weight[m*H] | None (fp32) -> post_mix[T, m, 1], comb_mix[T, m, m] (Sinkhorn-normalised) fp32, "
            "layer_input[T, H] bf16; two launches",
        tensors=(Tensor("residual", ("T", "m", "H"), dtypes=DTYPES),
                 Tensor("fn", (NMIX, "m * H"), dtype=F32),
                 Tensor("scale", (3,), dtype=F32),
                 Tensor("base", (NMIX,), dtype=F32),
                 Tensor("norm_weight", ("m * H",), dtype=F32, optional=True),
                 Tensor("post_mix", ("T", "m", 1), dtype=F32, role="output"),
                 Tensor("comb_mix", ("T", "m", "m"), dtype=F32, role="output"),
                 Tensor("layer_input", ("T", "H"), dtype_of="residual", role="output"),
                 Tensor("part_mul", ("splits", "T", NMIX), dtype=F32, role="scratch"),
                 Tensor("part_sq", ("splits", "T"), dtype=F32, role="scratch")),
        scalars=(Scalar("rms_eps", "float32"), Scalar("pre_eps", "float32"), Scalar("sinkhorn_eps", "float32"),
                 Scalar("post_mult_value", "float32"), Scalar("sinkhorn_repeat", "int32")),
        factory=big_fuse_kernel,
        variants=tuple(Variant({"dtype": d, "splits": s, "threads": r.threads, "max_h": r.hi},
                               rule=f"m == {MULT} and H % {KC} == 0 and H > {r.lo} and H <= {r.hi} "
                                    f"and sinkhorn_repeat >= 1 and {rule}", pass_configs=PASS_CONFIGS)
                       for d in DTYPES for s, rule in split_rules() for r in RESIDENT),
        reference="tkreg.reference.mhc:mhc_pre_big_fuse",
    ),
)
