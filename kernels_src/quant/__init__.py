"""Quant family: FP8 (e4m3) per-token-group / per-block / per-channel quantization and their casts
back, the fused SwiGLU (+ backward) FP8 quants, MXFP4, E5M6, and (batched) transposes.

Exact semantics, shared bit for bit with tkreg/reference/quant.py (TileKernels' torch
references where TileKernels has the op):
  amax  = max |x| over the group in fp32, clamped below at AMAX_FLOOR = 1e-4;
  s     = amax / qmax (IEEE fp32 division; torch's CUDA `t / 448.0` multiplies by fl(1/448) instead);
  q     = code(x * fl(qmax / amax)), one fp32 multiply and one rounding (e4m3: RNE, saturating);
  ue8m0 = 1: s = 2^ceil(log2(amax / qmax)), q = code(x * 2^-e), exact up to the code rounding;
  dequant: out = bf16(fp32(q) * s), one multiply and one rounding.
  SwiGLU ops: y = silu(g) * u in fp32 with the fast-math silu (device.silu_mul, a few fp32 ulps
  from torch's expf / IEEE division), quantized with no bf16 step: codes match the reference
  except where y lands within a few ulps of an e4m3 rounding boundary (about 1 in 10^6 elements,
  one e4m3 step off), scales to 1e-6 relative.
Non-finite inputs give unspecified outputs (NaN or saturated values).  Every kernel reads its input
once, keeps it in registers and rounds each output once.

Modules and sizes served (token dims run-time everywhere, M = 0 launches nothing; other sizes raise
NoKernelError, or run the torch reference with TKREG_FALLBACK=reference):
- fp8_group: per_token_group_quant_fp8[_colmajor] (K % 128 == 0), silu_and_mul_quant_fp8[_colmajor]
  (N = 2I, I % 128 == 0), per_block_quant_fp8 (any N, K % 16 == 0).
- rms_norm_fp8: rms_norm_quant_fp8 / fused_add_rms_norm_quant_fp8 (the norm that feeds an FP8
  GEMM, its bf16 output quantized per 1x128 group in the same kernel; N % 128 == 0, N <= 16384, bf16).
- fp8_dequant: per_token_group_dequant (K % 128 == 0), per_block_dequant (K % 16 == 0),
  group_dequant_fp8 (scales at any strides) and per_channel_dequant_fp8 (C % 8 == 0).
- per_channel: per_channel_quant_fp8[_transpose] (K % 8 == 0),
  silu_and_mul_per_channel_quant_fp8_transpose (I % 8 == 0).
- swiglu_backward: silu_and_mul_backward_quant_fp8 (I % 128 == 0).
- fp4: per_token_group_quant_fp4 / per_token_group_dequant_fp4 (OCP MXFP4, K % 32 == 0).
- e5m6: quant_e5m6 (K % 8 == 0, K <= 16384) / dequant_e5m6.
- transpose: batched_transpose of 1-, 2- and 4-byte elements (B <= 65535, any M and N).
- device: the preludes, scale rule, block amax and SwiGLU forms they share.
Measured on the H200 (BENCHMARKS.md, % of copy at 16384 x 7168): 86-99% across the family.
Tuning history and measured tables: docs/quant-tuning.md.
"""
from .e5m6 import SPECS as _E5M6
from .fp4 import SPECS as _FP4
from .fp8_dequant import SPECS as _FP8_DEQUANT
from .fp8_group import SPECS as _FP8_GROUP
from .per_channel import SPECS as _PER_CHANNEL
from .rms_norm_fp8 import SPECS as _RMS_NORM_FP8
from .swiglu_backward import SPECS as _SWIGLU_BACKWARD
from .transpose import SPECS as _TRANSPOSE

SPECS = _FP8_GROUP + _RMS_NORM_FP8 + _FP8_DEQUANT + _TRANSPOSE + _PER_CHANNEL + _SWIGLU_BACKWARD + _FP4 + _E5M6
