"""Typed function for rotary embedding (in place on q and k, vLLM's calling convention)."""
from __future__ import annotations

from math import prod

from ..runtime import OPS
from ._route import compiling, graph


def rotary_embedding(positions, q, k, cos_sin_cache, is_neox: bool = True):
    """Rotate q and k in place by the rows `positions` of `cos_sin_cache[P, D]`; returns (q, k).

    q: [T, HQ * D] or [T, HQ, D] (or any shape with T = positions.numel() leading tokens), k
    likewise with HK heads; bf16/fp16, contiguous; cos_sin_cache in q's dtype, row p holding
    D/2 cosines then D/2 sines; positions int64 (clamped to [0, P - 1]).  `is_neox` rotates
    halves (x[i], x[i + D/2]), else interleaved pairs (x[2i], x[2i + 1]) as GPT-J.  D = 64 or 128.
    """
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
