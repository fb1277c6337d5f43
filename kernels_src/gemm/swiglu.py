"""GEMM with the SwiGLU epilogue (an MLP's gate_up projection): out[M, I] = silu(a @ gate^T) *
(a @ up^T), I = N / 2 columns written (never the 2I of gemm + silu_and_mul).

The weight is packed once (`tkreg.ops.pack_gate_up`): w_packed[N = 2I, K] holds gate and up rows
alternating in groups of tiles.GROUP = 8, so an accumulator column group and the next one (swap-AB:
row groups) hold one thread's gate and up values of the same outputs (tiles/__init__.py).  Every
variant reads that one layout.  The epilogue rounds each fp32 accumulator to the output dtype
first, then runs silu_and_mul's fp32 steps (precise expf, IEEE division) and rounds once: bit for
bit `tkreg.gemm(a, [gate; up])` followed by `tkreg.silu_and_mul`, the unfused path it replaces
(tkreg.reference.gemm:gemm_swiglu is that composition).

The tiles are tkreg.gemm's (dense.py) with this epilogue; the classes are the ones a Llama /
Qwen3 MLP needs (N = 2I of 24576-28672 at K = 4096), each a dense class of the same tile:
  decode-16 / decode-32   swap-AB pipelined tiles (M <= 16 / 32): weight streaming
  decode-64               64x256 pipelined tiles (M <= 64, N >= 16384)
  large / mid-128         the warp-specialized persistent tile, 256 or 128 wide by
                          classes.best_width over those two widths (the prefill calls)
  small                   64x128 pipelined tiles: every other shape.
N % 16 == 0 (whole gate / up groups; out's rows 16-byte aligned), K % 8 == 0 (TMA): rules of every
variant, so other sizes get NoKernelError naming them.  sm_90a
only: on sm_100a the op has no kernel (NoKernelError), and a caller falls back to gemm +
silu_and_mul.
"""
from kernels_src.common import DTYPES
from tkreg.spec import OpSpec, Tensor, Variant

from .classes import best_width
from .tiles import PASS_CONFIGS

# whole gate / up groups, out[M, N / 2] rows a multiple of 16 bytes; K % 8: TMA rows (16 bytes)
PAIRS = "N % 16 == 0 and K % 8 == 0"


def gemm_swiglu_kernel(arch: str, shape_class: str, dtype: str, mma: str = "wgmma", **params):
    """`shape_class` only names the variant; mma="warp_specialized": the persistent tile
    (tiles/warp_specialized.py), else the pipelined one (dense.pipelined_body).  sm_90a only."""
    assert arch == "sm_90a", arch
    import tilelang.language as T
    from .dense import pipelined_body
    from .tiles.warp_specialized import warp_specialized_body

    M, N, K, sms = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("SM_COUNT")
    A, W, O = T.Tensor((M, K), dtype), T.Tensor((N, K), dtype), T.Tensor((M, N // 2), dtype)
    if mma == "warp_specialized":
        tile = warp_specialized_body(T, M, N, K, sms, bias=False, dtype=dtype, swiglu=True, **params)

        @T.prim_func
        def gemm_swiglu(a: A, w_packed: W, out: O, SM_COUNT: sms):
            tile(a, w_packed, None, None, out)
        return gemm_swiglu

    body = pipelined_body(T, M, N, K, dtype=dtype, swiglu=True, **params)

    @T.prim_func
    def gemm_swiglu(a: A, w_packed: W, out: O):
        body(a, w_packed, None, out)
    return gemm_swiglu


WIDTHS = (256, 128)   # of classes.WIDTHS: one 128-row tile a width (out chunks of 64 columns)
CLASSES = (
    ("decode-16", dict(block_M=16, block_N=64, block_K=128, stages=8, threads=128, swap_ab=True), "M <= 16", 60),
    ("decode-32", dict(block_M=32, block_N=64, block_K=128, stages=8, threads=128, swap_ab=True), "M <= 32", 50),
    ("decode-64", dict(block_M=64, block_N=256, block_K=64, stages=4, threads=256), "M <= 64 and N >= 16384", 40),
    ("large", dict(mma="warp_specialized", block_N=256, stages=4, epilogue_cols=128), best_width(256, WIDTHS), 30),
    ("mid-128", dict(mma="warp_specialized", block_N=128, stages=6, epilogue_cols=128), best_width(128, WIDTHS), 20),
    ("small", dict(block_M=64, block_N=128, block_K=128, stages=4, threads=128), None, 0),
)


def _variants() -> tuple:
    return tuple(Variant(dict(params, dtype=dtype, shape_class=name),
                         rule=f"{PAIRS} and ({rule})" if rule else PAIRS, priority=priority, archs=("sm_90a",),
                         pass_configs=PASS_CONFIGS if params.get("mma") == "warp_specialized" else ())
                 for name, params, rule, priority in CLASSES for dtype in DTYPES)


SPECS = (
    OpSpec(
        name="tkreg.gemm_swiglu",
        doc="out[M, N/2] = silu(a @ gate^T) * (a @ up^T), gate / up interleaved in w_packed[N, K] "
            "(tkreg.ops.pack_gate_up); each product rounded to a's dtype, then silu_and_mul's fp32 math",
        tensors=(Tensor("a", ("M", "K"), dtypes=DTYPES),
                 Tensor("w_packed", ("N", "K"), dtype_of="a"),
                 Tensor("out", ("M", "N // 2"), dtype_of="a", role="output")),
        factory=gemm_swiglu_kernel,
        variants=_variants(),
        archs=("sm_90a",),
        reference="tkreg.reference.gemm:gemm_swiglu",
    ),
)
