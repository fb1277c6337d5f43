"""Torch references for flash attention (the test oracle and TKREG_FALLBACK=reference path).

fp32 math, one rounding of the output: scores s = q k^T * scale, lse = logsumexp_j s (natural
log), out = exp(s - lse) v.  Causal masks are bottom-right aligned (query i sees keys
j <= i + Sk - Sq); a row that sees no key gives out 0 and lse -inf, as the kernels do.
softmax_scale 0 means 1 / sqrt(D).  Memory is bounded by working one (batch, KV head) at a time.

Paged decode: sequence b's keys and values are gathered from its pages (token t in page
block_table[b, t // PS], slot t % PS, of the NHD caches [NP, PS, HK, D]) and attended in fp32 the
same way; query head h reads KV head h // (HQ // HK); seq_lens are clamped to [0, MP * PS] as in
the kernel; an empty sequence gives zeros and lse = -inf.
"""
from __future__ import annotations

import math


def _attend(q, k, v, causal, scale):
    """q[Sq, G, D], k/v[Sk, D] (one KV head and its G query heads), fp32 -> (out[Sq, G, D], lse[G, Sq])."""
    import torch
    sq, sk = q.shape[0], k.shape[0]
    s = torch.einsum("qgd,kd->gqk", q, k) * scale
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1) if sk else torch.full(s.shape[:2], float("-inf"), device=q.device)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)     # rows with lse = -inf: 0
    return torch.einsum("gqk,kd->qgd", p, v), lse


def flash_attention(q, k, v, causal=False, softmax_scale=0.0):
    """q[B, Sq, HQ, D], k/v[B, Sk, HK, D] -> (out[B, Sq, HQ, D] in q's dtype, lse[B, HQ, Sq] fp32)."""
    import torch
    B, Sq, HQ, D = q.shape
    HK = k.shape[2]
    if HQ % HK:
        raise ValueError(f"flash_attention: HQ={HQ} is not a multiple of HK={HK}")
    G, scale = HQ // HK, softmax_scale or 1.0 / math.sqrt(D)
    out = torch.empty(B, Sq, HQ, D, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, HQ, Sq, dtype=torch.float32, device=q.device)
    for b in range(B):
        for h in range(HK):
            o, l = _attend(q[b, :, h * G:(h + 1) * G].float(), k[b, :, h].float(), v[b, :, h].float(), causal, scale)
            out[b, :, h * G:(h + 1) * G] = o.to(q.dtype)
            lse[b, h * G:(h + 1) * G] = l
    return out, lse


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=0, max_seqlen_k=0,
                           causal=False, softmax_scale=0.0):
    """Packed q[TQ, HQ, D], k/v[TK, HK, D] with int32 cu_seqlens[batch + 1] -> (out[TQ, HQ, D],
    lse[HQ, TQ]): each sequence attended on its own.  Rows of q past cu_seqlens_q[-1] are 0 / -inf
    here; the kernel leaves them unwritten."""
    import torch
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        o, l = flash_attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal, softmax_scale)
        out[q0:q1], lse[:, q0:q1] = o[0], l[0]
    return out, lse



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
