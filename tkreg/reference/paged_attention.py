"""Torch reference for paged decode attention (test oracle and TKREG_FALLBACK=reference path).

Sequence b's keys and values are gathered from its pages (token t in page block_table[b, t // PS],
slot t % PS, of the NHD caches [NP, PS, HK, D]) and attended in fp32: scores = scale * q . k,
out = softmax(scores) @ v rounded once to q's dtype, lse = logsumexp(scores) in fp32 (natural
log).  Query head h reads KV head h // (HQ // HK).  As in the kernel, seq_lens are clamped to
[0, MP * PS]; an empty sequence gives zeros and lse = -inf; softmax_scale 0 means 1 / sqrt(D).
"""
from __future__ import annotations


def gather_kv(k_cache, v_cache, block_table, b: int, length: int):
    """Sequence b's first `length` keys and values, [length, HK, D] each (cache dtype)."""
    pages = block_table[b, : -(-length // k_cache.shape[1])].long()
    k = k_cache.index_select(0, pages).flatten(0, 1)[:length]
    v = v_cache.index_select(0, pages).flatten(0, 1)[:length]
    return k, v


def paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens, softmax_scale=0.0, num_splits=0):
    """q[B, HQ, D], k/v_cache[NP, PS, HK, D], block_table[B, MP] int32, seq_lens[B] int32
    -> (out[B, HQ, D] in q's dtype, lse[B, HQ] fp32).  `num_splits` only steers the kernel."""
    import torch
    bsz, hq, d = q.shape
    ps, hk = k_cache.shape[1], k_cache.shape[2]
    if hk <= 0 or hq % hk:
        raise ValueError(f"paged_decode_attention: HQ={hq} must be a positive multiple of HK={hk}")
    g = hq // hk
    scale = float(softmax_scale) if softmax_scale else d ** -0.5
    lens = seq_lens.long().clamp(0, block_table.shape[1] * ps).tolist()
    out = torch.zeros(bsz, hq, d, dtype=torch.float32, device=q.device)
    lse = torch.full((bsz, hq), float("-inf"), dtype=torch.float32, device=q.device)
    for b, n in enumerate(lens):
        if n == 0:
            continue
        k, v = gather_kv(k_cache, v_cache, block_table, b, n)
        qb = q[b].float().view(hk, g, d)                                  # [HK, G, D]
        s = torch.einsum("hgd,thd->hgt", qb, k.float()) * scale           # [HK, G, L]
        lse[b] = torch.logsumexp(s, dim=-1).reshape(hq)
        out[b] = torch.einsum("hgt,thd->hgd", torch.softmax(s, dim=-1), v.float()).reshape(hq, d)
    return out.to(q.dtype), lse
