"""E5M6: 12-bit codes (fp16's sign, 5-bit exponent and top 6 mantissa bits, RNE), 8 values packed
into 12 bytes, one fp32 scale per token (the FP8 scale rule with qmax = 65024), and the cast back.

Quant: one CTA a token (the scale is per token), the row held in registers across a block-wide
amax, the fp16 step by cvt.rz.f16x2, three 32-bit stores per 8 values.
"""
from kernels_src.common import DTYPES, raster as grid_order
from tkreg.reference.quant import E5M6_MAX
from tkreg.spec import OpSpec, Tensor, Variant

from .device import NV, PRELUDE, REFERENCE, UE8M0, block_amax_macro, scale


def _e5m6(T, y):
    """12-bit E5M6 codes of the fp32 pair y = (y0, y1) (tkreg/reference/quant.py: fp16 RTZ, then
    RNE on the fp32's 17 dropped bits).  The fp16 step is one cvt.rz.f16x2.f32 for two values: RZ,
    fp16 subnormals, inf for inf, sign kept, the reference's rule for every |y| < 65536 (the scale
    keeps |y| <= 65024; only a NaN's sign can differ: the hardware gives 0x7FFF).  ~12
    instructions a value, against ~35 for the integer fp32 -> fp16 rebase."""
    U = T.uint32
    h2 = T.call_extern("uint32", "tk_f16x2_rz", y[0], y[1])
    out = []
    for h, v in ((h2, y[0]), (h2 >> U(16), y[1])):
        c = (h >> U(4)) & U(0xFFF)
        up = ((T.reinterpret(v, "uint32") & U(0x1FFFF)) + U(0xFFFF) + (c & U(1))) >> U(17)
        out.append((c + up) & U(0xFFF))
    return out


