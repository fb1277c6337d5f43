"""Torch references for the quant family (test oracle and TKREG_FALLBACK=reference path).

Bit for bit what kernels_src/quant/ computes (on a GPU; on the CPU only the SwiGLU's `exp` may
differ in the last bit), and (where TileKernels has the op) what DeepSeek TileKernels' torch
references (`tile_kernels.torch.cast`, `cast_to_e5m6`, `cast_back_from_e5m6`) compute:

- FP8 (e4m3) per-token groups of 128 along a row, or 128 x 128 weight blocks:
  amax = max |x| over the group, in fp32, clamped below at AMAX_FLOOR (1e-4);
  s    = amax / 448, a correctly rounded fp32 division (a tensor / tensor division: torch turns
         `tensor / 448.0` into a multiply by fl(1/448) on CUDA, which is not the same number);
  q    = e4m3(x * fl(448 / amax)): one fp32 multiply, then round-to-nearest-even to e4m3;
  ue8m0: s = 2^ceil(log2(fl(amax / 448))), taken from the float's bits, and q = e4m3(x * 2^-e);
  dequant: bf16(fp32(q) * s).
  rms_norm_quant_fp8 / fused_add_rms_norm_quant_fp8: the group quant above of tkreg.reference.norm's
  rms_norm output (rounded to x's dtype first); the fused form adds x into residual in place first.
- per-channel FP8: groups of 128 *tokens* per channel (TileKernels' per_channel_cast with
  num_per_tokens=128), s[ceil(M / 128), K] fp32; a partial last group takes the max over the
  tokens it has.  amax floor 1e-4, s = amax / 448, q = e4m3(x * fl(448 / amax)), ue8m0 as above.  `_transpose` writes q^T[K, M], same s.
- MXFP4 (OCP): groups of 32 along a row; amax floored at 6 * 2^-126; s = 2^ceil(log2(fl(amax / 6)))
  stored as its biased exponent (uint8, E8M0: value 2^(e - 127)); q = e2m1(x * 2^-(e - 127)),
  round to nearest even, saturating at 6; -0 and negative values that round to 0 keep the sign
  bit (code 8).  e2m1 code = s(1) e(2) m(1): 0, 0.5, 1, 1.5, 2, 3, 4, 6.  Two codes per byte,
  element 2j in the low nibble, element 2j + 1 in the high nibble.
- E5M6: one fp32 scale per token (TileKernels' per_token_cast_to_e5m6 with the whole row as the
  group): amax floor 1e-4, s = amax / 65024, y = x * fl(65024 / amax); each y becomes a 12-bit
  code = the top 12 bits of an fp16 (1 sign, 5 exponent, 6 mantissa bits): first fp16 with
  round-toward-zero (fp16 subnormals below 2^-14, overflow to inf), then the 12 bits taken from
  it rounded to nearest even using the *fp32's* 17 dropped mantissa bits (exact RNE for normal
  values; TileKernels' rule, which the kernels copy, for fp16-subnormal ones).  Eight codes
  h0..h7 pack into three little-endian uint32 words (12 bytes):
      w0 = h0 << 20 | h1 << 8 | h2 >> 4
      w1 = h2 << 28 | h3 << 16 | h4 << 4 | h5 >> 8
      w2 = h5 << 24 | h6 << 12 | h7
  so a row of K values takes 3K/2 bytes (K % 8 == 0).  Decode: fp16 bits = code << 4.
- dequant: bf16(fp32(code value) * s), one multiply, one rounding.
"""
from __future__ import annotations

# The formats' constants; kernels_src imports them from here (one definition).
FP8_MAX = 448.0                   # largest e4m3 value
AMAX_FLOOR = 1e-4                 # an all-zero FP8 / E5M6 group gets scale AMAX_FLOOR / max code
GROUP = 128                       # FP8 scale group: 1 x 128 (activations), 128 x 128 (weights)
FP4_GROUP = 32
FP4_AMAX_FLOOR = 6.0 * 2.0 ** -126
E5M6_MAX = 65024.0
E5M6_AMAX_FLOOR = AMAX_FLOOR


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


def rms_norm_quant_fp8(x, weight, eps=1e-6, ue8m0=False):
    """rms_norm (tkreg.reference.norm, rounded to x's dtype) then per_token_group_quant_fp8 of it."""
    from .norm import rms_norm
    return _group_quant(rms_norm(x, weight, eps).float(), bool(ue8m0))


def fused_add_rms_norm_quant_fp8(x, residual, weight, eps=1e-6, ue8m0=False):
    """In place like the kernel: residual <- round(x + residual) (x unchanged); then
    rms_norm_quant_fp8 of the new residual."""
    residual.copy_((x.float() + residual.float()).to(residual.dtype))
    return rms_norm_quant_fp8(residual, weight, eps, ue8m0)


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



