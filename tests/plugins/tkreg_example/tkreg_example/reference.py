"""Plain-torch reference of the example plugin's op: the test oracle and the fallback that
TKREG_FALLBACK=reference runs where no pack serves the GPU (the spec names it as
"tkreg_example.reference:scale_add").  fp32 math, rounded once to x's dtype, as the kernel does."""
from __future__ import annotations


def scale_add(x, y, alpha: float = 1.0):
    return (x.float() * alpha + y.float()).to(x.dtype)
