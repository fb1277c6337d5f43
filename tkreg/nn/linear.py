"""tkreg.nn.Linear: y = x @ weight^T (+ bias) on tkreg.gemm and its gradient GEMMs."""
from __future__ import annotations

import math

import torch

from .. import ops


def _tokens(x):
    """x[..., H] as the 2-D [T, H] the ops take (a copy only when x is not contiguous)."""
    return x.reshape(-1, x.shape[-1])


class Linear(torch.nn.Module):
    """y = x @ weight^T (+ bias), weight [out_features, in_features] (torch.nn.Linear's layout and
    initialization); in_features and out_features % 8 == 0 (TMA rows)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=torch.bfloat16):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.empty(out_features, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features else 0
            torch.nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        y = ops.gemm(_tokens(x), self.weight, self.bias)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
