"""Attention on tkreg, as transformers' "tkreg" attention implementation and as kernelize's core.

The "tkreg" mask function hands the attention function the [B, kv_len] boolean padding mask
(True: a real token) when the queries are the last kv columns (no cache, DynamicCache,
TkregPagedCache), None when there is no padding mask, and SDPA's 4-D mask otherwise (a
StaticCache, or a custom or sliding mask function), which torch serves.  From it:
- None: `flash_attention(causal=True)` over the K/V (bottom-right aligned);
- a mask: `flash_attention_varlen` with three segments per sequence (pads before, the valid run,
  pads after), so no query sees a pad key and no copy of the mask is materialised;
- a TkregPagedCache: K/V written into pages, decode through `paged_decode_attention` (no gather);
- anything tkreg does not serve (a dtype, a head dim, dropout, a sliding window, a 4-D mask from a
  custom mask function): torch's SDPA with the equivalent mask, and a one-time warning naming why.
"""
from __future__ import annotations

import warnings

from ._support import Unsupported

NAME = "tkreg"
HEAD_DIMS = (64, 128)
_warned: set = set()


def servable(dtype, head_dim: int, hq: int, hk: int) -> None:
    """Unsupported unless tkreg attention serves this shape and dtype."""
    import torch
    if dtype not in (torch.bfloat16, torch.float16):
        raise Unsupported(f"dtype {str(dtype).replace('torch.', '')}: tkreg kernels serve bfloat16 and float16")
    if head_dim not in HEAD_DIMS:
        raise Unsupported(f"head dim {head_dim}: tkreg attention serves 64 and 128")
    if hq % hk or hq // hk > 16:
        raise Unsupported(f"{hq} query heads over {hk} KV heads: tkreg paged decode serves up to 16 per KV head")


# ---- mask function ------------------------------------------------------------------------
def mask_function(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None,
                  attention_mask=None, **kwargs):
    """transformers' mask interface for "tkreg" (see the module doc)."""
    from transformers.masking_utils import causal_mask_function, prepare_padding_mask, sdpa_mask
    tail = isinstance(q_offset, int) and q_offset + q_length == kv_length and kv_offset == 0
    if (mask_function is None or mask_function is causal_mask_function) and tail:
        if attention_mask is None:
            return None
        return prepare_padding_mask(attention_mask.bool(), kv_length, kv_offset)[:, -kv_length:]
    kwargs.pop("allow_is_causal_skip", None)
    return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                     kv_offset=kv_offset, mask_function=mask_function or causal_mask_function,
                     attention_mask=attention_mask, allow_is_causal_skip=False, **kwargs)


# ---- the contiguous (Dynamic / Static cache, no cache) path --------------------------------
def contiguous(q, k, v, mask, scale: float):
    """q[B, Sq, HQ, D], k/v[B, Sk, HK, D] (head dim contiguous; the queries are the last Sq key
    columns), mask [B, Sk] bool or None -> out[B, Sq, HQ, D]."""
    from ... import ops
    if mask is None:
        return ops.flash_attention(q, k, v, causal=True, softmax_scale=scale)[0]
    B, Sq, HQ, D = q.shape
    Sk = k.shape[1]
    cu_q, cu_k = _segments(mask, Sq)
    out = ops.flash_attention_varlen(q.reshape(B * Sq, HQ, D), k.reshape(B * Sk, -1, D), v.reshape(B * Sk, -1, D),
                                     cu_q, cu_k, Sq, Sk, causal=True, softmax_scale=scale)[0]
    return out.view(B, Sq, HQ, D)


