"""Engram family (DeepSeek-V4's n-gram memory): engram_hash, engram_gate, engram_fused_weight.

Semantics are those of DeepSeek's TileKernels (`tile_kernels/torch/engram.py`), written out in
tkreg.reference.engram:
- engram_hash(ngram_ids[T, n] i32, multipliers[L, n] i64, vocab_sizes[L, n-1, E] i32,
  offsets[L, (n-1)*E] i32) -> [L, T, (n-1)*E] i32: the running XOR of id * multiplier (int64,
  wrapping) over each prefix of 2..n ids, floor-mod each table's size, plus the table's offset.
  Bit-exact.  T, n >= 2, L, E all run-time (V4: n = 3, L = 2, E = 8).
- engram_gate(x[T, m, H], k[T, m, H], v[T, H], wh[m, H], we[m, H], clamp, eps): out = x +
  sigmoid(signed_sqrt(clamp(<rmsnorm(x, wh), rmsnorm(k, we)> / sqrt(H)))) * v, bf16, with the raw
  dot, gate, rstd_x and rstd_k [T, m] fp32 the backward needs.  T and m run-time; H baked in at
  4096 and 7168 (V4), any other H % 8 == 0 up to 16384 on any-H kernels.
- engram_fused_weight(wh, we) -> wh * we fp32 [m, H].
- engram_gate_backward(grad_out, x, k, v, wh, we, dot, gate, rstd_x, rstd_k, clamp) -> grad_x,
  grad_k, grad_v (bf16), grad_wh, grad_we (fp32): deterministic (per-block partial rows summed in
  order, no float atomics); engram_gate's autograd (tkreg.ops.engram:EngramGateGrad).  Same sizes
  as the forward; any m.

Modules: hash.py (engram_hash), gate.py (engram_gate, engram_fused_weight), backward.py
(engram_gate_backward).
Tuning: docs/engram-tuning.md.
"""
from .backward import SPECS as _BACKWARD
from .gate import SPECS as _GATE
from .hash import SPECS as _HASH

SPECS = _HASH + _GATE + _BACKWARD
