"""SwiGLU backward fused with per-token-group FP8: (dy, x = [g | u]) -> dx = [dg | du] in fp32 ->
e4m3 codes with one scale per 128 elements of a row (the FP8 group quants' rule, device.scale).

  dg = dy * u * s * (1 + g * (1 - s)),  du = dy * g * s,  s = sigmoid(g) on SILU's ftz forms.
"""
from kernels_src.common import DTYPES, FP8, FP8_MAX, SCALE_GROUP, raster as grid_order
from tkreg.spec import OpSpec, Tensor, Variant

from .device import NV, REFERENCE, SILU, UE8M0, scale, sigmoid_ftz


def silu_backward_quant_kernel(dtype: str):
    """(dy[M, I], x[M, 2I]) -> dx[M, 2I] in fp32 -> q[M, 2I] e4m3, s[M, 2I // 128] (I % 128 == 0).

    A warp a row, two rows a warp (warps apart) with every load issued before the first use; a
    half-warp owns a 128-wide group of dg (from g, u, dy) and the matching group of du, so each lane
    loads 16 bytes of g, u and dy a row and produces 8 codes of each half.  Two rows: 89% -> 95% of
    copy (more bytes in flight an SM; four rows lose occupancy).  Column blocks fastest on one flat
    grid, held to 64 registers (8 CTAs/SM): the flat decode's registers would cost a CTA an SM.
    """
    import tilelang.language as T

    threads, rows, min_blocks = 128, 2, 8
    M, N = T.dynamic("M"), T.dynamic("N")
    I = N // 2  # noqa: E741
    IG = I // SCALE_GROUP
    warps, nv = threads // 32, NV
    grid, unpack = grid_order(T, "flat", T.ceildiv(M, warps * rows), T.ceildiv(IG, 2))

    @T.prim_func
    def silu_backward_quant(x: T.Tensor((M, N), dtype), dy: T.Tensor((M, I), dtype),
                            q: T.Tensor((M, N), FP8), s: T.Tensor((M, N // 128), "float32"), ue8m0: T.bool):
        with T.Kernel(*grid, threads=threads, prelude=SILU) as blk:
            bx, by = unpack(blk)
            T.assume(N % 256 == 0)
            T.annotate_min_blocks_per_sm(min_blocks)
            tx = T.get_thread_binding()
            kg = by * 2 + (tx % 32) // 16
            col = kg * SCALE_GROUP + (tx % 16) * nv
            g = T.alloc_local((rows * nv,), dtype)
            u = T.alloc_local((rows * nv,), dtype)
            d = T.alloc_local((rows * nv,), dtype)
            y = T.alloc_local((2 * nv,), "float32")
            ql = T.alloc_local((2 * nv,), FP8)
            am = T.alloc_local((2,), "float32")
            sf = T.alloc_local((2,), "float32")
            inv = T.alloc_local((2,), "float32")
            for r in T.unroll(rows):
                row = (bx * rows + r) * warps + tx // 32
                if row < M and kg < IG:
                    for v in T.vectorized(nv):
                        g[r * nv + v] = x[row, col + v]
                    for v in T.vectorized(nv):
                        u[r * nv + v] = x[row, I + col + v]
                    for v in T.vectorized(nv):
                        d[r * nv + v] = dy[row, col + v]
                else:
                    for v in T.vectorized(nv):
                        g[r * nv + v] = T.cast(0, dtype)
                        u[r * nv + v] = T.cast(0, dtype)
                        d[r * nv + v] = T.cast(0, dtype)
            for r in T.unroll(rows):
                row = (bx * rows + r) * warps + tx // 32
                am[0] = T.float32(0)
                am[1] = T.float32(0)
                for v in T.unroll(nv):
                    gf = T.cast(g[r * nv + v], "float32")
                    df = T.cast(d[r * nv + v], "float32")
                    sg = sigmoid_ftz(T, gf)
                    y[v] = df * T.cast(u[r * nv + v], "float32") * sg * (T.float32(1) + gf * (T.float32(1) - sg))
                    y[nv + v] = df * gf * sg
                    am[0] = T.max(am[0], T.abs(y[v]))
                    am[1] = T.max(am[1], T.abs(y[nv + v]))
                for j in T.unroll(2):
                    for o in T.unroll(4):
                        am[j] = T.max(am[j], T.shfl_xor(am[j], 8 >> o))
                for j in T.unroll(2):
                    sf[j] = scale(T, am[j], FP8_MAX, ue8m0)[0]
                    inv[j] = scale(T, am[j], FP8_MAX, ue8m0)[1]
                    for v in T.vectorized(nv):
                        ql[j * nv + v] = T.cast(y[j * nv + v] * inv[j], FP8)
                    if row < M and kg < IG:
                        for v in T.vectorized(nv):
                            q[row, j * I + col + v] = ql[j * nv + v]
                        if tx % 16 == 0:
                            s[row, j * IG + kg] = sf[j]

    return silu_backward_quant


SPECS = (
    OpSpec(
        name="tkreg.silu_and_mul_backward_quant_fp8",
        doc="(dy[M, I], x[M, 2I]) -> dx = [dy*u*s*(1+g*(1-s)) | dy*g*s] in fp32 (s = sigmoid(g), fast "
            "math) -> q[M, 2I] e4m3, s[M, 2I // 128] fp32 (I % 128 == 0)",
        tensors=(Tensor("dy", ("M", "N // 2"), dtypes=DTYPES), Tensor("x", ("M", "N"), dtype_of="dy"),
                 Tensor("q", ("M", "N"), dtype=FP8, role="output"),
                 Tensor("s", ("M", "N // 128"), dtype="float32", role="output")),
        scalars=(UE8M0,), factory=silu_backward_quant_kernel,
        variants=tuple(Variant(dict(dtype=d), rule="N % 256 == 0") for d in DTYPES),
        reference=REFERENCE + "silu_and_mul_backward_quant_fp8"),
)
