"""DeepSeek-V4's blocks as a model author calls them: manifold-constrained hyper-connections (mHC)
and the engram gate, with the signatures of DeepSeek TileKernels' `modeling/mhc/functional.py`
and `modeling/engram`, on tkreg's ahead-of-time kernels (no token count ever compiles).

A V4-style sublayer in a few lines (residual [..., m, H] bf16; m = 4 in V4):

    residual = tkreg.blocks.expand_from_embedding(embeddings, 4)               # [..., 4, H]
    x, ctx = tkreg.blocks.mhc_pre(residual, fn, scale, base)                   # [..., H]
    residual = tkreg.blocks.mhc_post(attention(x), residual, *ctx)             # [..., 4, H]
    residual = tkreg.blocks.engram_gate(residual, k, v, wh, we, clamp, eps)    # [..., 4, H]
    logits_in = tkreg.blocks.mhc_head(residual, head_fn, head_scale, head_base)

Every function is differentiable: each op it calls carries its own backward kernel (registered
with autograd, so torch.compile keeps it whole; expand_from_embedding's is torch's sum).  `mhc_pre` runs the fused inference kernel
(`mhc_pre_big_fuse`: norm_fn, split, Sinkhorn and the pre mix in as few launches as the math
allows) when no input needs a gradient, and the differentiable chain otherwise.  Leading
dimensions are flattened to one token axis T (any T, 0 included) and restored.
"""
from __future__ import annotations

import math

from .ops import engram, mhc

__all__ = ["expand_from_embedding", "mhc_pre", "mhc_post", "mhc_head", "engram_gate"]


def _tokens(t, tail: int):
    """t[..., *tail dims] as [T, *tail dims] (a view where the layout allows; T may be 0)."""
    if t.dim() == tail + 1:
        return t
    lead = t.shape[:t.dim() - tail]
    return t.reshape(math.prod(lead), *t.shape[t.dim() - tail:])


def _grad_needed(*tensors) -> bool:
    import torch
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _check_layout(name: str, residual, fn, rows: tuple, mhc_mult: int):
    """mhc_mult, residual [..., m, H] and fn [r, m * H] (r one of `rows`) agree: an error naming
    what differs, before any launch."""
    if residual.dim() < 2 or residual.shape[-2] != mhc_mult:
        raise ValueError(f"tkreg.blocks.{name}: `residual` has shape {tuple(residual.shape)}; expected "
                         f"[..., mhc_mult={mhc_mult}, hidden]")
    if fn.dim() != 2 or fn.shape[0] not in rows or fn.shape[1] != mhc_mult * residual.shape[-1]:
        want = " or ".join(str((r, mhc_mult * residual.shape[-1])) for r in rows)
        raise ValueError(f"tkreg.blocks.{name}: `fn` has shape {tuple(fn.shape)}; expected {want} "
                         f"(mhc_mult={mhc_mult}, hidden={residual.shape[-1]})")


def expand_from_embedding(x, mhc_mult: int = 4):
    """x[..., H] -> [..., mhc_mult, H]: the embedding copied into each hyper-connection stream
    (tkreg.expand_to_mhc; while x needs a gradient, torch's broadcast copy, whose backward is the
    sum over the streams)."""
    if _grad_needed(x):
        return x.unsqueeze(-2).expand(*x.shape[:-1], mhc_mult, x.shape[-1]).contiguous()
    return mhc.expand_to_mhc(x, mhc_mult)


