"""FP8 weight gradient of a Linear layer (DeepSeek-V3's recipe, DeepGEMM's "1D1D" scaling), sm_90a:

    dw[N, K] = sum over 128-token blocks mb of  (dy_t[:, mb] @ x_t[:, mb]^T) * dy_scale[mb, n] * x_scale[mb, k]

dy_t[N, M] and x_t[K, M] e4m3 are the transposed per-channel casts of dy[M, N] and x[M, K]
(tkreg.per_channel_quant_fp8_transpose: q^T row-major, one fp32 scale per channel per 128-token
group, s[ceil(M / 128), channels] row-major), so both operands are K-major for WGMMA with the
reduction over the M tokens contiguous.  Each 128-token block is one WGMMA chain into a fresh fp32
fragment, promoted into the fp32 accumulator times the row's and the column's scale (a per-column
scale varies inside the fragment: the 1x128-by-128x128 forward's single weight-block scale does
not).  Out fp32 (tkreg.fp8_gemm_wgrad), or added into an fp32 main_grad in place
(tkreg.fp8_gemm_wgrad_accumulate, Megatron's main grad): nothing rounds below fp32.

The tile is DeepGEMM's sm90_fp8_gemm_1d1d schedule, persistent, with the forward's producer /
consumer split (tiles/fp8_warp_specialized.py has the ring's proofs; this is its plain form):
  producer (threads 0-127): for each 128-token block of each tile, slot s = g % stages: thread t
      loads dy_scale[mb, n0 + t] and x_scale[mb, k0 + t] (coalesced rows), waits empty[s], TMA
      dy_t / x_t [128 x 128] boxes (zeros past M, N, K), stores the scales into the slot and all
      128 arrive on full[s].
  consumer c (threads 128(c+1)..): rows 64c.. of the tile: wait full[s], issue the WGMMA chain into
      `part`, take the slot's scales into registers while it runs, wait it (nothing in flight across
      the loop's back edge), release the slot, acc += part * sa[i] * sb[j].  The two consumers'
      promotions overlap each other's WGMMAs.
  epilogue: straight from registers into out (or main_grad += acc), bounds-checked: 4 lanes cover
      32 contiguous bytes of a row, full sectors with no shared-memory staging.
TMA rows: M % 16 == 0 (dy_t / x_t rows of M bytes); N, K any.  Registers: acc 64 + part 64 + the
column scales 32 a consumer thread.  Measured tables: docs/gemm-tuning.md.
"""
from kernels_src.common import FP8, SCALE_GROUP
from tkreg.spec import OpSpec, Tensor, Variant

from .tiles import CONSUMER_REGISTERS, PASS_CONFIGS, PRODUCER_REGISTERS
from .tiles.warp_specialized import BLOCK_M, locate_macro

BLOCK = SCALE_GROUP   # the tile's rows (N) and columns (K), and its reduction block (tokens)
assert BLOCK == BLOCK_M   # the forward tile's rows: its walk (locate_macro) serves
HALF = 64             # a consumer's rows