# ---- layout -------------------------------------------------------------------------------------
def batched_transpose(x):
    """x[B, M, N] -> [B, N, M] (any dtype)."""
    return x.transpose(1, 2).contiguous()


def transpose(x):
    return x.t().contiguous()


# ---- per-channel FP8 ---------------------------------------------------------------------------
def _channel_quant(y, ue8m0: bool):
    """y fp32 [M, K] -> q[M, K] e4m3, s[ceil(M / 128), K] over 128-token groups."""
    import torch
    m, k = y.shape
    mb = -(-m // GROUP)
    pad = torch.zeros(mb * GROUP, k, dtype=torch.float32, device=y.device)
    pad[:m] = y
    g = pad.view(mb, GROUP, k)
    s, inv = _scales(g.abs().amax(1), ue8m0)
    q = _cast(g * inv[:, None, :]).view(mb * GROUP, k)[:m]
    return q.contiguous(), s


def per_channel_quant_fp8(x, ue8m0=False):
    return _channel_quant(x.float(), bool(ue8m0))


def per_channel_quant_fp8_transpose(x, ue8m0=False):
    q, s = _channel_quant(x.float(), bool(ue8m0))
    return q.t().contiguous(), s


def silu_and_mul_per_channel_quant_fp8_transpose(x, ue8m0=False):
    q, s = _channel_quant(swiglu_fp32(x), bool(ue8m0))
    return q.t().contiguous(), s


def silu_and_mul_backward_fp32(dy, x):
    """[dy * u * s * (1 + g * (1 - s)) | dy * g * s], s = 1 / (1 + exp(-g)), all fp32."""
    import torch
    g, u = x.float().chunk(2, dim=-1)
    d = dy.float()
    s = 1.0 / (1.0 + torch.exp(-g))
    return torch.cat([d * u * s * (1 + g * (1 - s)), d * g * s], dim=-1)


def silu_and_mul_backward_quant_fp8(dy, x, ue8m0=False):
    """dx[M, 2I] of silu_and_mul in fp32, quantized per 128-element group of a row (no bf16 step)."""
    return _group_quant(silu_and_mul_backward_fp32(dy, x), bool(ue8m0))


# ---- FP8 dequant in the layouts above ----------------------------------------------------------
def group_dequant_fp8(q, s):
    """q[R, C] e4m3, s[R, ceil(C / 128)] (any strides: row-major, DeepGEMM column-major view, or
    per-channel scales of a transposed q, s.t()) -> bf16 q * s."""
    import torch
    return dequant_groups(q, s).to(torch.bfloat16)


def per_channel_dequant_fp8(q, s):
    """q[M, K] e4m3, s[ceil(M / 128), K] -> bf16 q * s."""
    import torch
    m = q.shape[0]
    return (q.float() * s.float().repeat_interleave(GROUP, 0)[:m]).to(torch.bfloat16)


# ---- MXFP4 ---------------------------------------------------------------------------------------
def e2m1_codes(y):
    """fp32 -> e2m1 code (uint8 0..15), round to nearest even, saturating; sign bit kept."""
    import torch
    a = y.abs()
    mag = ((a > 0.25).int() + (a >= 0.75).int() + (a > 1.25).int() + (a >= 1.75).int()
           + (a > 2.5).int() + (a >= 3.5).int() + (a > 5.0).int())
    sign = (y.view(torch.int32) < 0).int() << 3
    return (mag | sign).to(torch.uint8)


E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def e2m1_values(codes):
    """uint8 codes 0..15 -> fp32 values (code 8 is -0.0)."""
    import torch
    lut = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float32, device=codes.device)
    return lut[codes.long()]


def _e8m0(e):
    import torch
    return (e.int() << 23).view(torch.float32)


