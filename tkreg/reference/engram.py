"""Torch references for the engram family (DeepSeek-V4's n-gram memory), the semantics of
DeepSeek's TileKernels (`tile_kernels/torch/engram.py`): the test oracle and the
TKREG_FALLBACK=reference path.

engram_hash is integer arithmetic and bit-exact on any device: int64 products wrap, the running
XOR covers ids 0..p+1 for output block p, the modulus is a floor mod (torch's `%`, the sign of the
table size), the int32 sum with the offset wraps.  engram_gate computes in fp32 and rounds once.
"""
from __future__ import annotations


def engram_hash(ngram_ids, multipliers, vocab_sizes, offsets):
    """ngram_ids[T, n] i32, multipliers[L, n] i64, vocab_sizes[L, n-1, E] i32 (> 0),
    offsets[L, (n-1)*E] i32 -> out[L, T, (n-1)*E] i32; out[l, t, p*E + j] =
    (XOR_{i <= p+1} ids[t, i] * mult[l, i]) mod vocab[l, p, j] + offsets[l, p*E + j]."""
    import torch
    n = ngram_ids.shape[1]
    terms = ngram_ids.to(torch.int64)[None, :, :] * multipliers[:, None, :]   # [L, T, n], wrapping
    h = terms[..., 0]
    blocks = []
    for p in range(n - 1):
        h = torch.bitwise_xor(h, terms[..., p + 1])                            # ids 0..p+1
        blocks.append(torch.remainder(h[..., None], vocab_sizes[:, None, p, :].to(torch.int64)))
    if not blocks:
        return torch.empty(multipliers.shape[0], ngram_ids.shape[0], 0, dtype=torch.int32, device=ngram_ids.device)
    return torch.cat(blocks, dim=-1).to(torch.int32) + offsets[:, None, :]


def engram_fused_weight(wh, we):
    """wh[m, H] * we[m, H] in fp32 (exact for bf16 inputs)."""
    return wh.float() * we.float()


def engram_gate(x, k, v, wh, we, clamp, eps):
    """x, k[T, m, H], v[T, H], wh, we[m, H] (bf16) -> (out[T, m, H] in x's dtype, dot, gate,
    rstd_x, rstd_k [T, m] fp32).

    rstd = rsqrt(mean(row^2) + eps); dot = sum(x * wh * k * we) (raw, unnormalised);
    s = dot * rstd_x * rstd_k / sqrt(H); gate = sigmoid(sign(s) * sqrt(max(|s|, clamp)));
    out = x + gate * v, in fp32, rounded once."""
    import torch
    H = x.shape[-1]
    xf, kf, vf = x.float(), k.float(), v.float()
    w = wh.float() * we.float()
    rstd_x = torch.rsqrt(xf.square().mean(-1) + eps)
    rstd_k = torch.rsqrt(kf.square().mean(-1) + eps)
    dot = (xf * w * kf).sum(-1)
    s = dot * rstd_x * rstd_k / (H ** 0.5)
    gate = torch.sigmoid(torch.sign(s) * s.abs().clamp_min(clamp).sqrt())
    out = (xf + gate[..., None] * vf[:, None, :]).to(x.dtype)
    return out, dot, gate, rstd_x, rstd_k


def engram_gate_backward(grad_out, x, k, v, wh, we, dot, gate, rstd_x, rstd_k, clamp):
    """Gradients of engram_gate from its saved (dot, gate, rstd_x, rstd_k), in fp32:
    (grad_x, grad_k, grad_v in grad_out's dtype; grad_wh, grad_we fp32 [m, H]).

    With w = wh * we, c = 1/sqrt(H), s = dot * rstd_x * rstd_k * c, dg = sum(grad_out * v) a row
    and D = dg * gate * (1 - gate) * c * rstd_x * rstd_k / (2 sqrt(|s|)) (0 where |s| < clamp or
    s == 0): grad_x = grad_out + D (k w - x dot rstd_x^2 / H), grad_k = D (x w - k dot rstd_k^2 / H),
    grad_v = sum over heads of gate * grad_out, grad_wh = we * sum over tokens of D x k, grad_we
    = wh * the same sum."""
    import torch
    H = x.shape[-1]
    g, xf, kf, vf = grad_out.float(), x.float(), k.float(), v.float()
    w = wh.float() * we.float()
    crr = rstd_x * rstd_k / (H ** 0.5)
    sa = (dot * crr).abs()
    dg = (g * vf[:, None, :]).sum(-1)
    flat = (sa < clamp) | (sa == 0)
    D = torch.where(flat, torch.zeros_like(sa), dg * gate * (1 - gate) * crr * 0.5 / sa.clamp_min(1e-30).sqrt())
    cx = (dot * rstd_x * rstd_x / H)[..., None]
    ck = (dot * rstd_k * rstd_k / H)[..., None]
    Dn = D[..., None]
    grad_x = (g + Dn * (kf * w - xf * cx)).to(grad_out.dtype)
    grad_k = (Dn * (xf * w - kf * ck)).to(grad_out.dtype)
    grad_v = (gate[..., None] * g).sum(1).to(grad_out.dtype)
    gw = (Dn * xf * kf).sum(0)
    return grad_x, grad_k, grad_v, gw * we.float(), gw * wh.float()
