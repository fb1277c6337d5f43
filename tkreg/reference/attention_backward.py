"""Torch reference for flash attention's backward: tkreg.flash_attention's autograd on the CPU and
for the varlen op (tkreg.ops.attention), and the oracle of its tests.

fp32 math from the forward's saved out and lse, one rounding of each gradient to q's dtype.  Per (batch, KV head) and its G query heads, scale = softmax_scale or
1 / sqrt(D):

    P = exp(q k^T * scale - lse)   (0 where the causal mask hides a key, bottom-right aligned, and on
                                    rows with lse = -inf: a row that sees no key has zero gradients)
    dv = P^T dout,  dS = P * (dout v^T - rowsum(dout * out)),  dq = scale dS k,  dk = scale dS^T q

dk / dv sum over the G query heads of the group.
"""
from __future__ import annotations

import math


def _grads(do, q, k, v, o, lse, causal, scale):
    """One KV head: do/q/o[Sq, G, D], k/v[Sk, D], lse[G, Sq], fp32 -> (dq[Sq, G, D], dk, dv[Sk, D])."""
    import torch
    sq, sk = q.shape[0], k.shape[0]
    s = torch.einsum("qgd,kd->gqk", q, k) * scale
    p = torch.exp(s - lse[..., None])
    keep = torch.isfinite(lse)[..., None].expand_as(p)
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        keep = keep & (j <= i + (sk - sq))
    p = torch.where(keep, p, torch.zeros((), device=q.device))
    dv = torch.einsum("gqk,qgd->kd", p, do)
    dp = torch.einsum("qgd,kd->gqk", do, v)
    delta = (do * o).sum(-1).transpose(0, 1)                  # [G, Sq]
    ds = p * (dp - delta[..., None])
    dq = torch.einsum("gqk,kd->qgd", ds, k) * scale
    dk = torch.einsum("gqk,qgd->kd", ds, q) * scale
    return dq, dk, dv


def flash_attention_backward(dout, q, k, v, out, lse, causal=False, softmax_scale=0.0):
    """dout/q/out[B, Sq, HQ, D], k/v[B, Sk, HK, D], lse[B, HQ, Sq] fp32 (natural log) ->
    (dq[B, Sq, HQ, D], dk[B, Sk, HK, D], dv[B, Sk, HK, D]) in q's dtype."""
    import torch
    B, Sq, HQ, D = q.shape
    HK = k.shape[2]
    if HK == 0 or HQ % HK:
        raise ValueError(f"flash_attention_backward: HQ={HQ} is not a multiple of HK={HK}")
    G, scale = HQ // HK, float(softmax_scale) or 1.0 / math.sqrt(D)
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty(k.shape, dtype=q.dtype, device=q.device)
    dv = torch.empty(v.shape, dtype=q.dtype, device=q.device)
    for b in range(B):
        for h in range(HK):
            g = slice(h * G, (h + 1) * G)
            gq, gk, gv = _grads(dout[b, :, g].float(), q[b, :, g].float(), k[b, :, h].float(), v[b, :, h].float(),
                                out[b, :, g].float(), lse[b, g].float(), causal, scale)
            dq[b, :, g], dk[b, :, h], dv[b, :, h] = gq.to(q.dtype), gk.to(q.dtype), gv.to(q.dtype)
    return dq, dk, dv


def flash_attention_varlen_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=0,
                                    max_seqlen_k=0, causal=False, softmax_scale=0.0):
    """Packed dout/q/out[TQ, HQ, D], k/v[TK, HK, D], lse[HQ, TQ], int32 cu_seqlens[batch + 1] ->
    (dq[TQ, HQ, D], dk/dv[TK, HK, D]): each sequence on its own.  Rows outside every sequence are 0."""
    import torch
    dq, dk, dv = (torch.zeros(t.shape, dtype=q.dtype, device=q.device) for t in (q, k, v))
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if q1 == q0 or k1 == k0:
            continue
        g = flash_attention_backward(dout[None, q0:q1], q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
                                     out[None, q0:q1], lse[None, :, q0:q1], causal, softmax_scale)
        dq[q0:q1], dk[k0:k1], dv[k0:k1] = g[0][0], g[1][0], g[2][0]
    return dq, dk, dv
