"""Typed functions for the engram family (DeepSeek-V4's n-gram memory, TileKernels' semantics)."""
from __future__ import annotations

from ..runtime import OPS
from ._route import compiling, graph


def engram_hash(ngram_ids, multipliers, vocab_sizes, offsets, *, out=None):
    """Embedding-table indices of each token's n-grams: [L, T, (n-1)*E] int32.

    ngram_ids[T, n] int32 (a token's id and the n-1 before it), multipliers[L, n] int64,
    vocab_sizes[L, n-1, E] int32 (> 0), offsets[L, (n-1)*E] int32.  Column p*E + j of layer l is
    (XOR over i <= p+1 of ids[t, i] * multipliers[l, i]) floor-mod vocab_sizes[l, p, j] plus
    offsets[l, p*E + j], in wrapping 64-bit (then 32-bit) integer arithmetic: bit-exact.  T may
    be 0; n >= 2."""
    if compiling():
        return graph("tkreg.engram_hash", out, ngram_ids, multipliers, vocab_sizes, offsets)
    return OPS["tkreg.engram_hash"](ngram_ids, multipliers, vocab_sizes, offsets, out)


def engram_fused_weight(wh, we, *, out=None):
    """wh[m, H] * we[m, H] (bf16) in fp32 [m, H] (H % 8 == 0): the gate backward's weight."""
    if compiling():
        return graph("tkreg.engram_fused_weight", out, wh, we)
    return OPS["tkreg.engram_fused_weight"](wh, we, out)


def engram_gate_fwd(x, k, v, wh, we, clamp: float, eps: float):
    """The engram gate forward and what its backward needs: (out[T, m, H] bf16, dot, gate,
    rstd_x, rstd_k [T, m] fp32).

    x, k[T, m, H], v[T, H], wh, we[m, H], bf16; k and v may be views with a contiguous last dim
    and other strides multiples of 8.  rstd = rsqrt(mean(row^2) + eps); dot = sum(x*wh*k*we)
    (raw); s = dot * rstd_x * rstd_k / sqrt(H); gate = sigmoid(sign(s) * sqrt(max(|s|, clamp)));
    out = x + gate * v[t].  H = 4096 and 7168 have their own kernels; any other H % 8 == 0 up
    to 16384 runs an any-H one; T and m are run-time (T = 0 launches nothing)."""
    if compiling():
        return graph("tkreg.engram_gate", None, x, k, v, wh, we, clamp, eps)
    return OPS["tkreg.engram_gate"](x, k, v, wh, we, clamp, eps)


def engram_gate(x, k, v, wh, we, clamp: float, eps: float):
    """out = x + sigmoid(signed_sqrt(clamp(<rmsnorm(x, wh), rmsnorm(k, we)> / sqrt(H)))) * v:
    engram_gate_fwd's first output (its other outputs are written too, and dropped)."""
    return engram_gate_fwd(x, k, v, wh, we, clamp, eps)[0]


def engram_gate_backward(grad_out, x, k, v, wh, we, dot, gate, rstd_x, rstd_k, clamp: float):
    """Gradients of engram_gate from its saved (dot, gate, rstd_x, rstd_k): (grad_x, grad_k,
    grad_v bf16; grad_wh, grad_we fp32 [m, H]).  Deterministic: the weight gradients sum per-block
    partial rows in a fixed order (no float atomics).  grad_out contiguous [T, m, H]."""
    args = (grad_out, x, k, v, wh, we, dot, gate, rstd_x, rstd_k, clamp)
    if compiling():
        return graph("tkreg.engram_gate_backward", None, *args)
    return OPS["tkreg.engram_gate_backward"](*args)


class EngramGateGrad:
    """Autograd of tkreg.engram_gate (its spec names this class as `backward`): gradients reach x,
    k, v, wh and we through `out`; the saved outputs (dot, gate, rstd_x, rstd_k) carry none.  A
    weight with a `main_grad` (an fp32 buffer, as Megatron keeps) gets its gradient added there
    and returns None, as TileKernels' EngramGateFn does."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, k, v, wh, we, clamp, _eps = inputs
        _, dot, gate, rstd_x, rstd_k = output
        ctx.save_for_backward(x, k, v, wh, we, dot, gate, rstd_x, rstd_k)
        ctx.clamp = clamp

    @staticmethod
    def backward(ctx, grad_out, *_saved_grads):
        import torch

        from ._route import op
        x, k, v, wh, we, dot, gate, rstd_x, rstd_k = ctx.saved_tensors
        if grad_out is None:
            grad_out = torch.zeros_like(x)
        gx, gk, gv, gwh, gwe = op("tkreg.engram_gate_backward")(grad_out.contiguous(), x, k, v, wh, we, dot, gate,
                                                                 rstd_x, rstd_k, ctx.clamp)
        grads = []
        for w, g in ((wh, gwh), (we, gwe)):
            main = getattr(w, "main_grad", None)
            if main is not None:
                main.add_(g)
                grads.append(None)
            else:
                grads.append(g.to(w.dtype))
        return gx, gk, gv, grads[0], grads[1], None, None
