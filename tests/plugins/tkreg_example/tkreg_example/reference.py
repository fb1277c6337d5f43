"""Plain-torch references of the plugin's ops: the tests' oracle, and what TKREG_FALLBACK=reference
runs where no pack serves the GPU.  Each takes the op's inputs and scalars by name and returns its
outputs; an in-place op's reference writes its in-place tensors and returns None."""
from __future__ import annotations


def gelu_tanh_and_mul(x):
    import torch
    g, u = x.float().chunk(2, dim=-1)
    return (torch.nn.functional.gelu(g, approximate="tanh") * u).to(x.dtype)


def axpy(x, y, alpha: float = 1.0):
    x.copy_((x.float() + alpha * y.float()).to(x.dtype))
