"""FP8 (e4m3) quantization: per-token-group and per-block casts, cast back, fused SwiGLU + cast.

Semantics (DeepSeek / DeepGEMM / TileKernels), exact and shared with tkreg/reference/fp8.py:
  amax  = max |x| over the group (128 contiguous elements of a row, or a 128x128 block), in fp32,
          clamped below at AMAX_FLOOR = 1e-4 (an all-zero group gets scale 1e-4 / 448, not 0);
  s     = amax / 448                  (IEEE fp32 division, round to nearest even; note torch's
                                       CUDA `tensor / 448.0` multiplies by fl(1/448) instead)
  q     = e4m3(x * (448 / amax))      (448 / amax rounded to fp32, one fp32 multiply, then one
                                       round-to-nearest-even, saturating cast to e4m3)
  ue8m0 = 1: s = 2^ceil(log2(amax / 448)) (from the bits of the rounded quotient: a power of two
          stays, anything above rounds up), still stored as fp32, and q = e4m3(x * 2^-e), exact
          up to the final cast.
  dequant: out = bf16(fp32(q) * s), one fp32 multiply and one round to bf16.
  SwiGLU: y = silu(g) * u in fp32 with the fast-math silu(g) = __fdividef(g, 1 + __expf(-g))
          (ex2.approx and rcp.approx: a few fp32 ulps from torch's expf / IEEE division, ~5
          instructions instead of ~20 — the precise form made this kernel ALU-bound at 79% of
          copy bandwidth), then quantized as above with no intermediate bf16 rounding.  So codes
          match the reference except where y lands within a few ulps of an e4m3 rounding
          boundary (about 1 in 10^6 elements on the H200, one e4m3 step off), and scales agree
          to 1e-6 relative.
Non-finite inputs give unspecified outputs (NaN or saturated values).

The kernels are thread-level and read the input once, keeping it in registers.  Group kernels: a
warp per row, each 16-lane half-warp owns one 128-element group (16 bytes per lane per 128-bit
load), the group amax is four `shfl_xor`s, and each lane issues all `unroll` loads (32 bytes, 128
with SwiGLU) before any math.  Block quant: one 256-thread CTA per 128x128 block, 8 loads (128
bytes) per thread, warp shuffles plus an 8-float shared-memory step for the block amax.  Dequant:
8 fp8 (one 64-bit load) per lane and one 128-bit bf16 store, so a warp writes 512 contiguous
bytes (16-fp8 lanes with two stores 32 bytes apart measured 69% of copy, this 91%).  Group
kernels and dequants put column blocks on grid x, so neighbouring CTAs stream neighbouring memory
(+4-8% over rows-first on the H200), with a rows-first fallback past MAX_Y row blocks
(kernels_src/_grid.py).  Outputs: 8-byte fp8 stores.

Sizes served (symbolic, one variant per input dtype):
  per_token_group_quant_fp8[_colmajor], per_token_group_dequant: K % 128 == 0 (any M);
  silu_and_mul_quant_fp8[_colmajor]: N = 2 * I with I % 128 == 0 (rule N % 256 == 0);
  per_block_quant_fp8, per_block_dequant: any N, K % 16 == 0 (partial edge blocks are fine).
Other sizes raise NoKernelError (TKREG_FALLBACK=reference runs the torch reference instead).
"""
from kernels_src._grid import MAX_Y, raster
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

FP8 = "float8_e4m3fn"
FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
DTYPES = ("bfloat16", "float16")
GROUP = 128


def _macros(T):
    @T.macro
    def scale_of(amax, u, ue8m0, sf, inv):
        """sf[u], inv[u] from amax[u] (see the module docstring)."""
        a = T.max(amax[u], T.float32(AMAX_FLOOR))
        sf[u] = T.ieee_fdiv(a, T.float32(FP8_MAX))
        if ue8m0:
            e = ((T.reinterpret(sf[u], "uint32") - T.uint32(1)) >> T.uint32(23)) + T.uint32(1)
            sf[u] = T.reinterpret(e << T.uint32(23), "float32")
            inv[u] = T.reinterpret((T.uint32(254) - e) << T.uint32(23), "float32")
        else:
            inv[u] = T.ieee_fdiv(T.float32(FP8_MAX), a)

    return scale_of


