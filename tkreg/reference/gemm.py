"""Torch reference for GEMM: fp32 accumulation, one rounding to the input dtype."""
from __future__ import annotations


def gemm(a, b):
    import torch
    return torch.matmul(a.float(), b.float().t()).to(a.dtype)
