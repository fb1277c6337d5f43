"""Torch references for the norm family (test oracle and TKREG_FALLBACK=reference path)."""
from __future__ import annotations

HEAD_MAX_N = 256    # the widest head tkreg.rms_norm_heads serves (its kernels' resident head-dim rows)


def rms_norm(x, weight, eps=1e-6):
    import torch
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * r * weight.float()).to(x.dtype)


def rms_norm_heads(x, weight, eps=1e-6):
    """rms_norm of each head of x[T, H, N] (any strides), returned contiguous."""
    return rms_norm(x, weight, eps).contiguous()


def fused_add_rms_norm(x, residual, weight, eps=1e-6):
    """In place, like the kernel: residual <- round(x + residual); x <- rms_norm(residual)."""
    residual.copy_((x.float() + residual.float()).to(residual.dtype))
    x.copy_(rms_norm(residual, weight, eps))


def rms_norm_backward(dy, x, weight, eps=1e-6):
    import torch
    xf, g = x.float(), dy.float() * weight.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    n = x.shape[-1]
    dx = r * g - (r ** 3) * (g * xf).sum(-1, keepdim=True) / n * xf
    dw = (dy.float() * xf * r).sum(0)
    return dx.to(x.dtype), dw.to(x.dtype)