def group_quant_kernel(dtype: str, layout: str = "row", silu: int = 0, threads: int = 128,
                       unroll: int | None = None, fast: int = 1, min_blocks: int = 8, grid: str = "cols"):
    """x[M, K] (or [M, 2K'] with silu) -> q fp8, s fp32 per 128 elements of a row.

    layout "row": s[M, K // 128]; "col": s[K // 128, M_pad] (DeepGEMM's column-major,
    TMA-aligned scales, M_pad = ceil(M / 4) * 4; columns M..M_pad are not written).
    """
    import tilelang.language as T

    scale_of = _macros(T)
    M = T.dynamic("M")
    if silu:
        N = T.dynamic("N")
        x_shape, K, KG = (M, N), N // 2, N // (2 * GROUP)
    else:
        N = K = T.dynamic("K")
        x_shape, KG = (M, K), K // GROUP
    s_shape = (M, KG) if layout == "row" else (KG, (M + 3) // 4 * 4)
    warps = threads // 32
    unroll = unroll or (4 if silu else 2)   # tuned on the H200 (BENCHMARKS.md)
    nv = 8                      # elements per lane per load: 16 bytes of bf16/fp16
    ld = unroll * nv

    @T.prim_func
    def group_quant(x: T.Tensor(x_shape, dtype), q: T.Tensor((M, K), FP8),
                    s: T.Tensor(s_shape, "float32"), ue8m0: T.bool):
        dims, unpack = raster(T, grid, T.ceildiv(M, warps), T.ceildiv(KG, 2 * unroll))
        with T.Kernel(*dims, threads=threads) as blk:
            bx, by = unpack(blk)
            T.assume(N % (2 * GROUP if silu else GROUP) == 0)
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
                col = kg * GROUP + (tx % 16) * nv
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
                    if silu and fast:   # ex2.approx + rcp.approx: 5 instructions, not ~20
                        y[u * nv + v] = T.call_extern("float32", "__fdividef", gv, T.float32(1) + T.__exp(-gv)) \
                            * T.cast(h[u * nv + v], "float32")
                    elif silu:
                        y[u * nv + v] = T.ieee_fdiv(gv, T.float32(1) + T.exp(-gv)) * T.cast(h[u * nv + v], "float32")
                    else:
                        y[u * nv + v] = gv
                    amax[u] = T.max(amax[u], T.abs(y[u * nv + v]))
                for o in T.unroll(4):           # the 16 lanes of a group: xor 8, 4, 2, 1
                    amax[u] = T.max(amax[u], T.shfl_xor(amax[u], 8 >> o))
            for u in T.unroll(unroll):
                kg = by * (2 * unroll) + u * 2 + (tx % 32) // 16
                col = kg * GROUP + (tx % 16) * nv
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


def block_quant_kernel(dtype: str, threads: int = 256):
    """w[N, K] -> q fp8, s[ceil(N/128), ceil(K/128)]: one CTA per 128x128 block, read once."""
    import tilelang.language as T

    scale_of = _macros(T)
    N, K = T.dynamic("N"), T.dynamic("K")
    nv = 8
    rows = threads // 16                 # rows covered per pass (16 lanes x 8 = 128 columns)
    passes = GROUP // rows
    warps = threads // 32

    @T.prim_func
    def block_quant(w: T.Tensor((N, K), dtype), q: T.Tensor((N, K), FP8),
                    s: T.Tensor(((N + 127) // 128, (K + 127) // 128), "float32"), ue8m0: T.bool):
        with T.Kernel(T.ceildiv(K, GROUP), T.ceildiv(N, GROUP), threads=threads) as (bx, by):
            T.assume(K % 16 == 0)
            T.annotate_min_blocks_per_sm(3)      # <= 80 registers: 3 CTAs (96 KB of loads) per SM
            tx = T.get_thread_binding()
            red = T.alloc_shared((warps,), "float32")
            xl = T.alloc_local((passes * nv,), dtype)
            ql = T.alloc_local((nv,), FP8)
            amax = T.alloc_local((1,), "float32")
            sf = T.alloc_local((1,), "float32")
            inv = T.alloc_local((1,), "float32")
            col = bx * GROUP + (tx % 16) * nv
            for p in T.unroll(passes):
                row = by * GROUP + p * rows + tx // 16
                if row < N and col < K:
                    for v in T.vectorized(nv):
                        xl[p * nv + v] = w[row, col + v]
                else:
                    for v in T.vectorized(nv):
                        xl[p * nv + v] = T.cast(0, dtype)
            amax[0] = T.float32(0)
            for i in T.unroll(passes * nv):
                amax[0] = T.max(amax[0], T.abs(T.cast(xl[i], "float32")))
            for o in T.unroll(5):
                amax[0] = T.max(amax[0], T.shfl_xor(amax[0], 16 >> o))
            if tx % 32 == 0:
                red[tx // 32] = amax[0]
            T.sync_threads()
            for i in T.unroll(warps):
                amax[0] = T.max(amax[0], red[i])
            scale_of(amax, 0, ue8m0, sf, inv)
            for p in T.unroll(passes):
                row = by * GROUP + p * rows + tx // 16
                for v in T.vectorized(nv):
                    ql[v] = T.cast(T.cast(xl[p * nv + v], "float32") * inv[0], FP8)
                if row < N and col < K:
                    for v in T.vectorized(nv):
                        q[row, col + v] = ql[v]
            if tx == 0:
                s[by, bx] = sf[0]

    return block_quant


def dequant_kernel(block_rows: int, threads: int = 256, unroll: int = 2, nv: int = 8, grid: str = "cols"):
    """q fp8 * s -> bf16, s per (block_rows x 128) block: 1 = per-token groups, 128 = per block."""
    import tilelang.language as T

    R = T.dynamic("M" if block_rows == 1 else "N")
    K = T.dynamic("K")
    s_shape = (R, K // 128) if block_rows == 1 else ((R + 127) // 128, (K + 127) // 128)
    warps = threads // 32
    span = 32 * nv                       # columns a warp covers per load

    @T.prim_func
    def dequant(q: T.Tensor((R, K), FP8), s: T.Tensor(s_shape, "float32"),
                out: T.Tensor((R, K), "bfloat16")):
        dims, unpack = raster(T, grid, T.ceildiv(R, warps), T.ceildiv(K, span * unroll))
        with T.Kernel(*dims, threads=threads) as blk:
            bx, by = unpack(blk)
            T.assume(K % (GROUP if block_rows == 1 else 16) == 0)
            tx = T.get_thread_binding()
            row = bx * warps + tx // 32
            ql = T.alloc_local((unroll * nv,), FP8)
            sc = T.alloc_local((unroll,), "float32")
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < R and col < K:
                    for v in T.vectorized(nv):
                        ql[u * nv + v] = q[row, col + v]
                    sc[u] = s[row // block_rows, col // GROUP]
            for u in T.unroll(unroll):
                col = (by * unroll + u) * span + (tx % 32) * nv
                if row < R and col < K:
                    for hv in T.unroll(nv // 8):  # 16-byte stores (never 32: `out` may be 16-aligned)
                        for v in T.vectorized(8):
                            out[row, col + hv * 8 + v] = T.cast(
                                T.cast(ql[u * nv + hv * 8 + v], "float32") * sc[u], "bfloat16")

    return dequant


_REF = "tkreg.reference.fp8:"


def _cols_then_rows(params, rule, rows, warps):
    """The column-blocks-first kernel while the row blocks fit grid y, then the any-size one."""
    return (Variant(params, rule=f"{rule} and {rows} <= {MAX_Y * warps}", priority=10),
            Variant(dict(params, grid="rows"), rule=rule))
_UE8M0 = Scalar("ue8m0", "bool", False)


# Column-major scales: 8 rows per CTA, so each group's scales go out as one full 32-byte sector.
_COL_CTA = dict(threads=256, min_blocks=4)


def _mid_rows(params, rule, silu, layout):
    """SwiGLU + quant with row scales below 4096 tokens: one 256-column group pair a warp (unroll 1),
    so a second wave of CTAs overlaps the first's math and stores (docs/sweeps/silu_fp8_mid.py on
    the H200: 0.83-0.96x -> 0.95-1.08x a same-size copy at 1024-3000 tokens; even at 4096, behind
    at 16384)."""
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
        scalars=(_UE8M0,), factory=group_quant_kernel,
        variants=tuple(v for d in DTYPES for p in [dict(dtype=d, layout=layout, silu=int(silu),
                                                        **_COL_CTA if layout == "col" else {})]
                       for v in _mid_rows(p, "N % 256 == 0", silu, layout) + _cols_then_rows(
                           p, "N % 256 == 0" if silu else "K % 128 == 0", "M", 8 if layout == "col" else 4)),
        reference=_REF + name.split(".")[1])


def _dequant_spec(name, block_rows, rows, s_shape, rule, doc):
    return OpSpec(
        name=name, doc=doc,
        tensors=(Tensor("q", (rows, "K"), dtypes=(FP8,)),
                 Tensor("s", s_shape, dtype="float32"),
                 Tensor("out", (rows, "K"), dtype="bfloat16", role="output")),
        factory=dequant_kernel, variants=_cols_then_rows(dict(block_rows=block_rows), rule, rows, 8),
        reference=_REF + name.split(".")[1])


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
        scalars=(_UE8M0,), factory=block_quant_kernel,
        variants=tuple(Variant(dict(dtype=d), rule="K % 16 == 0") for d in DTYPES),
        reference=_REF + "per_block_quant_fp8"),
    _dequant_spec("tkreg.per_token_group_dequant", 1, "M", ("M", "K // 128"), "K % 128 == 0",
                  "q[M, K] e4m3, s[M, K // 128] fp32 -> bf16 q * s (K % 128 == 0)"),
    _dequant_spec("tkreg.per_block_dequant", 128, "N", ("(N + 127) // 128", "(K + 127) // 128"), "K % 16 == 0",
                  "q[N, K] e4m3, s[ceil(N/128), ceil(K/128)] fp32 -> bf16 q * s (K % 16 == 0)"),
)
