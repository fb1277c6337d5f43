"""GEMM tile bodies, each a T.macro the ops in kernels_src/gemm/ wrap in their kernel signatures.

- warp_specialized.py: bf16/fp16 on sm_90a, a producer warpgroup feeding two 64-row WGMMA
  consumers through an mbarrier ring, one CTA a SM walking the tiles (dense and contiguous grouped).
- fp8_warp_specialized.py: FP8 block-scaled on sm_90a, the same producer / consumer split, each
  consumer promoting K block k under block k+1's WGMMAs (dense, decode swap-AB, both grouped layouts).
- tcgen05.py: sm_100a, bf16/fp16 and FP8 on tcgen05 + tensor memory (dense, split-K, both grouped
  layouts).

The two sm_90a tiles place their own barriers and keep every buffer apart (PASS_CONFIGS), and split
the register file with setmaxnreg: the producer drops to PRODUCER_REGISTERS (it issues TMA and, for
FP8, holds the block scales it loads; at 24 the FP8 producer spills), each consumer rises to
CONSUMER_REGISTERS (2 * 128 * 232 + 128 * 40 = 64512 <= 65536).
"""
from tkreg.reference.gemm import SWIGLU_GROUP

# manual synchronization: tilelang's automatic __syncthreads placement would deadlock in
# warpgroup-divergent code, and a buffer aliasing a ring slot another consumer still reads would race
PASS_CONFIGS = {"tl.disable_thread_storage_sync": True, "tl.disable_shared_memory_reuse": True}
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232

# The gate_up weight's interleave (tkreg.ops.pack_gate_up): rows of gate and up alternate in groups
# of GROUP, so accumulator column groups 2t / 2t + 1 (swap-AB: row groups) hold gate / up of the
# same GROUP outputs.  A WGMMA accumulator fragment gives each thread the same two columns of every
# 8-column group (rows r and r + 8 of every 16-row group), so with GROUP = 8 a thread holds both
# halves of its outputs and the SwiGLU epilogue needs no data exchange.
GROUP = SWIGLU_GROUP


def swiglu_column(j):
    """The accumulator column (swap-AB: row) of output column j's gate; its up is GROUP further."""
    return j // GROUP * (2 * GROUP) + j % GROUP


def swiglu_value(T, g, u, dtype: str):
    """dtype(silu(g) * u) from the fp32 gate / up accumulators, each first rounded to dtype (what
    the unfused gemm writes and silu_and_mul reads), then silu_and_mul's fp32 steps in its order
    (kernels_src/activation): bit for bit tkreg.gemm followed by tkreg.silu_and_mul."""
    gf = T.cast(T.cast(g, dtype), "float32")
    uf = T.cast(T.cast(u, dtype), "float32")
    return T.cast(gf / (T.float32(1) + T.exp(-gf)) * uf, dtype)
