"""tkreg.nn.Attention: a Llama-style self-attention block on tkreg's differentiable ops.

qkv projection (one tkreg.gemm over the packed [q; k; v] weight) -> rotary_embedding of q and k
(in place; its backward is the inverse rotation) -> tkreg.flash_attention (causal by default; its
backward is torch's SDPA backward until tkreg's kernel ships: tkreg.ops.attention.FlashAttentionGrad)
-> the output projection.  GQA when num_kv_heads <
num_heads.  No KV cache: this is the training / prefill block (serving goes through
tkreg.kernelize and the paged decode kernels).
"""
from __future__ import annotations

import torch

from .. import ops
from .linear import Linear


def rope_cache(head_dim: int, max_positions: int, theta: float = 10000.0, device=None, dtype=torch.bfloat16):
    """cos_sin_cache[max_positions, head_dim] for tkreg's rotary ops: row p holds head_dim/2
    cosines then head_dim/2 sines of p * theta^(-2i / head_dim), computed in fp32 (Llama's table)."""
    inv = theta ** -(torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    freqs = torch.arange(max_positions, dtype=torch.float32, device=device)[:, None] * inv[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype).contiguous()


class Attention(torch.nn.Module):
    """Self-attention of x[B, S, hidden] (or [S, hidden] as one sequence): q/k/v projections packed
    as qkv.weight [(HQ + 2 HK) * D, hidden] (q's rows, then k's, then v's), rotary (neox halves,
    `rope_theta`, positions 0..S-1 unless given as [B, S] / [S] int64), flash attention, o
    [hidden, HQ * D].  D = 64 or 128; num_heads % num_kv_heads == 0."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int | None = None, head_dim: int | None = None,
                 *, rope_theta: float = 10000.0, max_positions: int = 8192, causal: bool = True, bias: bool = False,
                 device=None, dtype=torch.bfloat16):
        super().__init__()
        kv = num_heads if num_kv_heads is None else num_kv_heads
        d = hidden_size // num_heads if head_dim is None else head_dim
        if num_heads % kv:
            raise ValueError(f"tkreg.nn.Attention: num_heads={num_heads} is not a multiple of num_kv_heads={kv}")
        if d not in (64, 128):
            raise ValueError(f"tkreg.nn.Attention: head_dim={d}; the kernels serve 64 and 128")
        self.num_heads, self.num_kv_heads, self.head_dim, self.causal = num_heads, kv, d, causal
        self.qkv = Linear(hidden_size, (num_heads + 2 * kv) * d, bias=bias, device=device, dtype=dtype)
        self.o = Linear(num_heads * d, hidden_size, bias=False, device=device, dtype=dtype)
        self.register_buffer("cos_sin_cache", rope_cache(d, max_positions, rope_theta, device, dtype), persistent=False)

    @classmethod
    def from_weights(cls, q, k, v, o, *, head_dim: int, **kwargs):
        """The block of q[HQ*D, hidden], k/v[HK*D, hidden], o[hidden, HQ*D] (copied; packed once)."""
        att = cls(q.shape[1], q.shape[0] // head_dim, k.shape[0] // head_dim, head_dim,
                  device=q.device, dtype=q.dtype, **kwargs)
        with torch.no_grad():
            att.qkv.weight.copy_(torch.cat([q, k, v]))
            att.o.weight.copy_(o)
        return att

    def forward(self, x, positions=None):
        seq = x.dim() == 2
        xb = x.unsqueeze(0) if seq else x
        b, s, _ = xb.shape
        hq, hk, d = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv(xb).view(b * s, (hq + 2 * hk) * d)
        q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
        q, k = q.contiguous(), k.contiguous()      # rotated in place: not views of qkv
        if positions is None:
            positions = torch.arange(s, device=x.device).repeat(b)
        q, k = ops.rotary_embedding(positions.reshape(b * s), q, k, self.cos_sin_cache)
        out, _ = ops.flash_attention(q.view(b, s, hq, d), k.view(b, s, hk, d), v.view(b, s, hk, d), causal=self.causal)
        y = self.o(out.view(b, s, hq * d))
        return y.squeeze(0) if seq else y

    def extra_repr(self) -> str:
        return (f"heads={self.num_heads}, kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"causal={self.causal}")
