"""Plain-torch references, one module per op family: the test oracle for every op and the
TKREG_FALLBACK=reference path.  Each function takes the op's inputs and scalars by name and
returns its outputs (a tensor or a tuple), computing in fp32 and rounding once, as the kernels do.
Specs name them as "tkreg.reference.<family>:<function>".
"""
from .activation import silu_and_mul, silu_and_mul_backward, swiglu  # noqa: F401
from .attention import flash_attention, flash_attention_varlen, paged_decode_attention  # noqa: F401
from .engram import engram_fused_weight, engram_gate, engram_gate_backward, engram_hash  # noqa: F401
from .gemm import (fp8_gemm, fp8_grouped_gemm, fp8_grouped_gemm_masked, gemm, gemm_swiglu, grouped_gemm,  # noqa: F401
                   grouped_gemm_masked)
from .moe import (expert_counts, group_limited_topk_gate, moe_combine, moe_expand,  # noqa: F401
                  moe_expand_fp8, moe_expand_fp8_colmajor, moe_mapping, topk_gate)
from .norm import fused_add_rms_norm, rms_norm, rms_norm_backward, rms_norm_heads  # noqa: F401
from .quant import (batched_transpose, dequant_e5m6, group_dequant_fp8, per_block_dequant,  # noqa: F401
                    per_block_quant_fp8, per_channel_dequant_fp8, per_channel_quant_fp8,
                    per_channel_quant_fp8_transpose, per_token_group_dequant, per_token_group_dequant_fp4,
                    per_token_group_quant_fp4, per_token_group_quant_fp8, per_token_group_quant_fp8_colmajor,
                    quant_e5m6, rms_norm_quant_fp8, fused_add_rms_norm_quant_fp8, silu_and_mul_backward_quant_fp8,
                    silu_and_mul_per_channel_quant_fp8_transpose, silu_and_mul_quant_fp8,
                    silu_and_mul_quant_fp8_colmajor, transpose)
from .rotary import qk_norm_rope_cache, rotary_embedding  # noqa: F401
