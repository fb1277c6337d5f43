"""Typed functions for the gated activations: x[..., N] = [gate | up] -> out[..., N // 2]."""
from __future__ import annotations

from ..runtime import OPS
from ._route import compiling, graph


def _flat(name, x, out):
    """x (and out) as the 2-D [T, N] views the op takes; views only, never copies."""
    try:
        n = x.shape[-1]
        return x.view(-1, n), (None if out is None else out.view(-1, n // 2))
    except (RuntimeError, IndexError) as e:
        raise ValueError(f"{name}: cannot view `x` {tuple(getattr(x, 'shape', ()))} as [tokens, N] without a copy "
                         f"({e}); pass a contiguous tensor") from None


def silu_and_mul(x, *, out=None):
    """`silu(x[..., :N/2]) * x[..., N/2:]` in fp32, rounded once (vLLM's silu_and_mul; bf16/fp16).

    N % 16 == 0 runs the 16-byte vectorized kernel; other even N a scalar one; odd N has none.
    """
    if x.dim() == 2 and not compiling():
        return OPS["tkreg.silu_and_mul"](x, out)
    x2, o2 = _flat("tkreg.silu_and_mul", x, out)
    y = graph("tkreg.silu_and_mul", o2, x2) if compiling() else OPS["tkreg.silu_and_mul"](x2, o2)
    return out if out is not None else y.view(*x.shape[:-1], x.shape[-1] // 2)


def swiglu(x, limit: float = 0.0, alpha: float = 1.0, beta: float = 0.0, *, out=None):
    """`g * sigmoid(alpha * g) * (u + beta)` over x = [g | u], in fp32, rounded once.

    `limit > 0` first clamps g to <= limit and u to [-limit, limit]; `limit <= 0`: no clamp.
    GPT-OSS: `swiglu(x, 7.0, 1.702, 1.0)` with gate/up de-interleaved into halves.
    """
    if x.dim() == 2 and not compiling():
        return OPS["tkreg.swiglu"](x, limit, alpha, beta, out)
    x2, o2 = _flat("tkreg.swiglu", x, out)
    if compiling():
        y = graph("tkreg.swiglu", o2, x2, limit, alpha, beta)
    else:
        y = OPS["tkreg.swiglu"](x2, limit, alpha, beta, o2)
    return out if out is not None else y.view(*x.shape[:-1], x.shape[-1] // 2)


def silu_and_mul_backward(dy, x):
    """dx[T, N] of silu_and_mul for upstream dy[T, N/2] (2-D, contiguous)."""
    if compiling():
        return graph("tkreg.silu_and_mul_backward", None, dy, x)
    return OPS["tkreg.silu_and_mul_backward"](dy, x)


class SiluAndMulGrad:
    """Autograd of tkreg.silu_and_mul (its spec names this class as `backward`)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, dy):
        from ._route import op
        (x,) = ctx.saved_tensors
        return op("tkreg.silu_and_mul_backward")(dy.contiguous(), x)
