"""The rotary table tkreg's rotary ops read, built once from a transformers RotaryEmbedding.

Row p of `cos_sin_cache[P, D]` holds D/2 cosines then D/2 sines of position p, in the model's
dtype, rounded exactly as transformers rounds them: freqs = p * inv_freq in fp32, cos/sin in
fp32 on the model's device, times `attention_scaling`, then cast.  transformers' rotate_half
layout (first half / second half) is tkreg's `is_neox=True`.
"""
from __future__ import annotations

from ._support import Unsupported

# rope types whose inv_freq changes with the sequence length (transformers' dynamic_rope_update)
DYNAMIC = ("dynamic", "longrope")


def rope_type(rotary_emb) -> str:
    return str(getattr(rotary_emb, "rope_type", "default"))


def check(rotary_emb) -> None:
    kind = rope_type(rotary_emb)
    if any(d in kind for d in DYNAMIC):
        raise Unsupported(f"rope type {kind!r} rescales inv_freq with the sequence length; tkreg's "
                          "rotary table is built once")
    if getattr(rotary_emb, "inv_freq", None) is None:
        raise Unsupported("rotary embedding has no inv_freq buffer")


def cos_sin_cache(rotary_emb, max_positions: int, dtype, device):
    """[max_positions, D] in `dtype`: D/2 cos | D/2 sin per row, bit-equal to transformers'."""
    import torch
    check(rotary_emb)
    inv = rotary_emb.inv_freq.detach().float().to(device)
    pos = torch.arange(max_positions, dtype=torch.float32, device=device)
    freqs = pos[:, None] * inv[None, :]             # [P, D/2]; a K=1 matmul in transformers: the same product
    scale = float(getattr(rotary_emb, "attention_scaling", 1.0))
    cos, sin = freqs.cos() * scale, freqs.sin() * scale
    return torch.cat((cos, sin), dim=-1).to(dtype).contiguous()
