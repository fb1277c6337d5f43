"""Plain-torch references, one module per op family: the test oracle for every op and the
TKREG_FALLBACK=reference path.  Each function takes the op's inputs and scalars by name and
returns its outputs (a tensor or a tuple), computing in fp32 and rounding once, as the kernels do.
Specs name them as "tkreg.reference.<family>:<function>".
"""
from .activation import silu_and_mul, silu_and_mul_backward, swiglu  # noqa: F401
from .fp8 import (per_block_dequant, per_block_quant_fp8, per_token_group_dequant,  # noqa: F401
                  per_token_group_quant_fp8, per_token_group_quant_fp8_colmajor,
                  silu_and_mul_quant_fp8, silu_and_mul_quant_fp8_colmajor)
from .gemm import gemm  # noqa: F401
from .norm import fused_add_rms_norm, rms_norm, rms_norm_backward  # noqa: F401
from .paged_attention import paged_decode_attention  # noqa: F401
from .rotary import rotary_embedding  # noqa: F401
