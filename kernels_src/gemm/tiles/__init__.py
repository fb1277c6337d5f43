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
# manual synchronization: tilelang's automatic __syncthreads placement would deadlock in
# warpgroup-divergent code, and a buffer aliasing a ring slot another consumer still reads would race
PASS_CONFIGS = {"tl.disable_thread_storage_sync": True, "tl.disable_shared_memory_reuse": True}
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