def e5m6_quant_kernel(dtype: str, threads: int = 256, min_blocks: int = 0):
    """x[M, K] -> p[M, 3K/2] uint8, s[M] fp32 (one scale per token; K % 8 == 0, K <= threads * 64).

    One CTA a token, 8 16-byte vectors a thread held in registers across the block amax: 128
    threads serve K <= 8192, 256 held to 3 CTAs/SM (min_blocks: __launch_bounds__(threads,
    min_blocks)) up to 16384 (docs/quant-tuning.md).
    """
    import tilelang.language as T

    vecs, nv = 8, NV
    M, K = T.dynamic("M"), T.dynamic("K")
    warps = threads // 32
    U = T.uint32
    block_amax = block_amax_macro(T, warps)

    @T.prim_func
    def e5m6_quant(x: T.Tensor((M, K), dtype), p: T.Tensor((M, K * 3 // 2), "uint8"),
                   s: T.Tensor((M,), "float32"), ue8m0: T.bool):
        with T.Kernel(M, threads=threads, prelude=PRELUDE) as row:
            T.assume(K % 8 == 0)
            if min_blocks:
                T.annotate_min_blocks_per_sm(min_blocks)
            tx = T.get_thread_binding()
            g = T.alloc_local((vecs * nv,), dtype)
            hc = T.alloc_local((nv,), "uint32")
            yy = T.alloc_local((nv,), "float32")
            am = T.alloc_local((1,), "float32")
            red = T.alloc_shared((warps,), "float32")
            for i in T.unroll(vecs):
                col = (i * threads + tx) * nv
                if col < K:
                    for v in T.vectorized(nv):
                        g[i * nv + v] = x[row, col + v]
                else:
                    for v in T.vectorized(nv):
                        g[i * nv + v] = T.cast(0, dtype)
            block_amax(g, vecs * nv, am, red, tx)
            sf = T.alloc_local((2,), "float32")
            sf[0] = scale(T, am[0], E5M6_MAX, ue8m0)[0]
            sf[1] = scale(T, am[0], E5M6_MAX, ue8m0)[1]
            if tx == 0:
                s[row] = sf[0]
            for i in T.unroll(vecs):
                col = (i * threads + tx) * nv
                if col < K:
                    for v in T.unroll(nv):
                        yy[v] = T.cast(g[i * nv + v], "float32") * sf[1]
                    for v in T.unroll(nv // 2):
                        c2 = _e5m6(T, (yy[2 * v], yy[2 * v + 1]))
                        hc[2 * v] = c2[0]
                        hc[2 * v + 1] = c2[1]
                    off = col // 8 * 12
                    T.stg32(p[row, off], (hc[0] << U(20)) | (hc[1] << U(8)) | (hc[2] >> U(4)))
                    T.stg32(p[row, off + 4], (hc[2] << U(28)) | (hc[3] << U(16)) | (hc[4] << U(4)) | (hc[5] >> U(8)))
                    T.stg32(p[row, off + 8], (hc[5] << U(24)) | (hc[6] << U(12)) | hc[7])

    return e5m6_quant


def e5m6_dequant_kernel():
    """p[M, 3K/2] uint8, s[M] fp32 -> out[M, K] bf16 (8 values = 12 bytes a lane, 2 in flight);
    column blocks fastest on one flat grid."""
    import tilelang.language as T

    threads, unroll, nv = 256, 2, NV
    M, P = T.dynamic("M"), T.dynamic("P")
    K = P // 3 * 2
    warps = threads // 32
    span = 32 * nv
    U = T.uint32
    grid, unpack = grid_order(T, "flat", T.ceildiv(M, warps), T.ceildiv(K, span * unroll))

    @T.prim_func
    def e5m6_dequant(p: T.Tensor((M, P), "uint8"), s: T.Tensor((M,), "float32"),
                     out: T.Tensor((M, K), "bfloat16")):
        with T.Kernel(*grid, threads=threads) as blk:
            bx, by = unpack(blk)
            T.assume(P % 12 == 0)
            tx = T.get_thread_binding()
            row = bx * warps + tx // 32
            w = T.alloc_local((unroll * 3,), "uint32")
            hc = T.alloc_local((nv,), "uint32")
            o = T.alloc_local((nv,), "bfloat16")
            sc = T.alloc_local((1,), "float32")
            if row < M:
                sc[0] = s[row]
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < M and col < K:
                    for j in T.unroll(3):
                        w[u * 3 + j] = T.reinterpret(T.ldg32(p[row, col // 8 * 12 + 4 * j]), "uint32")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < M and col < K:
                    hc[0] = w[u * 3] >> U(20)
                    hc[1] = w[u * 3] >> U(8)
                    hc[2] = (w[u * 3] << U(4)) | (w[u * 3 + 1] >> U(28))
                    hc[3] = w[u * 3 + 1] >> U(16)
                    hc[4] = w[u * 3 + 1] >> U(4)
                    hc[5] = (w[u * 3 + 1] << U(8)) | (w[u * 3 + 2] >> U(24))
                    hc[6] = w[u * 3 + 2] >> U(12)
                    hc[7] = w[u * 3 + 2]
                    for v in T.unroll(nv):
                        f = T.reinterpret(T.cast((hc[v] & U(0xFFF)) << U(4), "uint16"), "float16")
                        o[v] = T.cast(T.cast(f, "float32") * sc[0], "bfloat16")
                    T.stg128(out[row, col], T.reinterpret(o[T.Ramp(0, 1, 8)], "uint32x4"))

    return e5m6_dequant


SPECS = (
    OpSpec(
        name="tkreg.quant_e5m6",
        doc="x[M, K] -> p[M, 3K/2] uint8 (12-bit E5M6 codes, 8 per 12 bytes), s[M] fp32 per token "
            "(TileKernels' per_token_cast_to_e5m6; K % 8 == 0, K <= 16384)",
        tensors=(Tensor("x", ("M", "K"), dtypes=DTYPES), Tensor("p", ("M", "K * 3 // 2"), dtype="uint8", role="output"),
                 Tensor("s", ("M",), dtype="float32", role="output")),
        scalars=(UE8M0,), factory=e5m6_quant_kernel,
        variants=tuple(v for d in DTYPES for v in (
            Variant(dict(dtype=d, threads=128), rule="K % 8 == 0 and K <= 8192", priority=1),
            # 256 threads held to 3 CTAs/SM: 0.87 -> 0.93-0.97 of a same-size copy
            Variant(dict(dtype=d, threads=256, min_blocks=3), rule="K % 8 == 0 and K <= 16384"))),
        reference=REFERENCE + "quant_e5m6"),
    OpSpec(
        name="tkreg.dequant_e5m6",
        doc="p[M, P = 3K/2] uint8 E5M6, s[M] fp32 -> bf16 [M, K] (K % 8 == 0, i.e. P % 12 == 0)",
        tensors=(Tensor("p", ("M", "P"), dtypes=("uint8",)), Tensor("s", ("M",), dtype="float32"),
                 Tensor("out", ("M", "P // 3 * 2"), dtype="bfloat16", role="output")),
        factory=e5m6_dequant_kernel, variants=(Variant({}, rule="P % 12 == 0"),),
        reference=REFERENCE + "dequant_e5m6"),
)