def mhc_pre(residual, fn, scale, base, *, norm_weight=None, norm_eps: float = 1e-6, mhc_mult: int = 4,
            post_mult_value: float = 1.0, pre_eps: float = 1e-6, sinkhorn_eps: float = 1e-6,
            sinkhorn_repeat: int = 10, n_splits: int = 16):
    """mHC before a sublayer: (layer_input [..., H] bf16, (post [..., m, 1], comb [..., m, m]) fp32).

    residual [..., m, H] bf16; fn [m(m+2), m*H], scale [3], base [m(m+2)], norm_weight [m*H] or
    None, all fp32.  mixes = rmsnorm(residual over m*H, norm_weight) @ fn^T; pre = sigmoid(mix *
    scale[0] + base) + pre_eps, post = sigmoid(...) * post_mult_value, comb = Sinkhorn (repeat
    rounds, eps) of the m x m block; layer_input = sum over m of pre * residual.  `n_splits` is
    TileKernels' split-K count: accepted for its signature, the kernels choose their own split.
    With no gradient needed this is the fused kernel (TileKernels' fused path drops norm_weight;
    this one applies it, as the differentiable chain does)."""
    del n_splits
    _check_layout("mhc_pre", residual, fn, (mhc_mult * (mhc_mult + 2),), mhc_mult)
    if not _grad_needed(residual, fn, scale, base, norm_weight):
        post, comb, x = mhc.mhc_pre_big_fuse(residual, fn, scale, base, norm_eps, pre_eps, sinkhorn_eps,
                                             post_mult_value, sinkhorn_repeat, norm_weight=norm_weight)
        return x, (post, comb)
    mixes = mhc.mhc_pre_norm_fn(residual, fn, norm_weight, norm_eps)
    pre, post, comb = mhc.mhc_pre_split_mixes(mixes, scale, base, mhc_mult, post_mult_value, pre_eps)
    comb = mhc.sinkhorn_normalize(comb, sinkhorn_repeat, sinkhorn_eps)
    return mhc.mhc_pre_apply_mix(residual, pre), (post, comb)


def mhc_post(x, residual, post_layer_mix, comb_res_mix, out=None):
    """mHC after a sublayer: x [..., H] * post [..., m, 1] + comb [..., m, m]^T @ residual
    [..., m, H], in fp32 math, bf16 [..., m, H].  `out=` (TileKernels' argument) receives it
    (forward only: autograd takes no out=)."""
    return mhc.mhc_post(x, residual, post_layer_mix, comb_res_mix, out=out)


def mhc_head(residual, fn, scale, base, *, norm_weight=None, norm_eps: float = 1e-6, mhc_mult: int = 4,
             pre_eps: float = 1e-6, n_splits: int = 16):
    """mHC before the LM head: sum over m of (sigmoid(mix * scale + base) + pre_eps) * residual,
    with mix = rmsnorm(residual, norm_weight) @ fn^T; fn [m, m*H] (zero-padded to m(m+2) rows to
    share mhc_pre_norm_fn), scale [1] or a 0-d tensor, base [m]; -> [..., H] bf16."""
    del n_splits
    import torch
    rows = mhc_mult * (mhc_mult + 2)
    _check_layout("mhc_head", residual, fn, (mhc_mult, rows), mhc_mult)
    if fn.shape[0] < rows:
        fn = torch.nn.functional.pad(fn, (0, 0, 0, rows - fn.shape[0]))
    mixes = mhc.mhc_pre_norm_fn(residual, fn, norm_weight, norm_eps)[..., :mhc_mult]
    mix = mhc.mhc_head_compute_mix(mixes, scale.reshape(1) if scale.numel() == 1 else scale, base, pre_eps)
    return mhc.mhc_pre_apply_mix(residual, mix.unsqueeze(-1))


def engram_gate(hidden_states, k, v, weight_hidden, weight_embed, clamp_value: float, eps: float):
    """out = x + sigmoid(signed_sqrt(clamp(<rmsnorm(x, wh), rmsnorm(k, we)> / sqrt(H)))) * v.

    hidden_states, k [..., m, H], v [..., H], weight_hidden, weight_embed [m, H], all bf16 ->
    [..., m, H] bf16.  Gradients reach all five tensors; a weight with a `main_grad` (fp32) gets
    its gradient added there instead, as TileKernels' EngramGateFn does."""
    lead, (m, h) = hidden_states.shape[:-2], hidden_states.shape[-2:]
    if k.shape[:-2] != lead or v.shape[:-1] != lead:
        raise ValueError(f"tkreg.blocks.engram_gate: `k` {tuple(k.shape)} and `v` {tuple(v.shape)} must have "
                         f"the leading (token) dimensions of `hidden_states` {tuple(hidden_states.shape)}")
    y = engram.engram_gate(_tokens(hidden_states, 2), _tokens(k, 2), _tokens(v, 1), weight_hidden, weight_embed,
                           float(clamp_value), float(eps))
    return y.view(*lead, m, h)