def per_token_group_quant_fp4(x):
    """x[M, K] (K % 32 == 0) -> q[M, K // 2] uint8 (2 codes a byte, low nibble first),
    s[M, K // 32] uint8 E8M0 (scale 2^(s - 127))."""
    import torch
    m, k = x.shape
    if k % FP4_GROUP:
        raise ValueError(f"per_token_group_quant_fp4: width {k} is not a multiple of 32")
    g = x.float().view(m, k // FP4_GROUP, FP4_GROUP)
    a = g.abs().amax(-1).clamp_min(FP4_AMAX_FLOOR)
    sf = torch.div(a, torch.full_like(a, 6.0))
    e = ((sf.view(torch.int32) - 1) >> 23) + 1                    # biased exponent of 2^ceil(log2 sf)
    inv = ((254 - e) << 23).view(torch.float32)
    c = e2m1_codes(g * inv[..., None]).view(m, k // 2, 2)
    return (c[..., 0] | (c[..., 1] << 4)).contiguous(), e.to(torch.uint8)


def fp4_unpack(q):
    """q[M, K // 2] uint8 -> codes [M, K] uint8."""
    import torch
    return torch.stack([q & 0xF, q >> 4], dim=-1).view(q.shape[0], q.shape[1] * 2)


def per_token_group_dequant_fp4(q, s):
    """q[M, K // 2] uint8, s[M, K // 32] uint8 E8M0 -> bf16 e2m1(q) * 2^(s - 127)."""
    import torch
    v = e2m1_values(fp4_unpack(q))
    return (v * _e8m0(s).repeat_interleave(FP4_GROUP, 1)).to(torch.bfloat16)


# ---- E5M6 ----------------------------------------------------------------------------------------
def _shr(x, n):
    """Logical right shift of int32/int64 tensors holding uint32 bit patterns."""
    return (x >> n) & ((1 << (32 - n)) - 1) if n else x


def e5m6_codes(y):
    """fp32 [..] -> 12-bit codes (int64), as the module docstring says."""
    import torch
    b = y.contiguous().view(torch.int32).long() & 0xFFFFFFFF
    sign = (b >> 16) & 0x8000
    exp = (b >> 23) & 0xFF
    mant = b & 0x7FFFFF
    h = sign.clone()
    normal = (exp >= 113) & (exp <= 142)
    h = torch.where(normal, sign | ((exp - 112) << 10) | (mant >> 13), h)
    sub = (exp >= 103) & (exp <= 112)
    h = torch.where(sub, sign | ((0x800000 | mant) >> (126 - exp).clamp(0, 63)), h)
    h = torch.where((exp > 142) & ((exp < 255) | (mant == 0)), sign | 0x7C00, h)
    h = torch.where((exp == 255) & (mant != 0), sign | 0x7FFF, h)
    c = h >> 4
    up = ((c & 1) + (b & 0x1FFFF)) > 0x10000
    return (c + up.long()) & 0xFFF


def e5m6_pack(c):
    """codes [M, K] (K % 8 == 0) -> uint8 [M, 3K/2]."""
    import torch
    m, k = c.shape
    h = c.view(m, k // 8, 8)
    w0 = (h[..., 0] << 20) | (h[..., 1] << 8) | (h[..., 2] >> 4)
    w1 = (h[..., 2] << 28) | (h[..., 3] << 16) | (h[..., 4] << 4) | (h[..., 5] >> 8)
    w2 = (h[..., 5] << 24) | (h[..., 6] << 12) | h[..., 7]
    w = torch.stack([w0, w1, w2], -1) & 0xFFFFFFFF
    w = torch.where(w >= 2 ** 31, w - 2 ** 32, w).to(torch.int32)
    return w.view(m, k // 8 * 3).view(torch.uint8)


def e5m6_unpack(p):
    """uint8 [M, 3K/2] -> codes [M, K] (int64)."""
    import torch
    m, groups = p.shape[0], p.shape[1] // 12          # 12 bytes = three words = eight codes
    w = p.contiguous().view(torch.int32).long().view(m, groups, 3) & 0xFFFFFFFF
    w0, w1, w2 = w[..., 0], w[..., 1], w[..., 2]
    h = [w0 >> 20, w0 >> 8, (w0 << 4) | (w1 >> 28), w1 >> 16, w1 >> 4, (w1 << 8) | (w2 >> 24), w2 >> 12, w2]
    return (torch.stack(h, -1) & 0xFFF).view(m, groups * 8)


def e5m6_values(c):
    """12-bit codes -> fp32 (fp16 with bits code << 4)."""
    import torch
    h = (c << 4) & 0xFFFF
    h = torch.where(h >= 0x8000, h - 0x10000, h).to(torch.int16)
    return h.view(torch.float16).float()


def quant_e5m6(x, ue8m0=False):
    """x[M, K] (K % 8 == 0) -> packed[M, 3K/2] uint8, s[M] fp32 (one scale per token)."""
    import torch
    m, k = x.shape
    if k % 8:
        raise ValueError(f"quant_e5m6: width {k} is not a multiple of 8")
    xf = x.float()
    a = xf.abs().amax(-1) if k else torch.zeros(m, device=x.device)
    a = a.clamp_min(E5M6_AMAX_FLOOR)
    s = torch.div(a, torch.full_like(a, E5M6_MAX))
    if ue8m0:
        e = ((s.view(torch.int32) - 1) >> 23) + 1
        s, inv = (e << 23).view(torch.float32), ((254 - e) << 23).view(torch.float32)
    else:
        inv = torch.div(torch.full_like(a, E5M6_MAX), a)
    return e5m6_pack(e5m6_codes(xf * inv[:, None])), s


def dequant_e5m6(p, s):
    """packed[M, 3K/2] uint8, s[M] fp32 -> bf16 value * s."""
    import torch
    return (e5m6_values(e5m6_unpack(p)) * s.float()[:, None]).to(torch.bfloat16)
