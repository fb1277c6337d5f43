"""Torch references for the gated activations (test oracle and TKREG_FALLBACK=reference path).

x[..., N] = [gate | up] -> out[..., N // 2], every step an fp32 op in the kernels' order, rounded
once to x's dtype.  On CUDA this is bit-identical to the kernels (both use the precise expf and
IEEE division); on the CPU torch's exp may differ from CUDA's in the last fp32 bit, which changes
a rounded bf16/fp16 result by one unit in rare cases.
"""
from __future__ import annotations


def _halves(x):
    n = x.shape[-1]
    if n % 2:
        raise ValueError(f"gated activation: the last dim of x must be even (gate | up), got {n}")
    return x[..., : n // 2].float(), x[..., n // 2:].float()


def silu_and_mul(x):
    """silu(g) * u with silu(g) = g / (1 + exp(-g)) (vLLM's `silu_and_mul`, one rounding)."""
    import torch
    g, u = _halves(x)
    return (g / (1 + torch.exp(-g)) * u).to(x.dtype)


def swiglu(x, limit=0.0, alpha=1.0, beta=0.0):
    """g * sigmoid(alpha * g) * (u + beta), as g / (1 + exp(-(alpha * g))) * (u + beta).

    limit > 0 first clamps g from above at `limit` and u to [-limit, limit] (torch.clamp: NaN
    stays NaN); limit <= 0 means no clamp.  GPT-OSS: limit=7, alpha=1.702, beta=1.  torch rounds
    the Python scalars to fp32 inside each op, as the kernel receives them.
    """
    import torch
    g, u = _halves(x)
    if limit > 0:
        g = g.clamp(max=limit)
        u = u.clamp(-limit, limit)
    return (g / (1 + torch.exp(-(alpha * g))) * (u + beta)).to(x.dtype)


def silu_and_mul_backward(dy, x):
    """dx = [dy * u * s * (1 + g * (1 - s)) | dy * g * s], s = sigmoid(g); fp32, rounded once."""
    import torch
    g, u = x.float().chunk(2, dim=-1)
    d = dy.float()
    s = 1.0 / (1.0 + torch.exp(-g))
    return torch.cat([d * u * s * (1 + g * (1 - s)), d * g * s], dim=-1).to(x.dtype)
