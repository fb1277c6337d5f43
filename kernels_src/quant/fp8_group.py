"""FP8 (e4m3) per-token-group and per-block quantization, and the fused SwiGLU + per-token-group cast.

Thread-level kernels that read the input once and keep it in registers.  Group kernels: a warp a
row, each 16-lane half-warp owns one 128-element group (16 bytes a lane a 128-bit load), the group
amax is four `shfl_xor`s, and each lane issues all `unroll` loads (32 bytes, 128 with SwiGLU)
before any math.  Column blocks go on grid x, so neighbouring CTAs stream neighbouring memory
(+4-8% over rows first on the H200), with a rows-first fallback past MAX_Y row blocks.  Block
quant: one 256-thread CTA a 128 x 128 block, 8 loads (128 bytes) a thread, the block amax by
shuffles and one shared-memory slot a warp.  Outputs: 8-byte fp8 stores.
"""
from kernels_src.common import DTYPES, FP8, MAX_Y, SCALE_GROUP, raster as grid_order
from tkreg.spec import OpSpec, Tensor, Variant

from .device import NV, REFERENCE, UE8M0, block_amax_macro, scale_macro, silu_mul

def group_quant_kernel(dtype: str, layout: str = "row", silu: int = 0, threads: int = 128,
                       unroll: int | None = None, min_blocks: int = 8, raster: str = "cols"):
    """x[M, K] (or [M, 2K'] with silu) -> q fp8, s fp32 per 128 elements of a row.

    layout "row": s[M, K // 128]; "col": s[K // 128, M_pad] (DeepGEMM's column-major,
    TMA-aligned scales, M_pad = ceil(M / 4) * 4; columns M..M_pad are not written).
    silu: x = [g | u], quantizes silu(g) * u computed in fp32 (device.silu_mul), no bf16 step.
    unroll: 128-element groups a lane's half-warp covers (default 4 with silu, else 2).
    raster: "cols" (column blocks on grid x: at most MAX_Y row blocks) or "rows" (any M).
    """
    import tilelang.language as T

    scale_of = scale_macro(T)
    M = T.dynamic("M")
    if silu:
        N = T.dynamic("N")
        x_shape, K, KG = (M, N), N // 2, N // (2 * SCALE_GROUP)
    else:
        N = K = T.dynamic("K")
        x_shape, KG = (M, K), K // SCALE_GROUP
    s_shape = (M, KG) if layout == "row" else (KG, (M + 3) // 4 * 4)
    warps = threads // 32
    unroll = unroll or (4 if silu else 2)   # tuned on the H200 (docs/quant-tuning.md)
    nv = NV
    ld = unroll * nv

    @T.prim_func
    def group_quant(x: T.Tensor(x_shape, dtype), q: T.Tensor((M, K), FP8),
                    s: T.Tensor(s_shape, "float32"), ue8m0: T.bool):
        dims, unpack = grid_order(T, raster, T.ceildiv(M, warps), T.ceildiv(KG, 2 * unroll))
        with T.Kernel(*dims, threads=threads) as blk:
            bx, by = unpack(blk)
            T.assume(N % (2 * SCALE_GROUP if silu else SCALE_GROUP) == 0)
            T.annotate_min_blocks_per_sm(min_blocks)
            tx = T.get_thread_binding()
            row = bx * warps + tx // 32
            g = T.alloc_local((ld,), dtype)
            h = T.alloc_local((ld,), dtype)
            y = T.alloc_local((ld,), "float32")
            ql = T.alloc_local((nv,), FP8)
            amax = T.alloc_local((unroll,), "float32")
            sf = T.alloc_local((unroll,), "float32")
            inv = T.alloc_local((unroll,), "float32")
            for u in T.unroll(unroll):          # every load first: unroll x 16 bytes (x 32 with SwiGLU)
                kg = by * (2 * unroll) + u * 2 + (tx % 32) // 16
                col = kg * SCALE_GROUP + (tx % 16) * nv
                if row < M and kg < KG:
                    for v in T.vectorized(nv):
                        g[u * nv + v] = x[row, col + v]
                    if silu:
                        for v in T.vectorized(nv):
                            h[u * nv + v] = x[row, K + col + v]
                else:
                    for v in T.vectorized(nv):
                        g[u * nv + v] = T.cast(0, dtype)
                    if silu:
                        for v in T.vectorized(nv):
                            h[u * nv + v] = T.cast(0, dtype)
            for u in T.unroll(unroll):
                amax[u] = T.float32(0)
                for v in T.unroll(nv):
                    gv = T.cast(g[u * nv + v], "float32")
                    if silu:
                        y[u * nv + v] = silu_mul(T, gv, T.cast(h[u * nv + v], "float32"))
                    else:
                        y[u * nv + v] = gv
                    amax[u] = T.max(amax[u], T.abs(y[u * nv + v]))
                for o in T.unroll(4):           # the 16 lanes of a group: xor 8, 4, 2, 1
                    amax[u] = T.max(amax[u], T.shfl_xor(amax[u], 8 >> o))
            for u in T.unroll(unroll):
                kg = by * (2 * unroll) + u * 2 + (tx % 32) // 16
                col = kg * SCALE_GROUP + (tx % 16) * nv
                scale_of(amax, u, ue8m0, sf, inv)
                for v in T.vectorized(nv):
                    ql[v] = T.cast(y[u * nv + v] * inv[u], FP8)
                if row < M and kg < KG:
                    for v in T.vectorized(nv):
                        q[row, col + v] = ql[v]
                    if tx % 16 == 0:
                        if layout == "row":
                            s[row, kg] = sf[u]
                        else:
                            s[kg, row] = sf[u]

    return group_quant


def block_quant_kernel(dtype: str):
    """w[N, K] -> q fp8, s[ceil(N/128), ceil(K/128)]: one 256-thread CTA per 128x128 block, read once."""
    import tilelang.language as T

    threads = 256
    scale_of = scale_macro(T)
    N, K = T.dynamic("N"), T.dynamic("K")
    nv = NV
    rows = threads // 16                 # rows covered per pass (16 lanes x 8 = 128 columns)
    passes = SCALE_GROUP // rows
    warps = threads // 32
    block_amax = block_amax_macro(T, warps)

    @T.prim_func
    def block_quant(w: T.Tensor((N, K), dtype), q: T.Tensor((N, K), FP8),
                    s: T.Tensor(((N + 127) // 128, (K + 127) // 128), "float32"), ue8m0: T.bool):
        with T.Kernel(T.ceildiv(K, SCALE_GROUP), T.ceildiv(N, SCALE_GROUP), threads=threads) as (bx, by):
            T.assume(K % 16 == 0)
            T.annotate_min_blocks_per_sm(3)      # <= 80 registers: 3 CTAs (96 KB of loads) per SM
            tx = T.get_thread_binding()
            red = T.alloc_shared((warps,), "float32")
            xl = T.alloc_local((passes * nv,), dtype)
            ql = T.alloc_local((nv,), FP8)
            amax = T.alloc_local((1,), "float32")
            sf = T.alloc_local((1,), "float32")
            inv = T.alloc_local((1,), "float32")
            col = bx * SCALE_GROUP + (tx % 16) * nv
            for p in T.unroll(passes):
                row = by * SCALE_GROUP + p * rows + tx // 16
                if row < N and col < K:
                    for v in T.vectorized(nv):
                        xl[p * nv + v] = w[row, col + v]
                else:
                    for v in T.vectorized(nv):
                        xl[p * nv + v] = T.cast(0, dtype)
            block_amax(xl, passes * nv, amax, red, tx)
            scale_of(amax, 0, ue8m0, sf, inv)
            for p in T.unroll(passes):
                row = by * SCALE_GROUP + p * rows + tx // 16
                for v in T.vectorized(nv):
                    ql[v] = T.cast(T.cast(xl[p * nv + v], "float32") * inv[0], FP8)
                if row < N and col < K:
                    for v in T.vectorized(nv):
                        q[row, col + v] = ql[v]
            if tx == 0:
                s[by, bx] = sf[0]

    return block_quant


def cols_then_rows(params, rule, rows, warps):
    """The column-blocks-first kernel while the row blocks fit grid y, then the any-size one."""
    return (Variant(params, rule=f"{rule} and {rows} <= {MAX_Y * warps}", priority=10),
            Variant(dict(params, raster="rows"), rule=rule))


# Column-major scales: 8 rows per CTA, so each group's scales go out as one full 32-byte sector.
_COL_CTA = dict(threads=256, min_blocks=4)


def _mid_rows(params, rule, silu, layout):
    """SwiGLU + quant with row scales below 4096 tokens: one 256-column group pair a warp (unroll 1),
    so a second wave of CTAs overlaps the first's math and stores (H200: 0.83-0.96 -> 0.95-1.08 of a
    same-size copy at 1024-3000 tokens; docs/quant-tuning.md)."""
    if not (silu and layout == "row"):
        return ()
    return (Variant(dict(params, unroll=1), rule=f"{rule} and M < 4096", priority=20),)


def _group_spec(name, doc, layout, silu):
    x = Tensor("x", ("M", "N" if silu else "K"), dtypes=DTYPES)
    k = "N // 2" if silu else "K"
    kg = "N // 256" if silu else "K // 128"
    s = ("M", kg) if layout == "row" else (kg, "(M + 3) // 4 * 4")
    return OpSpec(
        name=name, doc=doc,
        tensors=(x, Tensor("q", ("M", k), dtype=FP8, role="output"),
                 Tensor("s", s, dtype="float32", role="output")),
        scalars=(UE8M0,), factory=group_quant_kernel,
        variants=tuple(v for d in DTYPES for p in [dict(dtype=d, layout=layout, silu=int(silu),
                                                        **_COL_CTA if layout == "col" else {})]
                       for v in _mid_rows(p, "N % 256 == 0", silu, layout) + cols_then_rows(
                           p, "N % 256 == 0" if silu else "K % 128 == 0", "M", 8 if layout == "col" else 4)),
        reference=REFERENCE + name.split(".")[1])


SPECS = (
    _group_spec("tkreg.per_token_group_quant_fp8",
                "x[M, K] -> q[M, K] e4m3, s[M, K // 128] fp32 (groups of 128, K % 128 == 0)", "row", False),
    _group_spec("tkreg.per_token_group_quant_fp8_colmajor",
                "x[M, K] -> q[M, K] e4m3, s[K // 128, ceil(M / 4) * 4] fp32 (DeepGEMM's column-major "
                "TMA-aligned scale layout; the typed op returns s.t()[:M])", "col", False),
    _group_spec("tkreg.silu_and_mul_quant_fp8",
                "x[M, 2I] -> silu(x[:, :I]) * x[:, I:] in fp32 (fast-math silu) -> q[M, I] e4m3, s[M, I // 128] fp32",
                "row", True),
    _group_spec("tkreg.silu_and_mul_quant_fp8_colmajor",
                "x[M, 2I] -> SwiGLU -> q[M, I] e4m3, s[I // 128, ceil(M / 4) * 4] fp32 (column-major)", "col", True),
    OpSpec(
        name="tkreg.per_block_quant_fp8",
        doc="w[N, K] -> q[N, K] e4m3, s[ceil(N/128), ceil(K/128)] fp32 (128x128 blocks, K % 16 == 0)",
        tensors=(Tensor("w", ("N", "K"), dtypes=DTYPES),
                 Tensor("q", ("N", "K"), dtype=FP8, role="output"),
                 Tensor("s", ("(N + 127) // 128", "(K + 127) // 128"), dtype="float32", role="output")),
        scalars=(UE8M0,), factory=block_quant_kernel,
        variants=tuple(Variant(dict(dtype=d), rule="K % 16 == 0") for d in DTYPES),
        reference=REFERENCE + "per_block_quant_fp8"),
)
