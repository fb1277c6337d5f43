"""Typed functions for the norm family; rms_norm is differentiable (backward kernel)."""
from __future__ import annotations

from ..runtime import OPS
from ._route import compiling, graph


def rms_norm(x, weight, eps: float = 1e-6, *, out=None):
    """RMSNorm over the last dim: `x[M, N] * rsqrt(mean(x^2) + eps) * weight[N]` (bf16/fp16)."""
    if compiling():
        return graph("tkreg.rms_norm", out, x, weight, eps)
    return OPS["tkreg.rms_norm"](x, weight, eps, out)


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
