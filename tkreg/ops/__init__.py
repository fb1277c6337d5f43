"""Typed functions for the built-in ops: the fast eager path, one module per op family.

Each is one dict lookup and one call into the native launcher, which validates, picks the
variant and launches; outputs are allocated unless `out=` is given.
"""
from .activation import silu_and_mul, silu_and_mul_backward, swiglu  # noqa: F401
from .fp8 import (per_block_dequant, per_block_quant_fp8, per_token_group_dequant,  # noqa: F401
                  per_token_group_quant_fp8, silu_and_mul_quant_fp8)
from .gemm import fp8_gemm, gemm  # noqa: F401
from .norm import fused_add_rms_norm, rms_norm, rms_norm_backward  # noqa: F401
from .paged_attention import paged_decode_attention  # noqa: F401
from .rotary import rotary_embedding  # noqa: F401

