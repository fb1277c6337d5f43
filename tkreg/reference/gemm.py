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
    from .fp8 import dequant_blocks, dequant_groups
    return torch.matmul(dequant_groups(a, a_scale), dequant_blocks(b, b_scale).t()).to(torch.bfloat16)
