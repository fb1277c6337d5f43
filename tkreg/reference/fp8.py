"""Torch references for the FP8 family (test oracle and TKREG_FALLBACK=reference path).

Exact semantics, bit for bit what kernels_src/fp8.py computes (on a GPU; on the CPU only the
SwiGLU's `exp` may differ in the last bit):
  amax = max |x| over the group, in fp32, clamped below at AMAX_FLOOR (1e-4);
  s    = amax / 448, a correctly rounded fp32 division (a tensor / tensor division: torch turns
         `tensor / 448.0` into a multiply by fl(1/448) on CUDA, which is not the same number);
  q    = e4m3(x * fl(448 / amax)): one fp32 multiply, then round-to-nearest-even to e4m3;
  ue8m0: s = 2^ceil(log2(fl(amax / 448))), taken from the float's bits, and q = e4m3(x * 2^-e);
  dequant: bf16(fp32(q) * s).
"""
from __future__ import annotations

FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
GROUP = 128


def _scales(amax, ue8m0: bool):
    """(s, inv) in fp32 from a group amax tensor."""
    import torch
    a = amax.float().clamp_min(AMAX_FLOOR)
    s = torch.div(a, torch.full_like(a, FP8_MAX))
    if ue8m0:
        e = ((s.view(torch.int32) - 1) >> 23) + 1          # biased exponent of 2^ceil(log2 s)
        return (e << 23).view(torch.float32), ((254 - e) << 23).view(torch.float32)
    return s, torch.div(torch.full_like(a, FP8_MAX), a)


def _cast(y):
    import torch
    return y.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def _group_quant(y, ue8m0: bool):
    """y fp32 [M, K] (K % 128 == 0) -> q [M, K] e4m3, s [M, K // 128] fp32."""
    m, k = y.shape
    if k % GROUP:
        raise ValueError(f"per-token-group FP8 quantization: the quantized width {k} is not a multiple of 128")
    g = y.view(m, k // GROUP, GROUP)
    s, inv = _scales(g.abs().amax(-1), ue8m0)
    return _cast(g * inv.unsqueeze(-1)).view(m, k), s


def _colmajor(s):
    """s [M, G] -> DeepGEMM's layout: a row-major [G, ceil(M / 4) * 4] (padding zeroed)."""
    m, g = s.shape
    out = s.new_zeros(g, (m + 3) // 4 * 4)
    out[:, :m] = s.t()
    return out


def per_token_group_quant_fp8(x, ue8m0=False):
    return _group_quant(x.float(), bool(ue8m0))


def per_token_group_quant_fp8_colmajor(x, ue8m0=False):
    q, s = _group_quant(x.float(), bool(ue8m0))
    return q, _colmajor(s)


def swiglu_fp32(x):
    """silu(x[:, :I]) * x[:, I:] in fp32, silu(g) = g / (1 + exp(-g)) as torch's CUDA kernel."""
    import torch
    xf = x.float()
    i = xf.shape[1] // 2
    g, u = xf[:, :i], xf[:, i:]
    return torch.div(g, 1 + torch.exp(-g)) * u


def silu_and_mul_quant_fp8(x, ue8m0=False):
    return _group_quant(swiglu_fp32(x), bool(ue8m0))


def silu_and_mul_quant_fp8_colmajor(x, ue8m0=False):
    q, s = _group_quant(swiglu_fp32(x), bool(ue8m0))
    return q, _colmajor(s)


def per_block_quant_fp8(w, ue8m0=False):
    """w [N, K] -> q [N, K] e4m3, s [ceil(N/128), ceil(K/128)] fp32 over 128x128 blocks."""
    import torch
    n, k = w.shape
    nb, kb = -(-n // GROUP), -(-k // GROUP)
    wp = torch.zeros(nb * GROUP, kb * GROUP, dtype=torch.float32, device=w.device)
    wp[:n, :k] = w.float()
    blocks = wp.view(nb, GROUP, kb, GROUP)
    s, inv = _scales(blocks.abs().amax(dim=(1, 3)), bool(ue8m0))
    q = _cast(blocks * inv[:, None, :, None]).view(nb * GROUP, kb * GROUP)[:n, :k].contiguous()
    return q, s


def dequant_groups(q, s):
    """fp32(q) * s for 1x128 groups, unrounded (any layout of s[M, ceil(K/128)]; fp8_gemm's oracle too)."""
    return q.float() * s.float().repeat_interleave(GROUP, 1)[:, :q.shape[1]]


def dequant_blocks(q, s):
    """fp32(q) * s for 128x128 blocks, unrounded (s[ceil(N/128), ceil(K/128)])."""
    n, k = q.shape
    return q.float() * s.float().repeat_interleave(GROUP, 0)[:n].repeat_interleave(GROUP, 1)[:, :k]


def per_token_group_dequant(q, s):
    import torch
    if q.shape[1] % GROUP:
        raise ValueError(f"per_token_group_dequant: width {q.shape[1]} is not a multiple of 128")
    return dequant_groups(q, s).to(torch.bfloat16)


def per_block_dequant(q, s):
    import torch
    return dequant_blocks(q, s).to(torch.bfloat16)
