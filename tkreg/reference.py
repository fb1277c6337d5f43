"""Plain-torch references: the test oracle for every op and the TKREG_FALLBACK=reference path.

Each takes the op's inputs and scalars by name and returns its outputs (a tensor or a tuple),
computing in fp32 and rounding once, as the kernels do.
"""
from __future__ import annotations


def rms_norm(x, weight, eps=1e-6):
    import torch
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * r * weight.float()).to(x.dtype)


def gemm(a, b):
    import torch
    return torch.matmul(a.float(), b.float().t()).to(a.dtype)
