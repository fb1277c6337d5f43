"""Typed functions for the norm family; rms_norm is differentiable (backward kernel)."""
from __future__ import annotations

from ..runtime import OPS
from ..reference.norm import HEAD_MAX_N
from ._route import compiling, graph


def rms_norm(x, weight, eps: float = 1e-6, *, out=None):
    """RMSNorm over the last dim: `x[M, N] * rsqrt(mean(x^2) + eps) * weight[N]` (bf16/fp16).

    x may also be a strided [T, H, N] view with a contiguous last dim (the q or k slice of a
    fused qkv output, token and head strides multiples of 8): each head is normalized in place of
    a copy (`rms_norm_heads`, N <= 256) into a contiguous [T, H, N].  A contiguous [T, H, N], a
    wider one, or any [T, H, N] while autograd records, runs as [T * H, N] (a strided one copied
    first)."""
    if getattr(x, "ndim", 0) == 3:                # not a tensor: the launcher names what is wrong
        import torch
        recording = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
        if not x.is_contiguous() and x.shape[-1] <= HEAD_MAX_N and not recording:
            return rms_norm_heads(x, weight, eps, out=out)
        t, h, n = x.shape
        y = rms_norm(x.reshape(t * h, n), weight, eps, out=None if out is None else out.view(t * h, n))
        return y.view(t, h, n) if out is None else out
    if compiling():
        return graph("tkreg.rms_norm", out, x, weight, eps)
    return OPS["tkreg.rms_norm"](x, weight, eps, out)


def rms_norm_heads(x, weight, eps: float = 1e-6, *, out=None):
    """RMSNorm of each head of a strided x[T, H, N] (contiguous last dim; token and head strides
    multiples of 8 elements) into a contiguous out[T, H, N]; N % 8 == 0 and N <= 256."""
    if compiling():
        return graph("tkreg.rms_norm_heads", out, x, weight, eps)
    return OPS["tkreg.rms_norm_heads"](x, weight, eps, out)


def fused_add_rms_norm(x, residual, weight, eps: float = 1e-6):
    """In place: `residual += x` (rounded), then `x = rms_norm(residual, weight)`; returns (x, residual)."""
    if compiling():
        graph("tkreg.fused_add_rms_norm", None, x, residual, weight, eps)
    else:
        OPS["tkreg.fused_add_rms_norm"](x, residual, weight, eps)
    return x, residual


def rms_norm_backward(dy, x, weight, eps: float = 1e-6):
    """(dx, dweight) of rms_norm for upstream gradient dy."""
    if compiling():
        return graph("tkreg.rms_norm_backward", None, dy, x, weight, eps)
    return OPS["tkreg.rms_norm_backward"](dy, x, weight, eps)


class RmsNormGrad:
    """Autograd of tkreg.rms_norm (its spec names this class as `backward`)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, eps = inputs
        ctx.save_for_backward(x, weight)
        ctx.eps = eps

    @staticmethod
    def backward(ctx, dy):
        from ._route import op
        x, weight = ctx.saved_tensors
        dx, dw = op("tkreg.rms_norm_backward")(dy.contiguous(), x, weight, ctx.eps)
        return dx, dw, None
