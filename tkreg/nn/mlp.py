"""tkreg.nn.SwiGLUMLP: gate_up GEMM, tkreg.silu_and_mul, down GEMM, every step differentiable."""
from __future__ import annotations

import torch

from .. import ops
from .linear import Linear


class SwiGLUMLP(torch.nn.Module):
    """down(silu(x @ gate^T) * (x @ up^T)): gate_up [2I, H] holds gate's I rows then up's (one
    GEMM, packed once), then tkreg.silu_and_mul and down [H, I]; no biases (Llama's MLP)."""

    def __init__(self, hidden_size: int, intermediate_size: int, device=None, dtype=torch.bfloat16):
        super().__init__()
        self.gate_up = Linear(hidden_size, 2 * intermediate_size, bias=False, device=device, dtype=dtype)
        self.down = Linear(intermediate_size, hidden_size, bias=False, device=device, dtype=dtype)

    @classmethod
    def from_weights(cls, gate, up, down):
        """The MLP of gate[I, H], up[I, H] and down[H, I] weights (copied; packed here once)."""
        mlp = cls(gate.shape[1], gate.shape[0], device=gate.device, dtype=gate.dtype)
        with torch.no_grad():
            mlp.gate_up.weight.copy_(torch.cat([gate, up]))
            mlp.down.weight.copy_(down)
        return mlp

    def forward(self, x):
        return self.down(ops.silu_and_mul(self.gate_up(x)))
