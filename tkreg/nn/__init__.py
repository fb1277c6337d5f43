"""torch.nn modules on tkreg's differentiable ops, for a training script to drop in.

- Linear      y = x @ weight^T (+ bias): tkreg.gemm forward, gemm_dgrad / gemm_wgrad backward
              (a weight's fp32 `main_grad`, when set, receives its gradient as Megatron's does).
- RMSNorm     tkreg.rms_norm and its backward kernel.
- SwiGLUMLP   down(silu(x @ gate^T) * (x @ up^T)): one gate_up GEMM over the packed [gate; up]
              weight, tkreg.silu_and_mul, the down GEMM; every step differentiable.

Inputs are bf16/fp16 with any leading dims (flattened to tokens); every module traces under
torch.compile(fullgraph=True), forward and backward.  Attention and MoE modules are not here yet.
"""
from .linear import Linear
from .mlp import SwiGLUMLP
from .norm import RMSNorm

__all__ = ["Linear", "RMSNorm", "SwiGLUMLP"]
