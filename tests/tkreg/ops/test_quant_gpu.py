"""Transpose, per-channel FP8, MXFP4, E5M6 and the dequant ops on a real GPU, from the installed
wheel, against tkreg.reference.quant (FP8 token-group and block quantization: test_quant_fp8_gpu.py).

Bit-exact (codes and scales), except the SwiGLU ops: they use fast-math silu / sigmoid
(kernels_src/quant/device.py), so their tests allow one e4m3 step on at most 0.1% of codes and
1e-5 relative on scales.
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.reference import quant as ref

pytestmark = pytest.mark.gpu
BF16, FP16, FP8 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
TOKENS = (0, 1, 37, 4097)
ops = tkreg.ops


def make_x(m, k, dt, group=128):
    """Groups of very different magnitudes, an all-zero group and one below the amax floor."""
    g = max(1, k // group)
    x = torch.randn(m, g, k // g, device="cuda") * 2.0 ** torch.randint(-14, 8, (m, g, 1), device="cuda").float()
    x = x.view(m, k)
    if m > 2 and k >= 2 * group:
        x[1, :group] = 0
        x[2, group:2 * group] *= 1e-9
    return x.to(dt)


def bits(t):
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t.view(torch.int16) if t.dtype.itemsize == 2 else t


def assert_bits(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    g, w = bits(got), bits(want)
    bad = g != w
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} differ; first at {i}: "
                             f"got {g[i].item()!r}, want {w[i].item()!r}")


def poison(*shape, dtype):
    return torch.full(shape, 0x7F, dtype=torch.uint8, device="cuda").view(dtype) if dtype.itemsize == 1 else \
        torch.full(shape, float("nan"), dtype=dtype, device="cuda")


# ---- transpose -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [torch.uint8, FP8, torch.bool, BF16, FP16, torch.float32, torch.int32])
@pytest.mark.parametrize("b, m, n", [(1, 0, 64), (1, 1, 7168), (1, 37, 5), (1, 4097, 7168), (3, 64, 128),
                                     (2, 130, 72), (1, 7168, 4097), (1, 4097, 4099), (3, 257, 129), (2, 300, 333),
                                     (1, 1000, 1), (1, 4104, 7168), (5, 1000, 4104),
                                     (3, 24, 40), (1, 3016, 136),   # M % 16 == 8: whole-sector tiles
                                     (3, 33, 48), (1, 4095, 4096)])   # 1-byte odd M: sector-aligned tiles
def test_transpose_is_exact(b, m, n, dt):
    x = (torch.randn(b, m, n, device="cuda") * 100).to(dt) if dt != torch.bool else torch.rand(b, m, n, device="cuda") > 0.5
    y = ops.batched_transpose(x)
    assert y.dtype == dt
    assert_bits(y, x.transpose(1, 2).contiguous(), f"{b}x{m}x{n} {dt}")
    if b == 1:
        out = torch.empty(n, m, dtype=dt, device="cuda")
        assert ops.transpose(x[0], out=out) is out
        assert_bits(out, x[0].t().contiguous(), f"2-D {m}x{n} {dt}")


# ---- per-channel FP8 -----------------------------------------------------------------------------
@pytest.mark.parametrize("transpose", [False, True], ids=["rows", "transposed"])
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("k", (8, 136, 7168))
@pytest.mark.parametrize("m", TOKENS + (256,))
def test_per_channel_quant_is_bit_exact(m, k, dt, ue8m0, transpose, seed):
    x = (torch.randn(m, k, device="cuda") * 2.0 ** torch.randint(-14, 8, (1, k), device="cuda").float()).to(dt)
    if m > 130:
        x[128:256, :4] = 0
    q = poison(k, m, dtype=FP8) if transpose else poison(m, k, dtype=FP8)
    s = poison(-(-m // 128), k, dtype=torch.float32)
    gq, gs = ops.per_channel_quant_fp8(x, ue8m0=ue8m0, transpose=transpose, q=q, s=s)
    rq, rs = (ref.per_channel_quant_fp8_transpose if transpose else ref.per_channel_quant_fp8)(x, ue8m0)
    what = f"m={m} k={k} {dt} ue8m0={ue8m0} transpose={transpose}"
    assert gq is q and gs is s
    assert_bits(gq, rq, what + " q")
    assert_bits(gs, rs, what + " s")
    if (m if transpose else k) % 8 == 0:       # the dequant kernels serve widths % 8 == 0
        y = ops.dequant_fp8(gq, gs, layout="channel_transposed" if transpose else "channel")
        want = ref.per_channel_dequant_fp8(rq.t() if transpose else rq, rs)
        assert_bits(y, want.t().contiguous() if transpose else want, what + " dequant")


def _close_codes(gq, gs, rq, rs, what):
    s_bad = ~torch.isclose(gs, rs, rtol=1e-5, atol=0)
    assert int(s_bad.sum()) <= 1e-3 * max(1, s_bad.numel()), f"{what}: {int(s_bad.sum())} scales differ"
    gf, rf = gq.float(), rq.float()
    off = (gf - rf).abs()
    step = torch.exp2(torch.floor(torch.log2(torch.maximum(gf.abs(), rf.abs()).clamp_min(2.0 ** -6))) - 3)
    assert (off <= step * (1 + 1e-6)).all() or s_bad.any(), f"{what}: a code is more than one e4m3 step off"
    assert int((off > 0).sum()) <= 1e-3 * max(1, off.numel()), f"{what}: {int((off > 0).sum())} codes differ"


@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("i", (8, 1408, 7168))
@pytest.mark.parametrize("m", TOKENS)
def test_silu_and_mul_per_channel_transpose(m, i, dt, ue8m0, seed):
    x = (torch.randn(m, 2 * i, device="cuda") * 4).to(dt)
    gq, gs = ops.silu_and_mul_per_channel_quant_fp8_transpose(x, ue8m0=ue8m0, q=poison(i, m, dtype=FP8))
    rq, rs = ref.silu_and_mul_per_channel_quant_fp8_transpose(x, ue8m0)
    assert gq.shape == (i, m) and gs.shape == (-(-m // 128), i)
    assert not gq.float().isnan().any(), "unwritten codes"
    _close_codes(gq, gs, rq, rs, f"m={m} i={i} {dt} ue8m0={ue8m0}")


@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("i", (128, 1408, 7168))
@pytest.mark.parametrize("m", TOKENS)
def test_silu_and_mul_backward_quant(m, i, dt, ue8m0, seed):
    x = (torch.randn(m, 2 * i, device="cuda") * 4).to(dt)
    dy = torch.randn(m, i, device="cuda").to(dt)
    gq, gs = ops.silu_and_mul_backward_quant_fp8(dy, x, ue8m0=ue8m0, s=poison(m, 2 * i // 128, dtype=torch.float32))
    rq, rs = ref.silu_and_mul_backward_quant_fp8(dy, x, ue8m0)
    assert not gs.isnan().any(), "unwritten scales"
    _close_codes(gq, gs, rq, rs, f"m={m} i={i} {dt} ue8m0={ue8m0}")
    y = ops.dequant_fp8(gq, gs)
    assert_bits(y, ref.group_dequant_fp8(gq, gs), "dequant")


# ---- MXFP4 / E5M6 --------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("k", (32, 96, 7168))
@pytest.mark.parametrize("m", TOKENS)
def test_fp4_is_bit_exact(m, k, dt, seed):
    x = make_x(m, k, dt, group=32)
    q, s = poison(m, k // 2, dtype=torch.uint8), poison(m, k // 32, dtype=torch.uint8)
    gq, gs = ops.per_token_group_quant_fp4(x, q=q, s=s)
    rq, rs = ref.per_token_group_quant_fp4(x)
    assert gq is q and gs is s
    assert_bits(gq, rq, f"m={m} k={k} {dt} q")
    assert_bits(gs, rs, f"m={m} k={k} {dt} s")
    assert_bits(ops.per_token_group_dequant_fp4(gq, gs), ref.per_token_group_dequant_fp4(rq, rs), "dequant")


@pytest.mark.parametrize("m", (37, 4097))
def test_fp4_extreme_magnitudes_are_bit_exact(m, seed):
    """bf16 groups across the whole exponent range (scales 2^-126 .. 2^126, the largest finite
    values, subnormals), e2m1 midpoints and ties, signed zeros: the packed-bf16x2 kernel's scale
    rule and its 2^-127 line factor at the top scale."""
    x = torch.randn(m, 7168 // 32, 32, device="cuda") * 3
    x = x * torch.pow(2.0, torch.randint(-150, 123, (m, 7168 // 32, 1), device="cuda").float())
    x = x.view(m, 7168)
    x[0, :32] = torch.tensor([3.3895e38, -3.3895e38, 2.5e38, -1e38] + [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 4)[:32]
    x[1, :32] = torch.tensor([0.25, -0.75, 1.25, -1.75, 2.5, -3.5, 5.0, -6.0] * 4) * 2.0 ** 120
    x[2, :32] = torch.tensor([0.0, -0.0] * 16)
    x = x.to(BF16)
    gq, gs = ops.per_token_group_quant_fp4(x)
    rq, rs = ref.per_token_group_quant_fp4(x)
    assert_bits(gq, rq, f"m={m} q")
    assert_bits(gs, rs, f"m={m} s")


@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("k", (8, 2056, 7168, 16384))
@pytest.mark.parametrize("m", TOKENS)
def test_e5m6_is_bit_exact(m, k, dt, ue8m0, seed):
    x = (torch.randn(m, k, device="cuda") * 2.0 ** torch.randint(-20, 10, (m, 1), device="cuda").float())
    if m > 2:
        x[1] = 0
        x[2, ::3] *= 1e-6                       # fp16-subnormal and underflowing codes
    x = x.to(dt)
    p, s = poison(m, k * 3 // 2, dtype=torch.uint8), poison(m, dtype=torch.float32)
    gp, gs = ops.quant_e5m6(x, ue8m0=ue8m0, p=p, s=s)
    rp, rs = ref.quant_e5m6(x, ue8m0)
    assert gp is p and gs is s
    assert_bits(gp, rp, f"m={m} k={k} {dt} p")
    assert_bits(gs, rs, f"m={m} k={k} {dt} s")
    assert_bits(ops.dequant_e5m6(gp, gs), ref.dequant_e5m6(rp, rs), "dequant")


# ---- FP8 dequant layouts -------------------------------------------------------------------------
@pytest.mark.parametrize("m", TOKENS)
def test_dequant_fp8_layouts(m, seed):
    x = make_x(m, 7168, BF16)
    q, s = ops.per_token_group_quant_fp8(x, column_major_scales=True)   # s: a column-major view
    want = ops.per_token_group_dequant(q, s.contiguous())
    assert_bits(ops.dequant_fp8(q, s), want, "colmajor")
    q, s = ops.per_token_group_quant_fp8(x, ue8m0=True)
    assert_bits(ops.dequant_fp8(q, s), ops.per_token_group_dequant(q, s), "ue8m0 rows")
    q, s = ops.per_block_quant_fp8(x)
    assert_bits(ops.dequant_fp8(q, s, layout="block"), ops.per_block_dequant(q, s), "block")


def test_bad_inputs_raise_before_launch(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    x = torch.randn(64, 256, device="cuda", dtype=BF16)
    with pytest.raises(ValueError, match="`x` must be contiguous"):
        ops.transpose(x.t())
    with pytest.raises(tkreg.NoKernelError, match=r"K <= 16384"):
        ops.quant_e5m6(torch.randn(2, 16392, device="cuda", dtype=BF16))
    with pytest.raises(tkreg.NoKernelError, match=r"K % 32 == 0"):
        ops.per_token_group_quant_fp4(torch.randn(2, 48, device="cuda", dtype=BF16))
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        ops.per_channel_quant_fp8(x.view(-1)[4:4 + 63 * 256].view(63, 256))


def test_compile_fullgraph_matches_eager(seed):
    def f(x, dy, h):
        q, s = ops.per_channel_quant_fp8(x, transpose=True)
        q4, s4 = ops.per_token_group_quant_fp4(x)
        p, se = ops.quant_e5m6(x)
        g, gs = ops.silu_and_mul_backward_quant_fp8(dy, h)
        return (ops.dequant_fp8(q, s, layout="channel_transposed"), ops.per_token_group_dequant_fp4(q4, s4),
                ops.dequant_e5m6(p, se), ops.dequant_fp8(g, gs), ops.transpose(x))

    c = torch.compile(f, fullgraph=True)
    for m in (16, 136):
        x, dy, h = make_x(m, 256, BF16), torch.randn(m, 128, device="cuda", dtype=BF16), make_x(m, 256, BF16)
        for a, b in zip(c(x, dy, h), f(x, dy, h)):
            assert_bits(a, b, f"compiled m={m}")
