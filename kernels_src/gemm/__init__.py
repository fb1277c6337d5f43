"""GEMM family: dense bf16/fp16 and FP8 block-scaled GEMMs, and the MoE grouped GEMMs.

- dense.py    tkreg.gemm: out[M, N] = a[M, K] @ b[N, K]^T (+ bias[N]), bf16/fp16, fp32
              accumulation rounded once.  Any M, N, K with K, N % 8 == 0 (TMA rows).
- fp8.py      tkreg.fp8_gemm: DeepSeek-V3 / DeepGEMM block-scaled e4m3, 1x128 activation and
              128x128 weight scales (fp32, any strides for a_scale), each 128-wide K block
              promoted into an fp32 accumulator with both scales; bf16 out.  K % 16 == 0, N % 8 == 0.
- grouped.py  tkreg.grouped_gemm / grouped_gemm_masked / fp8_grouped_gemm / fp8_grouped_gemm_masked:
              out rows of expert e = a rows of e @ b[e]^T, contiguous (segments at multiples of 128
              rows, group_offsets[E + 1]) or masked (a[E, Mmax, K], counts[E]: DeepEP low-latency);
              rows outside every segment are never written.
- swiglu.py   tkreg.gemm_swiglu: out[M, N/2] = silu(a @ gate^T) * (a @ up^T) from the packed gate_up
              weight (tkreg.ops.pack_gate_up), the SwiGLU in the GEMM's epilogue; sm_90a.
- gradients.py tkreg.gemm_dgrad / gemm_wgrad / gemm_wgrad_accumulate: a Linear layer's input and weight
              gradients (dy @ w, dy^T @ x; the latter also added into an fp32 main grad), sm_90a.
- fp8_gradients.py tkreg.fp8_gemm_wgrad / fp8_gemm_wgrad_accumulate: the FP8 weight gradient (DeepGEMM's
              1D1D scaling) on the transposed per-channel casts, fp32 out or into a main grad, sm_90a.
- grouped_gradients.py tkreg.grouped_gemm_dgrad / grouped_gemm_masked_dgrad / grouped_gemm_wgrad (+ _accumulate)
              / grouped_gemm_masked_wgrad: the grouped GEMMs' gradients (k-grouped wgrad per expert), sm_90a.
- split_k.py  split-K (fp32 partials in the op's `workspace`, summed in split order) and its reduce kernel.
- classes.py  the shape-class rules (`tkreg.explain` shows which class a call gets).
- tiles/      the tile bodies: sm_90a warp-specialized bf16 and FP8 tiles (producer warpgroup +
              WGMMA consumers over an mbarrier ring), sm_100a tcgen05 + tensor-memory tiles.

Sizes served: every M, N, K the TMA row rule allows, from decode (M = 1, swap-AB tiles and split-K)
to prefill (128-row persistent tiles picked by wave fill).  sm_90a kernels are measured on the H200;
the sm_100a kernels are compiled and SASS-checked only.

Tuning history and measured tables: docs/gemm-tuning.md.
"""
from .dense import SPECS as _DENSE
from .fp8 import SPECS as _FP8
from .fp8_gradients import SPECS as _FP8_GRADIENTS
from .gradients import SPECS as _GRADIENTS
from .grouped import SPECS as _GROUPED
from .grouped_gradients import SPECS as _GROUPED_GRADIENTS
from .swiglu import SPECS as _SWIGLU

SPECS = _DENSE + _FP8 + _GROUPED + _SWIGLU + _GRADIENTS
SPECS += _FP8_GRADIENTS
SPECS += _GROUPED_GRADIENTS
