"""FP8 quantization by 1x128 token groups and 128x128 blocks (with the fused SwiGLU forms) and its
dequantization, on a real GPU, from the installed wheel, against tkreg.reference.quant.

Quantize / dequantize are bit-exact (fp8 codes and fp32 scales): the kernels and the reference
round the same fp32 numbers once each.  The fused SwiGLU uses fast-math silu (ex2.approx,
rcp.approx; see kernels_src/quant/device.py), so its test allows one e4m3 step on at most 0.1% of
codes and 1e-6 relative on scales (about 1 in 10^6 codes differ on the H200).
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.reference import quant as ref

pytestmark = pytest.mark.gpu
BF16, FP16, FP8 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
HIDDEN = (2048, 4096, 5120, 7168, 8192)
TOKENS = (1, 37, 4097)
ops = tkreg.ops


def make_x(m, k, dt):
    """Groups of very different magnitudes, an all-zero group and one below the amax floor."""
    x = torch.randn(m, k // 128, 128, device="cuda")
    x = x * 2.0 ** torch.randint(-14, 8, (m, k // 128, 1), device="cuda").float()
    x = x.view(m, k)
    if m > 2 and k >= 256:
        x[1, :128] = 0
        x[2, 128:256] *= 1e-9
    return x.to(dt)


def poisoned_q(*shape):
    return torch.full(shape, 0x7F, dtype=torch.uint8, device="cuda").view(FP8)  # 0x7F: e4m3 NaN


def poisoned_s(*shape):
    return torch.full(shape, float("nan"), device="cuda")


def assert_bits(got, want, what):
    g = got.view(torch.uint8) if got.dtype == FP8 else got
    w = want.view(torch.uint8) if want.dtype == FP8 else want
    assert g.shape == w.shape, f"{what}: shape {tuple(g.shape)} != {tuple(w.shape)}"
    bad = (g != w) if g.dtype == torch.uint8 else ~((g == w) | (g.isnan() & w.isnan()))
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} differ; first at {i}: "
                             f"got {got[i].float().item()!r}, want {want[i].float().item()!r}")


def e4m3_step(v):
    """Spacing of e4m3 values at |v| (subnormal spacing 2^-9 below 2^-6)."""
    e = torch.floor(torch.log2(v.abs().clamp_min(2.0 ** -6)))
    return torch.exp2(e - 3)


@pytest.mark.parametrize("col", [False, True], ids=["rowmajor", "colmajor"])
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("k", HIDDEN)
@pytest.mark.parametrize("m", TOKENS)
def test_group_quant_is_bit_exact(m, k, dt, ue8m0, col, seed):
    x = make_x(m, k, dt)
    q = poisoned_q(m, k)
    raw = poisoned_s(k // 128, (m + 3) // 4 * 4) if col else poisoned_s(m, k // 128)
    gq, gs = ops.per_token_group_quant_fp8(x, ue8m0=ue8m0, column_major_scales=col, q=q, s=raw)
    rq, rs = ref.per_token_group_quant_fp8(x, ue8m0)
    what = f"m={m} k={k} {dt} ue8m0={ue8m0} col={col}"
    assert gq is q
    assert_bits(gq, rq, what + " q")
    assert_bits(gs, rs, what + " s")
    if col:
        assert gs.shape == (m, k // 128) and gs.stride() == (1, (m + 3) // 4 * 4), what
        assert gs.data_ptr() == raw.data_ptr(), what


@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("dt", [BF16, FP16])
def test_group_quant_allocating_and_generic_call(dt, ue8m0, seed):
    x = make_x(300, 7168, dt)
    rq, rs = ref.per_token_group_quant_fp8(x, ue8m0)
    q, s = ops.per_token_group_quant_fp8(x, ue8m0=ue8m0)
    assert q.dtype == FP8 and s.dtype == torch.float32 and s.shape == (300, 56)
    assert_bits(q, rq, "q")
    assert_bits(s, rs, "s")
    q2, st = tkreg.call("tkreg.per_token_group_quant_fp8_colmajor", x, ue8m0=ue8m0)
    assert st.shape == (56, 300) and st.is_contiguous()
    assert_bits(q2, rq, "colmajor q")
    assert_bits(st[:, :300].t(), rs, "colmajor s")
    _, sv = ops.per_token_group_quant_fp8(x, ue8m0=ue8m0, column_major_scales=True)
    assert_bits(sv, rs, "colmajor view")
    if ue8m0:
        m, e = torch.frexp(s)
        assert (m == 0.5).all(), "UE8M0 scales must be powers of two"


@pytest.mark.parametrize("col", [False, True], ids=["rowmajor", "colmajor"])
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("i", (1408, 2048, 7168))
@pytest.mark.parametrize("m", TOKENS)
def test_silu_and_mul_quant(m, i, dt, ue8m0, col, seed):
    x = (torch.randn(m, 2 * i, device="cuda") * 4).to(dt)
    q = poisoned_q(m, i)
    raw = poisoned_s(i // 128, (m + 3) // 4 * 4) if col else poisoned_s(m, i // 128)
    gq, gs = ops.silu_and_mul_quant_fp8(x, ue8m0=ue8m0, column_major_scales=col, q=q, s=raw)
    rq, rs = ref.silu_and_mul_quant_fp8(x, ue8m0)
    what = f"m={m} i={i} {dt} ue8m0={ue8m0} col={col}"
    assert not gs.isnan().any() and not gq.float().isnan().any(), what + ": unwritten outputs"
    s_bad = ~torch.isclose(gs, rs, rtol=1e-6, atol=0)
    assert s_bad.float().mean().item() <= 1e-3, f"{what}: {int(s_bad.sum())} scales differ"
    gf, rf = gq.float(), rq.float()
    off = (gf - rf).abs()
    ok_groups = ~s_bad.repeat_interleave(128, dim=1)
    assert (off[ok_groups] <= e4m3_step(torch.maximum(gf.abs(), rf.abs()))[ok_groups]).all(), \
        f"{what}: a code is more than one e4m3 step off"
    assert (off > 0).float().mean().item() <= 1e-3, f"{what}: {int((off > 0).sum())} codes differ"


@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("n, k", [(1, 2048), (37, 7168), (4097, 7168), (128, 128), (300, 1040), (129, 4112)])
def test_block_quant_is_bit_exact(n, k, dt, ue8m0, seed):
    w = (torch.randn(n, k, device="cuda") * 2.0 ** torch.randint(-10, 6, (n, 1), device="cuda").float()).to(dt)
    nb, kb = -(-n // 128), -(-k // 128)
    q, s = poisoned_q(n, k), poisoned_s(nb, kb)
    gq, gs = ops.per_block_quant_fp8(w, ue8m0=ue8m0, q=q, s=s)
    rq, rs = ref.per_block_quant_fp8(w, ue8m0)
    what = f"n={n} k={k} {dt} ue8m0={ue8m0}"
    assert gq is q and gs is s
    assert_bits(gq, rq, what + " q")
    assert_bits(gs, rs, what + " s")


@pytest.mark.parametrize("k", (2048, 7168))
@pytest.mark.parametrize("m", TOKENS)
def test_group_dequant_is_bit_exact(m, k, seed):
    q, s = ref.per_token_group_quant_fp8(make_x(m, k, BF16))
    out = torch.full((m, k), float("nan"), dtype=BF16, device="cuda")
    y = ops.per_token_group_dequant(q, s, out=out)
    assert y is out
    assert_bits(y, ref.per_token_group_dequant(q, s), f"m={m} k={k}")
    assert_bits(ops.per_token_group_dequant(q, s), y, "allocating")


@pytest.mark.parametrize("n, k", [(1, 2048), (37, 7168), (4097, 1040), (300, 4112)])
def test_block_dequant_is_bit_exact(n, k, seed):
    q, s = ref.per_block_quant_fp8(torch.randn(n, k, dtype=BF16, device="cuda"))
    out = torch.full((n, k), float("nan"), dtype=BF16, device="cuda")
    y = ops.per_block_dequant(q, s, out=out)
    assert y is out
    assert_bits(y, ref.per_block_dequant(q, s), f"n={n} k={k}")


def test_round_trip_error_is_within_half_an_e4m3_step(seed):
    x = make_x(513, 7168, BF16)
    q, s = ops.per_token_group_quant_fp8(x)
    y = ops.per_token_group_dequant(q, s).float()
    bound = x.float().abs() * (2.0 ** -4 + 2.0 ** -8) + s.repeat_interleave(128, dim=1) * 2.0 ** -10
    assert ((y - x.float()).abs() <= bound).all()


def test_empty_problems_launch_nothing():
    x = torch.empty(0, 4096, dtype=BF16, device="cuda")
    q, s = ops.per_token_group_quant_fp8(x)
    assert q.shape == (0, 4096) and s.shape == (0, 32)
    q, s = ops.per_token_group_quant_fp8(x, column_major_scales=True)
    assert q.shape == (0, 4096) and s.shape == (0, 32)
    q, s = ops.silu_and_mul_quant_fp8(x)
    assert q.shape == (0, 2048) and s.shape == (0, 16)
    q, s = ops.per_block_quant_fp8(x)
    assert q.shape == (0, 4096) and s.shape == (0, 32)
    assert ops.per_token_group_dequant(q, torch.empty(0, 32, device="cuda")).shape == (0, 4096)
    assert ops.per_block_dequant(q, s).shape == (0, 4096)


def test_unserved_sizes_raise_or_fall_back(monkeypatch):
    x = torch.randn(3, 1000, dtype=BF16, device="cuda")     # 1000: neither % 128 nor % 16
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(tkreg.NoKernelError, match=r"K % 128 == 0"):
        ops.per_token_group_quant_fp8(x)
    with pytest.raises(tkreg.NoKernelError, match=r"K % 16 == 0"):
        ops.per_block_quant_fp8(x)
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    q, s = ops.per_block_quant_fp8(x)                         # the reference takes any K
    rq, rs = ref.per_block_quant_fp8(x)
    assert_bits(q, rq, "fallback q")
    assert_bits(s, rs, "fallback s")
    with pytest.raises(ValueError, match="multiple of 128"):   # groups of 128 need K % 128 == 0
        ops.per_token_group_quant_fp8(x)


def test_rows_first_fallback_past_grid_y_is_bit_exact():
    """Over 65535 row blocks the any-M kernels run (raster=rows); same bits as the reference."""
    m = 65535 * 4 + 3                                   # group kernels: 4 rows per CTA
    x = make_x(m, 128, BF16)
    assert "raster=rows" in tkreg.explain("per_token_group_quant_fp8", x).chosen
    q, s = ops.per_token_group_quant_fp8(x)
    rq, rs = ref.per_token_group_quant_fp8(x, False)
    assert_bits(q, rq, "quant q")
    assert_bits(s, rs, "quant s")
    m = 65535 * 8 + 5                                   # dequant: 8 rows per CTA
    q, s = ref.per_token_group_quant_fp8(make_x(m, 128, BF16), False)
    assert "raster=rows" in tkreg.explain("per_token_group_dequant", q, s).chosen
    assert_bits(ops.per_token_group_dequant(q, s), ref.per_token_group_dequant(q, s), "dequant")
    x = (torch.randn(65535 * 4 + 1, 256, device="cuda") * 4).to(BF16)
    gq, gs = ops.silu_and_mul_quant_fp8(x)
    rq, rs = ref.silu_and_mul_quant_fp8(x, False)
    assert torch.isclose(gs, rs, rtol=1e-6, atol=0).float().mean().item() >= 1 - 1e-3
    assert (gq.float() != rq.float()).float().mean().item() <= 1e-3
