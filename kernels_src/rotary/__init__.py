"""Rotary position embedding (vLLM's `rotary_embedding`), in place on q and k.

    q[T, HQ * D], k[T, HK * D]   (bf16/fp16; heads of D elements, token-major, contiguous)
    cos_sin_cache[P, D]          (q's dtype; row p = [cos(p * f_0..f_{D/2-1}) | sin(...)])
    positions[T] int64           (clamped to [0, P - 1]: never an out-of-bounds read)

For every head and pair i < D/2 with c = cache[p, i], s = cache[p, D/2 + i]:
    neox (is_neox=True):  (x1, x2) = (x[i], x[i + D/2])       gptj: (x1, x2) = (x[2i], x[2i + 1])
    x1' = x1*c - x2*s,  x2' = x2*c + x1*s
in fp32 (each product and the sum rounded to fp32, no fused multiply-add, like torch's separate
ops), then rounded once to q's dtype.  The whole rotary dim is the head (rot_dim == D).

Sizes served: D = 64 and 128 (static), bf16/fp16; HQ = NQ / D and HK = NK / D are read at run
time (rule: NQ and NK positive multiples of D, P > 0).  Other head dims: no variant
(NoKernelError, or the torch reference with TKREG_FALLBACK=reference).
  embedding.py   the kernel (layout in its docstring) and the spec
  qk_norm_rope_cache.py   qk-norm (optional) + rotary of q and k read as strided views (a fused
                 qkv output), k and v written into a paged NHD cache through a slot mapping
                 (optional), one launch; q_out, k_out returned contiguous (docs/rotary-tuning.md)
Tuning: the first layout ships unswept; bench rows (86-95% of copy at 16384 tokens, H200):
BENCHMARKS.md.
"""
from .embedding import SPECS as _EMBEDDING
from .qk_norm_rope_cache import SPECS as _QK_NORM_ROPE_CACHE

SPECS = _EMBEDDING + _QK_NORM_ROPE_CACHE

__all__ = ["SPECS"]
