"""Blackwell (sm_100a) grouped GEMMs: kernels_src/gemm_sm100.py's tcgen05 tiles (bf16/fp16, and FP8
block-scaled) in kernels_src/grouped_gemm.py's contiguous and masked layouts, each tile finding its
expert with grouped_gemm's `expert_macro`.  Compiled and SASS-checked for tcgen05, never run (no
Blackwell GPU).
"""
from .gemm_sm100 import fp8_tcgen05_body, tcgen05_body


def _dims(T):
    return T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("E")


def grouped_tcgen05_kernel(layout: str, block_M: int, block_N: int, block_K: int, stages: int,
                           threads: int, dtype: str = "bfloat16"):
    import tilelang.language as T

    from .grouped_gemm import expert_macro, prim_func

    M, N, K, E = _dims(T)
    contiguous = layout == "contiguous"
    tile = tcgen05_body(T, layout, M, N, K, E, block_M, block_N, block_K, stages, threads, dtype,
                        expert_of=expert_macro(T, contiguous, M, E))

    @T.macro
    def body(a, a_scale, b, b_scale, groups, out):
        tile(a, b, None, groups, out)
    return prim_func(T, body, contiguous, M, N, K, E, dtype, dtype, False)


def fp8_grouped_tcgen05_kernel(layout: str, block_M: int, block_N: int, stages: int, threads: int):
    import tilelang.language as T

    from .grouped_gemm import FP8, expert_macro, prim_func

    M, N, K, E = _dims(T)
    contiguous = layout == "contiguous"
    body = fp8_tcgen05_body(T, layout, M, N, K, E, block_M, block_N, stages, threads,
                            expert_of=expert_macro(T, contiguous, M, E))
    return prim_func(T, body, contiguous, M, N, K, E, FP8, "bfloat16", True)
