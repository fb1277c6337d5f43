"""Torch references for the norm family (test oracle and TKREG_FALLBACK=reference path)."""
from __future__ import annotations


def rms_norm(x, weight, eps=1e-6):
    import torch
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * r * weight.float()).to(x.dtype)
