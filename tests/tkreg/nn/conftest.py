"""What the tkreg.nn tests share: plain-torch fp32 oracles of Attention and MoE, computed from the
modules' own weights (the `torch_layers` fixture), what the CPU and GPU tests compare outputs and
parameter gradients against; and `close`, that comparison."""
from __future__ import annotations

import types

import pytest
import torch


def rotate(x, cache, positions):
    """neox rotary of x[T, H, D] by cache rows `positions` (fp32)."""
    half = cache.shape[1] // 2
    cos, sin = cache[positions, :half].float()[:, None], cache[positions, half:].float()[:, None]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def attention(att, x, wqkv, wo):
    """att's block in fp32: x[B, S, H] and the (fp32, grad-tracking) weights given."""
    b, s, _ = x.shape
    hq, hk, d = att.num_heads, att.num_kv_heads, att.head_dim
    qkv = (x.reshape(b * s, -1) @ wqkv.t())
    q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    pos = torch.arange(s, device=x.device).repeat(b)
    q = rotate(q.reshape(b * s, hq, d), att.cos_sin_cache, pos).view(b, s, hq, d).transpose(1, 2)
    k = rotate(k.reshape(b * s, hk, d), att.cos_sin_cache, pos).view(b, s, hk, d).transpose(1, 2)
    v = v.reshape(b, s, hk, d).transpose(1, 2)
    g = hq // hk
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    p = (q @ k.transpose(-1, -2)) * d ** -0.5
    if att.causal:
        p = p.masked_fill(torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
    o = (p.softmax(-1) @ v).transpose(1, 2).reshape(b, s, hq * d)
    return o @ wo.t()


def moe(layer, x, idx, router, gate_up, down, shared=None):
    """layer's experts in fp32 for the given choices idx[T, k] (fixed: routing is not
    differentiable), weights recomputed from router as the module does."""
    from tkreg.reference.moe import SCORINGS, score
    logits = x @ router.t()
    w = score(logits, SCORINGS[layer.scoring]).gather(1, idx.long())
    if layer.renormalize:
        w = w / w.sum(-1, keepdim=True)
    w = w * layer.scaling
    y = torch.zeros_like(x)
    i = gate_up.shape[1] // 2
    for e in range(gate_up.shape[0]):
        tok, slot = (idx.long() == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = x[tok] @ gate_up[e].t()
        a = torch.nn.functional.silu(h[:, :i]) * h[:, i:]
        y = y.index_add(0, tok, (a @ down[e].t()) * w[tok, slot, None])
    if shared is not None:
        gu, dn = shared
        h = x @ gu.t()
        y = y + (torch.nn.functional.silu(h[:, :h.shape[1] // 2]) * h[:, h.shape[1] // 2:]) @ dn.t()
    return y


@pytest.fixture
def torch_layers():
    return types.SimpleNamespace(attention=attention, moe=moe)


@pytest.fixture
def close():
    """close(got, want, rel=1e-2): got within `rel` of want's largest magnitude (bf16 outputs, fp32 sums)."""
    def check(got, want, rel=1e-2):
        err = (got.float() - want.float()).abs().max().item()
        top = want.float().abs().max().item()
        assert err <= rel * top + 1e-6, f"max |got - want| = {err:.3e} > {rel} x max |want| = {top:.3e}"
    return check

