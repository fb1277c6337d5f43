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


def qk_norm_rope_cache(q, k, v, positions, cos_sin_cache, q_weight=None, k_weight=None, k_cache=None,
                       v_cache=None, slot_mapping=None, eps=1e-6, is_neox=True):
    """(q_out, k_out) contiguous [T, H, D]: per-head RMSNorm (when q_weight/k_weight are given;
    tkreg.reference.norm.rms_norm, rounded to the dtype) then the rotary above; k_out and v
    written into k_cache/v_cache[NP, PS, HK, D] at slot_mapping[t] (page s // PS, row s % PS;
    s < 0 skipped) when the caches are given.  q, k, v [T, H, D] may be strided views."""
    import torch

    from .norm import rms_norm
    if (q_weight is None) != (k_weight is None):
        raise ValueError("qk_norm_rope_cache: give both q_weight and k_weight, or neither")
    if not ((k_cache is None) == (v_cache is None) == (slot_mapping is None)):
        raise ValueError("qk_norm_rope_cache: give k_cache, v_cache and slot_mapping together, or none")
    P, D = cos_sin_cache.shape
    t = positions.numel()
    if q_weight is not None:
        qn, kn = rms_norm(q, q_weight, eps), rms_norm(k, k_weight, eps)
    else:
        qn, kn = q.contiguous(), k.contiguous()
    pos = positions.reshape(-1).long().clamp(0, max(P - 1, 0))
    cs = cos_sin_cache.index_select(0, pos).float()
    cos, sin = cs[:, None, : D // 2], cs[:, None, D // 2:]
    q_out = _rotate(qn, cos, sin, bool(is_neox)).to(q.dtype).contiguous()
    k_out = _rotate(kn, cos, sin, bool(is_neox)).to(k.dtype).contiguous()
    if k_cache is not None and t:
        keep = slot_mapping.reshape(-1) >= 0
        rows = slot_mapping.reshape(-1)[keep]
        hk = k.shape[1]
        k_cache.view(-1, hk, D).index_copy_(0, rows, k_out[keep])
        v_cache.view(-1, hk, D).index_copy_(0, rows, v[keep].to(v_cache.dtype))
    return q_out, k_out
