"""Typed functions for the built-in ops: the fast eager path, one module per op family.

Each is one dict lookup and one call into the native launcher, which validates, picks the
variant and launches; outputs are allocated unless `out=` is given.
"""
from .gemm import gemm  # noqa: F401
from .norm import fused_add_rms_norm, rms_norm, rms_norm_backward  # noqa: F401
