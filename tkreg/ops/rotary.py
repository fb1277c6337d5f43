"""Typed function for rotary embedding (in place on q and k, vLLM's calling convention), and its
autograd: the gradient of a rotation by theta is the rotation by -theta, so the backward runs the
same kernel on the gradients with the cache's sines negated (`inverse_cache`): no other kernel."""
from __future__ import annotations

from math import prod

import torch   # already imported with tkreg.ops (the run time's tensors); the Function below needs it

from ..runtime import OPS
from ._route import compiling, graph


def rotary_embedding(positions, q, k, cos_sin_cache, is_neox: bool = True):
    """Rotate q and k in place by the rows `positions` of `cos_sin_cache[P, D]`; returns (q, k).

    q: [T, HQ * D] or [T, HQ, D] (or any shape with T = positions.numel() leading tokens), k
    likewise with HK heads; bf16/fp16, contiguous; cos_sin_cache in q's dtype, row p holding
    D/2 cosines then D/2 sines; positions int64 (clamped to [0, P - 1]).  `is_neox` rotates
    halves (x[i], x[i + D/2]), else interleaved pairs (x[2i], x[2i + 1]) as GPT-J.  D = 64 or 128.
    Differentiable in q and k (in place, as torch's in-place ops: not on leaves that require grad).
    """
    if _recording(q, k):
        return RotaryEmbeddingGrad.apply(positions, q, k, cos_sin_cache, is_neox)
    if positions.dim() == 1 and q.dim() == 2 and k.dim() == 2 and not compiling():
        OPS["tkreg.rotary_embedding"](positions, q, k, cos_sin_cache, is_neox)
        return q, k
    try:
        t, lead = positions.numel(), positions.dim()
        pv, qv, kv = positions.view(t), q.view(t, prod(q.shape[lead:])), k.view(t, prod(k.shape[lead:]))
    except RuntimeError as e:
        raise ValueError(f"tkreg.rotary_embedding: cannot view q {tuple(q.shape)} / k {tuple(k.shape)} as "
                         f"[{positions.numel()} tokens, heads * D] in place ({e}); pass contiguous tensors") from None
    if compiling():
        graph("tkreg.rotary_embedding", None, pv, qv, kv, cos_sin_cache, is_neox)
    else:
        OPS["tkreg.rotary_embedding"](pv, qv, kv, cos_sin_cache, is_neox)
    return q, k


def _recording(q, k) -> bool:
    return torch.is_grad_enabled() and (getattr(q, "requires_grad", False) or getattr(k, "requires_grad", False))


def inverse_cache(cos_sin_cache):
    """cos_sin_cache[P, D] with its sines negated: rows of the rotation by -theta.  Kept on the
    cache tensor (eager) while the cache is unchanged, so a training step builds it once."""
    held = getattr(cos_sin_cache, "_tkreg_inverse", None)
    if held is not None and held[0] == cos_sin_cache._version:
        return held[1]
    half = cos_sin_cache.shape[1] // 2
    inv = torch.cat((cos_sin_cache[:, :half], -cos_sin_cache[:, half:]), dim=1)
    if type(cos_sin_cache) in (torch.Tensor, torch.nn.Parameter) and not compiling():
        cos_sin_cache._tkreg_inverse = (cos_sin_cache._version, inv)
    return inv


class RotaryEmbeddingGrad(torch.autograd.Function):
    """Autograd of rotary_embedding: q, k rotated in place (marked dirty); dq, dk = the gradients
    rotated back (copies: autograd's gradients are not ours to overwrite)."""

    @staticmethod
    def forward(ctx, positions, q, k, cos_sin_cache, is_neox):
        rotary_embedding(positions, q, k, cos_sin_cache, is_neox)
        ctx.mark_dirty(q, k)
        ctx.save_for_backward(positions, cos_sin_cache)
        ctx.is_neox = is_neox
        return q, k

    @staticmethod
    def backward(ctx, dq, dk):
        positions, cache = ctx.saved_tensors
        dq = dq.clone(memory_format=torch.contiguous_format)
        dk = dk.clone(memory_format=torch.contiguous_format)
        rotary_embedding(positions, dq, dk, inverse_cache(cache), ctx.is_neox)
        return None, dq, dk, None, None


def qk_norm_rope_cache(q, k, v, positions, cos_sin_cache, *, q_weight=None, k_weight=None, eps: float = 1e-6,
                       is_neox: bool = True, k_cache=None, v_cache=None, slot_mapping=None):
    """Per-head RMSNorm (optional) + rotary of q and k, K/V into a paged cache (optional): one launch.

    q[T, HQ, D], k/v[T, HK, D]: bf16/fp16 with a contiguous head dim and token/head strides that
    are multiples of 8 elements (e.g. `qkv.view(T, -1, D).split([HQ, HK, HK], 1)`), read in place.
    q_weight/k_weight[D] (both or neither): x * rsqrt(mean(x^2) + eps) * w in fp32, rounded to the
    dtype (as tkreg.rms_norm), before the rotary of `rotary_embedding` (cos_sin_cache[P, D], int64
    positions clamped to [0, P - 1], `is_neox` halves or GPT-J pairs).  k_cache/v_cache[NP, PS, HK, D]
    + slot_mapping[T] int64 (all three or none): token t's rotated k and its v are written at page
    s // PS, row s % PS, s = slot_mapping[t]; s < 0 writes nothing.  Returns (q_out[T, HQ, D],
    k_out[T, HK, D]) contiguous.  D = 64 or 128.
    """
    if (q_weight is None) != (k_weight is None):
        raise ValueError("tkreg.qk_norm_rope_cache: give both `q_weight` and `k_weight` (qk-norm) or neither")
    if not (k_cache is None) == (v_cache is None) == (slot_mapping is None):
        raise ValueError("tkreg.qk_norm_rope_cache: give `k_cache`, `v_cache` and `slot_mapping` together "
                         "(the cache write) or none of them")
    args = (q, k, v, positions, cos_sin_cache, q_weight, k_weight, k_cache, v_cache, slot_mapping, eps, is_neox)
    if compiling():
        return graph("tkreg.qk_norm_rope_cache", None, *args)
    return OPS["tkreg.qk_norm_rope_cache"](*args)
