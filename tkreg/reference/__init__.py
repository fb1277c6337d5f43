"""Plain-torch references, one module per op family: the test oracle for every op and the
TKREG_FALLBACK=reference path.  Each function takes the op's inputs and scalars by name and
returns its outputs (a tensor or a tuple), computing in fp32 and rounding once, as the kernels do.
Specs name them as "tkreg.reference.<family>:<function>".
"""
from .gemm import gemm  # noqa: F401
from .norm import fused_add_rms_norm, rms_norm, rms_norm_backward  # noqa: F401
