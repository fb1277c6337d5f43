"""Torch references for the GEMMs: fp32 accumulation, one rounding to the output dtype."""
from __future__ import annotations


def gemm(a, b, bias=None):
    import torch
    out = torch.matmul(a.float(), b.float().t())
    if bias is not None:
        out += bias.float()
    return out.to(a.dtype)


def fp8_gemm(a, a_scale, b, b_scale):
    """Dequantize (1x128 activation groups, 128x128 weight blocks), multiply in fp32, round to bf16."""
    import torch
    m, k = a.shape
    n = b.shape[0]
    sa = a_scale.float().repeat_interleave(128, dim=1)[:, :k]
    sb = b_scale.float().repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
    return torch.matmul(a.float() * sa, (b.float() * sb).t()).to(torch.bfloat16)
