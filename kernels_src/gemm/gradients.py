"""bf16/fp16 GEMM gradients of a Linear layer y[M, N] = x[M, K] @ w[N, K]^T (tkreg.gemm's backward).

- tkreg.gemm_dgrad: dx[M, K] = dy[M, N] @ w[N, K], the weight read as stored ("NN"): the output's
  M x K tile reduces over N, dy's tile K-major as in tkreg.gemm, w's tile [block_K of N, block_N
  of K] MN-major (its output columns contiguous).
- tkreg.gemm_wgrad: dw[N, K] = dy[M, N]^T @ x[M, K] ("TN"), reducing over the M tokens: both tiles
  MN-major, dy's [block_K of M, block_M of N] read transposed by WGMMA (transpose_A).
- tkreg.gemm_wgrad_accumulate: the same product added in fp32 into main_grad[N, K] (in place, as
  Megatron keeps an fp32 main grad a weight); nothing rounded to 16 bits.

WGMMA reads MN-major shared operands for 16-bit types, so both layouts run on WGMMA with the
loads and transposes above; fp32 accumulation, one rounding (the dtype outputs).  TMA rows are 16
bytes: N % 8 == 0 and K % 8 == 0; M is any.  Classes (the Llama-8B-like training shapes of issue
#52, M = 4096-16384, N and K of 4096-28672, fill the SMs with 128 x 256 tiles):
  large   the dense op's hand-written warp-specialized persistent tile (tiles/warp_specialized.py,
          its "nn" / "tn" layouts), 128 x 256, 4 stages, where its tiles cover 3/4 of the SMs
          (wgrad: always)
  small   tilelang's pipelined tile (T.Pipelined over TMA loads, warp-specialized by tilelang),
          64 x 128 (dgrad only), every other shape
gemm_wgrad_accumulate runs the pipelined tile at 128 x 256 (its epilogue adds from registers).
sm_90a only: elsewhere NoKernelError, and tkreg.gemm's autograd (tkreg.ops.gemm.GemmGrad) runs
torch.matmul with the same transposes.
"""
from kernels_src.common import DTYPES
from tkreg.spec import OpSpec, Tensor, Variant

from .tiles import PASS_CONFIGS

LAYOUTS = ("dgrad", "wgrad")


def grad_body(T, layout: str, M, N, K, block_M: int, block_N: int, block_K: int, stages: int, threads: int,
              dtype: str, accumulate: bool):
    """The pipelined tile, a macro `body(dy, other, out)`: layout "dgrad" (out[M, K] = dy @ w,
    reducing over N) or "wgrad" (out[N, K] = dy^T @ x, reducing over M); accumulate: out is the
    fp32 main grad, out += the product."""
    assert layout in LAYOUTS
    rows, red = (M, N) if layout == "dgrad" else (N, M)   # the output's rows, the reduced dim

    @T.macro
    def body(dy, other, out):
        with T.Kernel(T.ceildiv(K, block_N), T.ceildiv(rows, block_M), threads=threads) as (bx, by):
            r0, c0 = by * block_M, bx * block_N
            if layout == "dgrad":
                a_s = T.alloc_shared((block_M, block_K), dtype)
            else:
                a_s = T.alloc_shared((block_K, block_M), dtype)
            b_s = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.use_swizzle(panel_size=10)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(red, block_K), num_stages=stages):
                if layout == "dgrad":
                    T.copy(dy[r0, k * block_K], a_s)
                    T.copy(other[k * block_K, c0], b_s)
                    T.gemm(a_s, b_s, acc)
                else:
                    T.copy(dy[k * block_K, r0], a_s)
                    T.copy(other[k * block_K, c0], b_s)
                    T.gemm(a_s, b_s, acc, transpose_A=True)
            if accumulate:
                for i, j in T.Parallel(block_M, block_N):
                    if r0 + i < rows and c0 + j < K:
                        out[r0 + i, c0 + j] = out[r0 + i, c0 + j] + acc[i, j]
            else:
                c_s = T.alloc_shared((block_M, block_N), dtype)
                T.copy(acc, c_s)
                T.copy(c_s, out[r0, c0])   # TMA store, clipped at the edges

    return body


def ws_grad_kernel(layout: str, dtype: str, block_N: int, stages: int, epilogue_cols: int):
    """The hand-written warp-specialized persistent tile (tiles/warp_specialized.py) in its "nn"
    (dgrad) or "tn" (wgrad) layout; the launcher passes the SM count."""
    import tilelang.language as T

    from .tiles.warp_specialized import warp_specialized_body
    M, N, K, sms = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("SM_COUNT")
    DY = T.Tensor((M, N), dtype)
    if layout == "dgrad":
        tile = warp_specialized_body(T, M, K, N, sms, block_N, stages, epilogue_cols, False, dtype, layout="nn")

        @T.prim_func
        def gemm_dgrad(dy: DY, w: T.Tensor((N, K), dtype), out: T.Tensor((M, K), dtype), SM_COUNT: sms):
            tile(dy, w, None, None, out)
        return gemm_dgrad
    tile = warp_specialized_body(T, N, K, M, sms, block_N, stages, epilogue_cols, False, dtype, layout="tn")

    @T.prim_func
    def gemm_wgrad(dy: DY, x: T.Tensor((M, K), dtype), out: T.Tensor((N, K), dtype), SM_COUNT: sms):
        tile(dy, x, None, None, out)
    return gemm_wgrad


