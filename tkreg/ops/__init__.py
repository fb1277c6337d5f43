"""Typed functions for the built-in ops: the fast eager path, one module per op family.

Each is one dict lookup and one call into the native launcher, which validates, picks the
variant and launches; outputs are allocated unless `out=` is given.
"""
from .activation import silu_and_mul, silu_and_mul_backward, swiglu  # noqa: F401
from .attention import flash_attention, flash_attention_varlen  # noqa: F401
from .fp8 import (per_block_dequant, per_block_quant_fp8, per_token_group_dequant,  # noqa: F401
                  per_token_group_quant_fp8, silu_and_mul_quant_fp8)
from .gemm import fp8_gemm, gemm  # noqa: F401
from .grouped_gemm import (fp8_grouped_gemm, fp8_grouped_gemm_masked, grouped_gemm,  # noqa: F401
                           grouped_gemm_masked)
from .moe import (expert_counts, group_limited_topk_gate, moe_combine, moe_expand,  # noqa: F401
                  moe_mapping, topk_gate)
from .norm import fused_add_rms_norm, rms_norm, rms_norm_backward  # noqa: F401
from .paged_attention import paged_decode_attention  # noqa: F401
from .quant import (batched_transpose, dequant_e5m6, dequant_fp8, per_channel_quant_fp8,  # noqa: F401
                    per_token_group_dequant_fp4, per_token_group_quant_fp4, quant_e5m6,
                    silu_and_mul_backward_quant_fp8, silu_and_mul_per_channel_quant_fp8_transpose, transpose)
from .rotary import rotary_embedding  # noqa: F401

