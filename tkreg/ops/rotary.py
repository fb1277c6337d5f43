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
