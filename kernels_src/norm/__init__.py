"""RMSNorm family: rms_norm, fused_add_rms_norm (vLLM's in-place residual form), rms_norm_backward.

y = x * rsqrt(mean(x^2) + eps) * w, accumulated in fp32 and rounded once to x's dtype; the fused
op rounds x + residual to the dtype first, so x becomes exactly rms_norm(new residual).  Tokens M
are run-time (0 launches nothing); rows of N % 8 == 0 are served, any other N raises
NoKernelError (or runs the torch reference with TKREG_FALLBACK=reference).

- forward.py: the hidden sizes in HIDDEN get kernels with N baked in; every other N runs an any-N
  kernel, the row held in registers where a RESIDENT range covers N (head-dim rows for qk-norm
  included), else in two passes.  The any-N kernels sum in another order than the static ones, so
  the two may differ in the last bit of a rounding.
- heads.py: rms_norm_heads, each head of a strided x[T, H, N] (qk-norm on the q or k slice of a
  fused qkv output, no copy) by forward.py's head-dim resident-row kernel; tkreg.ops.rms_norm
  routes a non-contiguous 3-D x there.
- backward.py: dx and dw for HIDDEN sizes (static N) and any other N % 8 == 0.

Tuning history and measured tables: docs/norm-tuning.md.
"""
from .backward import SPECS as _BACKWARD
from .forward import SPECS as _FORWARD
from .heads import SPECS as _HEADS

SPECS = _FORWARD + _HEADS + _BACKWARD
