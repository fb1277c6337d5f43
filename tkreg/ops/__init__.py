"""Typed functions for the built-in ops: the fast eager path, one module per op family (the
families of kernels_src/).

Each is one dict lookup and one call into the native launcher, which validates, picks the
variant and launches; outputs are allocated unless `out=` is given.
"""
from .activation import silu_and_mul, silu_and_mul_backward, swiglu  # noqa: F401
from .attention import flash_attention, flash_attention_varlen, paged_decode_attention  # noqa: F401
from .gemm import (fp8_gemm, fp8_grouped_gemm, fp8_grouped_gemm_masked, gemm, grouped_gemm,  # noqa: F401
                   grouped_gemm_masked)
from .moe import (expert_counts, group_limited_topk_gate, moe_combine, moe_expand,  # noqa: F401
                  moe_mapping, topk_gate)
from .norm import fused_add_rms_norm, rms_norm, rms_norm_backward  # noqa: F401
from .quant import (batched_transpose, dequant_e5m6, dequant_fp8, per_block_dequant,  # noqa: F401
                    per_block_quant_fp8, per_channel_quant_fp8, per_token_group_dequant,
                    per_token_group_dequant_fp4, per_token_group_quant_fp4, per_token_group_quant_fp8,
                    quant_e5m6, silu_and_mul_backward_quant_fp8, silu_and_mul_per_channel_quant_fp8_transpose,
                    silu_and_mul_quant_fp8, transpose)
from .rotary import rotary_embedding  # noqa: F401