def wgrad_body(T, M, N, K, sms, stages: int, panel: int, accumulate: bool):
    """The persistent kernel body `body(dy_t, dy_scale, x_t, x_scale, out)`; accumulate: out is the
    fp32 main grad, out += the product."""
    MB = T.ceildiv(M, BLOCK)
    nreg = HALF * BLOCK // 128
    full_row = T.GemmWarpPolicy.FullRow

    locate = locate_macro(T, N, K, BLOCK, panel)   # tile index -> origin (r0, c0): the forward's walk

    @T.macro
    def producer(a, sa, b, sb, r0, c0, g0, a_s, b_s, sa_s, sb_s, full, empty, tx):
        va = T.alloc_local((1,), "float32")
        vb = T.alloc_local((1,), "float32")
        for mb in T.serial(MB):
            s = (g0 + mb) % stages
            # issued before the wait for the slot, so their latency hides under it
            va[0] = sa[mb, T.min(r0 + tx, N - 1)]
            vb[0] = sb[mb, T.min(c0 + tx, K - 1)]
            T.mbarrier_wait_parity(empty[s], ((g0 + mb) // stages + 1) % 2)
            T.tma_copy(a[r0:r0 + BLOCK, mb * BLOCK:(mb + 1) * BLOCK], a_s[s, :, :], barrier=full[s])
            T.tma_copy(b[c0:c0 + BLOCK, mb * BLOCK:(mb + 1) * BLOCK], b_s[s, :, :], barrier=full[s])
            sa_s[s, tx] = va[0]
            sb_s[s, tx] = vb[0]
            T.barrier_arrive(full[s])   # (release: the consumers' acquire sees the slot's scales)

    @T.macro
    def store(out, r0, c0, acc):
        for i, j in T.Parallel(HALF, BLOCK):
            if r0 + i < N and c0 + j < K:
                if accumulate:
                    out[r0 + i, c0 + j] = out[r0 + i, c0 + j] + acc[i, j]
                else:
                    out[r0 + i, c0 + j] = acc[i, j]

    @T.macro
    def consumer(sa_s, sb_s, out, r0, c0, h0, g0, a_s, b_s, full, empty, acc, part, fa, fb):
        T.clear(acc)
        for mb in T.serial(MB):
            s = (g0 + mb) % stages
            T.mbarrier_wait_parity(full[s], ((g0 + mb) // stages) % 2)
            T.wgmma_gemm(a_s[s, h0:h0 + HALF, :], b_s[s, :, :], part, transpose_B=True, policy=full_row,
                         clear_accum=True)
            for i in T.Parallel(HALF):
                fa[i] = sa_s[s, h0 + i]
            for j in T.Parallel(BLOCK):
                fb[j] = sb_s[s, j]
            T.wait_wgmma(0)
            T.warpgroup_fence_operand(part, num_regs=nreg)
            T.barrier_arrive(empty[s])
            for i, j in T.Parallel(HALF, BLOCK):
                acc[i, j] += part[i, j] * (fa[i] * fb[j])
        store(out, r0 + h0, c0, acc)

    @T.macro
    def consumer_loop(sa_s, sb_s, out, bx, grid, ntiles, c, r0: T.Ref, c0: T.Ref, g0: T.Ref, a_s, b_s, full,
                      empty):
        T.inc_max_nreg(CONSUMER_REGISTERS)
        acc = T.alloc_fragment((HALF, BLOCK), "float32")
        part = T.alloc_fragment((HALF, BLOCK), "float32")
        fa = T.alloc_fragment((HALF,), "float32")
        fb = T.alloc_fragment((BLOCK,), "float32")
        for t in T.serial(T.ceildiv(ntiles - bx, grid)):
            locate(bx + t * grid, r0, c0)
            consumer(sa_s, sb_s, out, r0, c0, c * HALF, g0, a_s, b_s, full, empty, acc, part, fa, fb)
            g0 = g0 + MB

    @T.macro
    def body(a, sa, b, sb, out):
        ntiles = T.ceildiv(N, BLOCK) * T.ceildiv(K, BLOCK)
        with T.Kernel(T.max(T.min(ntiles, sms), 1), threads=384) as bx:
            a_s = T.alloc_shared((stages, BLOCK, BLOCK), FP8)
            b_s = T.alloc_shared((stages, BLOCK, BLOCK), FP8)
            sa_s = T.alloc_shared((stages, BLOCK), "float32")
            sb_s = T.alloc_shared((stages, BLOCK), "float32")
            full = T.alloc_barrier([128] * stages)
            empty = T.alloc_barrier([256] * stages)
            r0 = T.alloc_var("int32")
            c0 = T.alloc_var("int32")
            g0 = T.alloc_var("int32")
            grid = T.max(T.min(ntiles, sms), 1)
            T.sync_threads()
            tx = T.get_thread_binding()
            g0 = 0
            if tx < 128:
                T.dec_max_nreg(PRODUCER_REGISTERS)
                for t in T.serial(T.ceildiv(ntiles - bx, grid)):
                    locate(bx + t * grid, r0, c0)
                    producer(a, sa, b, sb, r0, c0, g0, a_s, b_s, sa_s, sb_s, full, empty, tx)
                    g0 = g0 + MB
            elif tx < 256:
                consumer_loop(sa_s, sb_s, out, bx, grid, ntiles, 0, r0, c0, g0, a_s, b_s, full, empty)
            else:
                consumer_loop(sa_s, sb_s, out, bx, grid, ntiles, 1, r0, c0, g0, a_s, b_s, full, empty)

    return body


def fp8_wgrad_kernel(arch: str, accumulate: bool, stages: int, panel: int):
    """tkreg.fp8_gemm_wgrad (accumulate: _accumulate's main_grad in place).  sm_90a only."""
    assert arch == "sm_90a", arch
    import tilelang.language as T

    M, N, K, sms = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("SM_COUNT")
    body = wgrad_body(T, M, N, K, sms, stages, panel, accumulate)
    MB = T.ceildiv(M, BLOCK)
    DY, X = T.Tensor((N, M), FP8), T.Tensor((K, M), FP8)
    SDY, SX, O = T.Tensor((MB, N), "float32"), T.Tensor((MB, K), "float32"), T.Tensor((N, K), "float32")
    if accumulate:
        @T.prim_func
        def fp8_gemm_wgrad_accumulate(dy_t: DY, dy_scale: SDY, x_t: X, x_scale: SX, main_grad: O,
                                      SM_COUNT: sms):
            body(dy_t, dy_scale, x_t, x_scale, main_grad)
        return fp8_gemm_wgrad_accumulate

    @T.prim_func
    def fp8_gemm_wgrad(dy_t: DY, dy_scale: SDY, x_t: X, x_scale: SX, out: O, SM_COUNT: sms):
        body(dy_t, dy_scale, x_t, x_scale, out)
    return fp8_gemm_wgrad


# 5 stages: 5 x 32 KB of operand slots (no epilogue buffer); panels of 16 row tiles, as the
# forward's persistent tile walks
TILE = dict(stages=5, panel=16)
RULE = "M % 16 == 0"   # dy_t / x_t rows of M bytes: TMA's 16-byte row pitch


def _operands():
    return (Tensor("dy_t", ("N", "M"), dtypes=(FP8,)),
            Tensor("dy_scale", ("(M + 127) // 128", "N"), dtype="float32"),
            Tensor("x_t", ("K", "M"), dtype_of="dy_t"),
            Tensor("x_scale", ("(M + 127) // 128", "K"), dtype="float32"))


SPECS = (
    OpSpec(
        name="tkreg.fp8_gemm_wgrad",
        doc="out[N, K] fp32 = sum over 128-token blocks of dy_t[N, M] @ x_t[K, M]^T (e4m3, transposed "
            "per-channel casts) times dy_scale[blk, n] * x_scale[blk, k] (a Linear layer's FP8 weight "
            "gradient, DeepGEMM's 1D1D scaling); M % 16 == 0",
        tensors=_operands() + (Tensor("out", ("N", "K"), dtype="float32", role="output"),),
        factory=fp8_wgrad_kernel,
        variants=(Variant(dict(TILE, accumulate=False), rule=RULE, archs=("sm_90a",), pass_configs=PASS_CONFIGS),),
        archs=("sm_90a",),
        reference="tkreg.reference.fp8_gradients:fp8_gemm_wgrad",
    ),
    OpSpec(
        name="tkreg.fp8_gemm_wgrad_accumulate",
        doc="main_grad[N, K] += tkreg.fp8_gemm_wgrad's product, fp32, in place (Megatron's main grad)",
        tensors=_operands() + (Tensor("main_grad", ("N", "K"), dtype="float32", role="inplace"),),
        factory=fp8_wgrad_kernel,
        variants=(Variant(dict(TILE, accumulate=True), rule=RULE, archs=("sm_90a",), pass_configs=PASS_CONFIGS),),
        archs=("sm_90a",),
        reference="tkreg.reference.fp8_gradients:fp8_gemm_wgrad_accumulate",
    ),
)
