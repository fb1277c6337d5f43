"""Gated activations: silu_and_mul and swiglu over x[T, N] = [gate | up] -> out[T, N // 2], and
silu_and_mul_backward.

Both forward ops read each input element once and write each output once, in fp32 with one
rounding:

    silu_and_mul:  out = g / (1 + exp(-g)) * u
    swiglu:        g' = min(g, limit), u' = clamp(u, -limit, limit)   (only when limit > 0)
                   out = g' / (1 + exp(-(alpha * g'))) * (u' + beta)

with g = x[:, :N/2] and u = x[:, N/2:] widened to fp32.  Every step is an IEEE fp32 operation in
that order (precise `expf`, IEEE division, no fused multiply-add, as torch's CUDA kernels do), so
`tkreg.reference.activation` reproduces the kernels bit for bit.  Clamps keep NaN (torch.clamp's
rule).  GPT-OSS's activation is swiglu(limit=7, alpha=1.702, beta=1) on *de-interleaved*
gate/up rows (its checkpoints interleave them; reorder the weight once at load time).
silu_and_mul_backward: dx = [dy * u * s * (1 + g * (1 - s)) | dy * g * s], s = sigmoid(g), fp32,
rounded once.

Sizes served: bf16 and fp16, any T, any even N (16-byte vectors when N % 16 == 0); odd N has no
variant.
  forward.py    silu_and_mul, swiglu (layout, variants by call size)
  backward.py   silu_and_mul_backward
Tuning history: docs/activation-tuning.md.
"""
from .backward import SPECS as _BACKWARD
from .forward import SPECS as _FORWARD

SPECS = _FORWARD + _BACKWARD
