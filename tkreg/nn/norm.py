"""tkreg.nn.RMSNorm on tkreg.rms_norm and its backward kernel."""
from __future__ import annotations

import torch

from .. import ops
from .linear import _tokens


class RMSNorm(torch.nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim (weight initialized to ones)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, device=None, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))

    def forward(self, x):
        return ops.rms_norm(_tokens(x), self.weight, self.eps).view(x.shape)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