def grad_kernel(arch: str, shape_class: str, layout: str, dtype: str, accumulate: bool = False,
                mma: str = "wgmma", **params):
    """`shape_class` only names the variant; mma="warp_specialized": ws_grad_kernel.  sm_90a only."""
    assert arch == "sm_90a", arch
    if mma == "warp_specialized":
        assert not accumulate
        return ws_grad_kernel(layout, dtype, **params)
    import tilelang.language as T

    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    body = grad_body(T, layout, M, N, K, dtype=dtype, accumulate=accumulate, **params)
    DY = T.Tensor((M, N), dtype)
    if layout == "dgrad":
        @T.prim_func
        def gemm_dgrad(dy: DY, w: T.Tensor((N, K), dtype), out: T.Tensor((M, K), dtype)):
            body(dy, w, out)
        return gemm_dgrad
    if accumulate:
        @T.prim_func
        def gemm_wgrad_accumulate(dy: DY, x: T.Tensor((M, K), dtype), main_grad: T.Tensor((N, K), "float32")):
            body(dy, x, main_grad)
        return gemm_wgrad_accumulate

    @T.prim_func
    def gemm_wgrad(dy: DY, x: T.Tensor((M, K), dtype), out: T.Tensor((N, K), dtype)):
        body(dy, x, out)
    return gemm_wgrad


LARGE = dict(block_M=128, block_N=256, block_K=64, stages=4, threads=256)
SMALL = dict(block_M=64, block_N=128, block_K=64, stages=4, threads=128)
WS_LARGE = dict(mma="warp_specialized", block_N=256, stages=4, epilogue_cols=128)
# (name, tile, rule over the output's rows (dgrad: M, wgrad: N) and K, priority)
DGRAD_CLASSES = (
    ("large", WS_LARGE, "4 * ((M + 127) // 128) * ((K + 255) // 256) >= 3 * SM_COUNT", 10),
    ("small", SMALL, None, 0),
)
WGRAD_CLASSES = (
    ("large", WS_LARGE, None, 0),
)
ACCUMULATE_CLASSES = (      # the pipelined tile: its epilogue adds into main_grad from registers
    ("large", LARGE, None, 0),
)


def _variants(layout: str, classes, accumulate: bool = False) -> tuple:
    return tuple(Variant(dict(params, layout=layout, dtype=dtype, shape_class=name, accumulate=accumulate),
                         rule=rule, priority=priority, archs=("sm_90a",),
                         pass_configs=PASS_CONFIGS if params.get("mma") == "warp_specialized" else ())
                 for name, params, rule, priority in classes for dtype in DTYPES)


def _dy():
    return Tensor("dy", ("M", "N"), dtypes=DTYPES)


SPECS = (
    OpSpec(
        name="tkreg.gemm_dgrad",
        doc="out[M, K] = dy[M, N] @ w[N, K] (a Linear layer's input gradient; w as stored), fp32 accumulation",
        tensors=(_dy(), Tensor("w", ("N", "K"), dtype_of="dy"),
                 Tensor("out", ("M", "K"), dtype_of="dy", role="output")),
        factory=grad_kernel,
        variants=_variants("dgrad", DGRAD_CLASSES),
        archs=("sm_90a",),
        reference="tkreg.reference.gemm:gemm_dgrad",
    ),
    OpSpec(
        name="tkreg.gemm_wgrad",
        doc="out[N, K] = dy[M, N]^T @ x[M, K] (a Linear layer's weight gradient, reduced over the M tokens), "
            "fp32 accumulation rounded once",
        tensors=(_dy(), Tensor("x", ("M", "K"), dtype_of="dy"),
                 Tensor("out", ("N", "K"), dtype_of="dy", role="output")),
        factory=grad_kernel,
        variants=_variants("wgrad", WGRAD_CLASSES),
        archs=("sm_90a",),
        reference="tkreg.reference.gemm:gemm_wgrad",
    ),
    OpSpec(
        name="tkreg.gemm_wgrad_accumulate",
        doc="main_grad[N, K] += dy[M, N]^T @ x[M, K] in fp32 (in place: Megatron's main grad)",
        tensors=(_dy(), Tensor("x", ("M", "K"), dtype_of="dy"),
                 Tensor("main_grad", ("N", "K"), dtype="float32", role="inplace")),
        factory=grad_kernel,
        variants=_variants("wgrad", ACCUMULATE_CLASSES, accumulate=True),
        archs=("sm_90a",),
        reference="tkreg.reference.gemm:gemm_wgrad_accumulate",
    ),
)
