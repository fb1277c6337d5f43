"""Torch reference for rotary embedding (test oracle and TKREG_FALLBACK=reference path).

In place on q and k like the kernel (and vLLM's `rotary_embedding`); returns None.  Each
rotation is x1*c - x2*s and x2*c + x1*s in fp32 (separate roundings of each product and of
the sum: no fused multiply-add), rounded once to q's dtype: bit-identical to the kernel on CUDA
and on the CPU.
"""
from __future__ import annotations


def _rotate(x, cos, sin, is_neox):
    """x[T, H, D] (any float dtype) rotated by cos/sin[T, 1, D/2] (fp32); returns fp32."""
    import torch
    xf = x.float()
    if is_neox:
        x1, x2 = xf.chunk(2, dim=-1)
    else:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if is_neox:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def rotary_embedding(positions, q, k, cos_sin_cache, is_neox=True):
    """Rotate q[T, HQ*D] and k[T, HK*D] (or [T, H, D]) in place; D = cos_sin_cache.shape[1].

    Row p of cos_sin_cache is [cos | sin] for position p; positions are clamped to
    [0, P - 1] as the kernel does (it never reads outside the cache).
    """
    P, D = cos_sin_cache.shape
    if D % 2:
        raise ValueError(f"rotary_embedding: cos_sin_cache rows must hold D/2 cos and D/2 sin, got D={D}")
    T = positions.numel()
    if T == 0:
        return None
    pos = positions.reshape(-1).long().clamp(0, max(P - 1, 0))
    cs = cos_sin_cache.index_select(0, pos).float()
    cos, sin = cs[:, None, : D // 2], cs[:, None, D // 2:]
    for x in (q, k):
        x3 = x.view(T, -1, D)
        x3.copy_(_rotate(x3, cos, sin, bool(is_neox)).to(x.dtype))
    return None