def _segments(mask, Sq: int):
    """(cu_q, cu_k) int32 [3B + 1]: per sequence the keys before its valid run, the run, the keys
    after, each with the queries (the last Sq columns) that fall in it.  The run must be one span
    (checked unless a CUDA graph is capturing)."""
    import torch
    B, Sk = mask.shape
    keys = mask.int()
    n = keys.sum(1)
    s = torch.where(n > 0, keys.argmax(1), torch.zeros_like(n))
    e = s + n
    if not (mask.is_cuda and torch.cuda.is_current_stream_capturing()):
        runs = (keys[:, 1:] > keys[:, :-1]).sum(1) + keys[:, 0]
        if bool((runs > 1).any()):
            raise Unsupported("padding mask with more than one run of valid tokens per sequence")
    q0 = Sk - Sq
    qa = (s - q0).clamp(0, Sq)
    qb = (e - q0).clamp(0, Sq) - qa
    kl = torch.stack((s, n, Sk - e), 1).reshape(-1)
    ql = torch.stack((qa, qb, Sq - qa - qb), 1).reshape(-1)
    pad = torch.nn.functional.pad
    return pad(ql.cumsum(0), (1, 0)).to(torch.int32), pad(kl.cumsum(0), (1, 0)).to(torch.int32)


def torch_attention(q, k, v, mask, scale: float, sliding_window=None):
    """The fallback: q[B, HQ, Sq, D], k/v[B, HK, Sk, D] (transformers' layout) -> [B, Sq, HQ, D]
    with torch SDPA; `mask` is the "tkreg" mask (2-D padding mask, SDPA 4-D mask, or None)."""
    import torch
    B, HQ, Sq, D = q.shape
    Sk = k.shape[2]
    if mask is not None and mask.dim() == 4:
        allowed = mask if mask.dtype == torch.bool else mask == 0
    else:
        col = torch.arange(Sk, device=q.device)
        qpos = torch.arange(Sq, device=q.device)[None] + (Sk - Sq)
        keys = torch.ones(B, Sk, dtype=torch.bool, device=q.device) if mask is None else mask.bool()
        allowed = keys[:, None, :] & (col[None, None, :] <= qpos[:, :, None])
        if sliding_window is not None:
            allowed &= col[None, None, :] > qpos[:, :, None] - sliding_window
        allowed = allowed[:, None]
    rep = HQ // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    bias = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~allowed, torch.finfo(q.dtype).min)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    return out.transpose(1, 2)


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"tkreg attention: {reason}; this call runs torch SDPA", stacklevel=3)


# ---- transformers' AttentionInterface entry -------------------------------------------------
def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout: float = 0.0,
                      sliding_window=None, **kwargs):
    """attn_implementation="tkreg": query[B, HQ, Sq, D], key/value[B, HK, Sk, D] -> ([B, Sq, HQ, D], None)."""
    B, HQ, Sq, D = query.shape
    scale = float(scaling) if scaling is not None else D ** -0.5
    paged = getattr(key, "_tkreg_paged", None)
    reason = None
    try:
        servable(query.dtype, D, HQ, key.shape[1])
        if dropout:
            raise Unsupported("attention dropout in training")
        if sliding_window is not None and key.shape[2] > sliding_window:
            raise Unsupported(f"sliding window {sliding_window}")
        if attention_mask is not None and attention_mask.dim() != 2:
            raise Unsupported("a 4-D mask (a StaticCache, or a custom or sliding mask function)")
        if paged is None:
            return contiguous(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                              attention_mask, scale), None
    except Unsupported as e:
        reason = str(e)
    if paged is not None:
        if reason is not None:
            raise NotImplementedError(f"TkregPagedCache: {reason}; use a DynamicCache for this model")
        cache, layer = paged
        q = query.transpose(1, 2).reshape(B * Sq, HQ, D)
        k = key.transpose(1, 2).reshape(B * Sq, -1, D)
        v = value.transpose(1, 2).reshape(B * Sq, -1, D)
        step = cache.plan(attention_mask, B, Sq, k) if layer == 0 else cache._step
        cache.write(layer, k, v, step)
        return cache.attend(layer, q, k, v, step, scale).view(B, Sq, HQ, D), None
    _warn_once(reason)
    return torch_attention(query, key, value, attention_mask, scale, sliding_window), None


def register() -> None:
    """Registers "tkreg" with transformers' AttentionInterface and AttentionMaskInterface."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, mask_function)
