"""torch.nn modules on tkreg's differentiable ops, for a training script to drop in.

- Linear      y = x @ weight^T (+ bias): tkreg.gemm forward, gemm_dgrad / gemm_wgrad backward
              (a weight's fp32 `main_grad`, when set, receives its gradient as Megatron's does).
- Fp8Linear   DeepSeek-V3's FP8 recipe: x cast 1x128, the weight 128x128, tkreg.fp8_gemm; backward
              dgrad on the transposed weight blocks, wgrad on per-channel casts (fp8_gemm_wgrad).
- RMSNorm     tkreg.rms_norm and its backward kernel.
- SwiGLUMLP   down(silu(x @ gate^T) * (x @ up^T)): one gate_up GEMM over the packed [gate; up]
              weight, tkreg.silu_and_mul, the down GEMM; every step differentiable.
- Attention   packed qkv GEMM, rotary (in place), tkreg.flash_attention (causal, GQA), o GEMM.
- MoE         router + tkreg top-k gate, expand, grouped GEMMs, silu_and_mul, combine (+ shared).

Inputs are bf16/fp16 with any leading dims (flattened to tokens); every module traces under
torch.compile(fullgraph=True), forward and backward.
"""
from .attention import Attention
from .fp8_linear import Fp8Linear
from .linear import Linear
from .mlp import SwiGLUMLP
from .moe import MoE
from .norm import RMSNorm

__all__ = ["Attention", "Fp8Linear", "Linear", "MoE", "RMSNorm", "SwiGLUMLP"]
