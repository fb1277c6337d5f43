"""Typed functions for the built-in ops: the fast eager path, one module per op family (the
families of kernels_src/).

Each is one dict lookup and one call into the native launcher, which validates, picks the
variant and launches; outputs are allocated unless `out=` is given.
"""
from .activation import silu_and_mul, silu_and_mul_backward, swiglu  # noqa: F401
from .attention import flash_attention, flash_attention_varlen, paged_decode_attention  # noqa: F401
from .engram import engram_fused_weight, engram_gate, engram_gate_backward, engram_gate_fwd, engram_hash  # noqa: F401
from .fp8_gradients import fp8_gemm_wgrad, fp8_transpose_blocks  # noqa: F401
from .gemm import (fp8_gemm, fp8_grouped_gemm, fp8_grouped_gemm_masked, gemm, gemm_dgrad, gemm_swiglu,  # noqa: F401
                   gemm_wgrad, grouped_gemm, grouped_gemm_masked, pack_gate_up, unpack_gate_up)
from .grouped_gradients import (grouped_gemm_dgrad, grouped_gemm_masked_dgrad,  # noqa: F401
                                grouped_gemm_masked_wgrad, grouped_gemm_wgrad)
from .mhc import (expand_to_mhc, expand_to_mhc_backward, mhc_head_compute_mix,  # noqa: F401
                  mhc_head_compute_mix_backward, mhc_post, mhc_post_backward, mhc_pre_apply_mix,
                  mhc_pre_apply_mix_backward, mhc_pre_big_fuse, mhc_pre_norm_fn, mhc_pre_norm_fn_backward,
                  mhc_pre_norm_fn_fwd, mhc_pre_split_mixes, mhc_pre_split_mixes_backward, sinkhorn_normalize,
                  sinkhorn_normalize_backward)
from .moe import (expert_counts, group_limited_topk_gate, moe_combine, moe_expand,  # noqa: F401
                  moe_mapping, topk_gate)
from .norm import fused_add_rms_norm, rms_norm, rms_norm_backward, rms_norm_heads  # noqa: F401
from .quant import (batched_transpose, dequant_e5m6, dequant_fp8, per_block_dequant,  # noqa: F401
                    per_block_quant_fp8, per_channel_quant_fp8, per_token_group_dequant,
                    per_token_group_dequant_fp4, per_token_group_quant_fp4, per_token_group_quant_fp8,
                    quant_e5m6, rms_norm_quant_fp8, fused_add_rms_norm_quant_fp8, silu_and_mul_backward_quant_fp8, silu_and_mul_per_channel_quant_fp8_transpose,
                    silu_and_mul_quant_fp8, transpose)
from .rotary import qk_norm_rope_cache, rotary_embedding  # noqa: F401
