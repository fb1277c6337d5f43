"""FP8 (e4m3) cast back to bf16: out = bf16(fp32(q) * s), one multiply and one rounding a value.

Scale layouts: per 1 x 128 token group or 128 x 128 block (row-major scales, as the FP8 quants write
them), per 1 x 128 group at any strides (row-major, DeepGEMM's column-major view, or the transposed
per-channel scales of a q^T), and per channel over 128-token groups.  A lane converts 8 fp8 (one
64-bit load) into one 16-byte bf16 store, so a warp writes 512 contiguous bytes (16-fp8 lanes with
two stores 32 bytes apart measured 69% of copy, this 91%).
"""
from kernels_src.common import FP8, SCALE_GROUP, raster as grid_order
from tkreg.spec import OpSpec, Tensor, Variant

from .device import NV, REFERENCE
from .fp8_group import cols_then_rows

THREADS = 256


def dequant_kernel(block_rows: int, raster: str = "cols"):
    """q fp8 * s -> bf16, s row-major per (block_rows x 128) block: 1 = per-token groups, 128 = per
    block.  raster: "cols" (column blocks on grid x, at most MAX_Y row blocks) or "rows" (any M)."""
    import tilelang.language as T

    threads, unroll, nv = THREADS, 2, NV
    R = T.dynamic("M" if block_rows == 1 else "N")
    K = T.dynamic("K")
    s_shape = (R, K // 128) if block_rows == 1 else ((R + 127) // 128, (K + 127) // 128)
    warps = threads // 32
    span = 32 * nv                       # columns a warp covers per load

    @T.prim_func
    def dequant(q: T.Tensor((R, K), FP8), s: T.Tensor(s_shape, "float32"),
                out: T.Tensor((R, K), "bfloat16")):
        dims, unpack = grid_order(T, raster, T.ceildiv(R, warps), T.ceildiv(K, span * unroll))
        with T.Kernel(*dims, threads=threads) as blk:
            bx, by = unpack(blk)
            T.assume(K % (SCALE_GROUP if block_rows == 1 else 16) == 0)
            tx = T.get_thread_binding()
            row = bx * warps + tx // 32
            ql = T.alloc_local((unroll * nv,), FP8)
            sc = T.alloc_local((unroll,), "float32")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < R and col < K:
                    for v in T.vectorized(nv):
                        ql[u * nv + v] = q[row, col + v]
                    sc[u] = s[row // block_rows, col // SCALE_GROUP]
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < R and col < K:
                    for v in T.vectorized(8):   # 16-byte stores (never 32: `out` may be 16-aligned)
                        out[row, col + v] = T.cast(T.cast(ql[u * nv + v], "float32") * sc[u], "bfloat16")

    return dequant


def layout_dequant_kernel(layout: str, unroll: int = 2):
    """layout "group": q[R, C], s[R, ceil(C / 128)] with any strides (ss0, ss1);
    "channel": q[M, K], s[ceil(M / 128), K] (scale per column per 128-row group).
    unroll: 16-byte vectors a lane has in flight.  Column blocks fastest on one flat grid."""
    import tilelang.language as T

    threads, nv = THREADS, NV
    R, C = T.dynamic("R"), T.dynamic("C")
    warps = threads // 32
    span = 32 * nv
    if layout == "group":
        ss0, ss1 = T.dynamic("ss0"), T.dynamic("ss1")
        S = T.StridedTensor((R, (C + 127) // 128), (ss0, ss1), "float32")
    else:
        S = T.Tensor(((R + 127) // 128, C), "float32")
    grid, unpack = grid_order(T, "flat", T.ceildiv(R, warps), T.ceildiv(C, span * unroll))

    @T.prim_func
    def fp8_dequant(q: T.Tensor((R, C), FP8), s: S, out: T.Tensor((R, C), "bfloat16")):
        with T.Kernel(*grid, threads=threads) as blk:
            bx, by = unpack(blk)
            T.assume(C % 8 == 0)
            tx = T.get_thread_binding()
            row = bx * warps + tx // 32
            ql = T.alloc_local((unroll * nv,), FP8)
            sc = T.alloc_local((unroll * nv,), "float32")
            o = T.alloc_local((nv,), "bfloat16")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < R and col < C:
                    for v in T.vectorized(nv):
                        ql[u * nv + v] = q[row, col + v]
                    if layout == "group":
                        sc[u * nv] = s[row, col // 128]
                    else:
                        for v in T.vectorized(nv):
                            sc[u * nv + v] = s[row // 128, col + v]
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < R and col < C:
                    if layout == "group":
                        for v in T.unroll(nv):
                            o[v] = T.cast(T.cast(ql[u * nv + v], "float32") * sc[u * nv], "bfloat16")
                    else:
                        for v in T.unroll(nv):
                            o[v] = T.cast(T.cast(ql[u * nv + v], "float32") * sc[u * nv + v], "bfloat16")
                    T.stg128(out[row, col], T.reinterpret(o[T.Ramp(0, 1, 8)], "uint32x4"))

    return fp8_dequant


def _dequant_spec(name, block_rows, rows, s_shape, rule, doc):
    return OpSpec(
        name=name, doc=doc,
        tensors=(Tensor("q", (rows, "K"), dtypes=(FP8,)),
                 Tensor("s", s_shape, dtype="float32"),
                 Tensor("out", (rows, "K"), dtype="bfloat16", role="output")),
        factory=dequant_kernel, variants=cols_then_rows(dict(block_rows=block_rows), rule, rows, 8),
        reference=REFERENCE + name.split(".")[1])


SPECS = (
    _dequant_spec("tkreg.per_token_group_dequant", 1, "M", ("M", "K // 128"), "K % 128 == 0",
                  "q[M, K] e4m3, s[M, K // 128] fp32 -> bf16 q * s (K % 128 == 0)"),
    _dequant_spec("tkreg.per_block_dequant", 128, "N", ("(N + 127) // 128", "(K + 127) // 128"), "K % 16 == 0",
                  "q[N, K] e4m3, s[ceil(N/128), ceil(K/128)] fp32 -> bf16 q * s (K % 16 == 0)"),
    OpSpec(
        name="tkreg.group_dequant_fp8",
        doc="q[R, C] e4m3, s[R, ceil(C / 128)] fp32 with any strides (row-major, DeepGEMM column-major "
            "view, or s.t() of per-channel scales for a q^T) -> bf16 q * s (C % 8 == 0)",
        tensors=(Tensor("q", ("R", "C"), dtypes=(FP8,)),
                 Tensor("s", ("R", "(C + 127) // 128"), dtype="float32", strides=("ss0", "ss1")),
                 Tensor("out", ("R", "C"), dtype="bfloat16", role="output")),
        factory=layout_dequant_kernel, variants=(Variant(dict(layout="group"), rule="C % 8 == 0"),),
        reference=REFERENCE + "group_dequant_fp8"),
    OpSpec(
        name="tkreg.per_channel_dequant_fp8",
        doc="q[M, K] e4m3, s[ceil(M / 128), K] fp32 -> bf16 q * s (K % 8 == 0)",
        tensors=(Tensor("q", ("R", "C"), dtypes=(FP8,)),
                 Tensor("s", ("(R + 127) // 128", "C"), dtype="float32"),
                 Tensor("out", ("R", "C"), dtype="bfloat16", role="output")),
        # 4 vectors a lane in flight: +0.8-1.2 points of a same-size copy (docs/quant-tuning.md)
        factory=layout_dequant_kernel, variants=(Variant(dict(layout="channel", unroll=4), rule="C % 8 == 0"),),
        reference=REFERENCE + "per_channel_dequant_fp8"),
)
