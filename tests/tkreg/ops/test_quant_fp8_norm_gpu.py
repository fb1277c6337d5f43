"""rms_norm_quant_fp8 / fused_add_rms_norm_quant_fp8 on a real GPU, from the installed wheel.

Bit-exactness against the reference composition (rms_norm rounded to bf16, then
per_token_group_quant_fp8) needs the same fp32 sum of squares; a kernel sums in its own order, so
the exact tests use rows of small integers times a power of two a row, whose squares and partial
sums are exact in fp32 in any order.  Random rows: the sum's order moves a bf16 rounding of the
normed row now and then (tkreg.rms_norm and torch differ the same way), so those tests bound the
dequantized error and check the codes of almost every group, and that the fused op equals
tkreg's own unfused pair (rms_norm, then per_token_group_quant_fp8) on nearly every group.
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.ops import quant as qops
from tkreg.reference import norm as rnorm
from tkreg.reference import quant as ref

pytestmark = pytest.mark.gpu
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
TOKENS = (1, 37, 4096)
WIDTHS = (2048, 4096, 7168)
MORE_WIDTHS = (128, 1024, 2176, 5120, 8192, 12288, 16384)     # every resident range, other hidden sizes


def exact_rows(m, n, seed, count=1):
    """`count` tensors of integers in [-8, 8] times one 2^k a row (shared): every square and partial
    sum of a row, and of a sum of two of them, is exact in fp32."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    scale = 2.0 ** torch.randint(-8, 8, (m, 1), generator=g, device="cuda").float()
    xs = [(torch.randint(-8, 9, (m, n), generator=g, device="cuda").float() * scale).to(BF16) for _ in range(count)]
    return xs[0] if count == 1 else xs


def weight(n, seed=3):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (1 + 0.3 * torch.randn(n, generator=g, device="cuda")).to(BF16)


def composition(x, w, eps):
    """rms_norm then per_token_group_quant_fp8 (fp32 math, one rounding each, as the reference); the
    mean as an IEEE division by N, which equals torch's mean at power-of-two N."""
    xf = x.float()
    ss = (xf * xf).sum(-1, keepdim=True)
    r = torch.rsqrt(torch.div(ss, torch.full_like(ss, x.shape[1])) + eps)
    return ref.per_token_group_quant_fp8((xf * r * w.float()).to(BF16))


def assert_bits(got, want, what):
    for g, w, name in zip(got, want, ("q", "s")):
        g8 = g.view(torch.uint8) if g.dtype == FP8 else g
        w8 = w.view(torch.uint8) if w.dtype == FP8 else w
        bad = g8 != w8
        assert not bad.any(), f"{what} {name}: {int(bad.sum())} of {bad.numel()} differ, first at {bad.nonzero()[0].tolist()}"


@pytest.mark.parametrize("n", WIDTHS + MORE_WIDTHS)
@pytest.mark.parametrize("m", TOKENS)
def test_rms_norm_quant_is_bit_exact(m, n):
    x, w = exact_rows(m, n, seed=m + n), weight(n)
    q = torch.full((m, n), 0x7F, dtype=torch.uint8, device="cuda").view(FP8)    # poisoned: e4m3 NaN
    s = torch.full((m, n // 128), float("nan"), device="cuda")
    got = qops.rms_norm_quant_fp8(x, w, 1e-5, q=q, s=s)
    assert got[0] is q and got[1] is s
    assert_bits(got, composition(x, w, 1e-5), f"m={m} n={n}")
    if n & (n - 1) == 0:     # torch's mean is the same number: the reference op's own composition
        assert_bits(got, ref.rms_norm_quant_fp8(x, w, 1e-5), f"m={m} n={n} reference")


@pytest.mark.parametrize("n", WIDTHS + MORE_WIDTHS)
@pytest.mark.parametrize("m", (0,) + TOKENS)
def test_fused_add_rms_norm_quant_is_bit_exact_and_in_place(m, n):
    (x, r), w = exact_rows(m, n, seed=n, count=2), weight(n)
    x0, want_r = x.clone(), (x.float() + r.float()).to(BF16)
    got = qops.fused_add_rms_norm_quant_fp8(x, r, w, 1e-6)
    assert torch.equal(x, x0) and torch.equal(r, want_r)
    assert_bits(got, composition(want_r, w, 1e-6), f"m={m} n={n}")


@pytest.mark.parametrize("ue8m0", [False, True])
@pytest.mark.parametrize("n", WIDTHS)
def test_random_rows_match_the_reference_and_the_unfused_pair(n, ue8m0):
    m = 4096
    x = torch.randn(m, n, device="cuda").to(BF16) * 3
    w = weight(n)
    q, s = qops.rms_norm_quant_fp8(x, w, 1e-6, ue8m0=ue8m0)
    for name, (wq, ws) in (("reference", ref.rms_norm_quant_fp8(x, w, 1e-6, ue8m0)),
                           ("tkreg pair", tkreg.ops.per_token_group_quant_fp8(tkreg.ops.rms_norm(x, w, 1e-6),
                                                                               ue8m0=ue8m0))):
        same = (q.view(torch.uint8) == wq.view(torch.uint8)).view(m, n // 128, 128).all(-1) & (s == ws)
        assert same.float().mean() >= 0.995, f"{name}: {1 - same.float().mean():.2%} of groups differ"
        d, dw = ref.per_token_group_dequant(q, s).float(), ref.per_token_group_dequant(wq, ws).float()
        assert ((d - dw).norm() / dw.norm()) < 1e-3, name


def test_the_feed_of_an_fp8_gemm_matches_the_bf16_path():
    """What FP8 mode runs before qkv / gate_up: the norm's codes into fp8_gemm, against bf16."""
    m, n, k = 37, 1024, 4096
    x, w = torch.randn(m, k, device="cuda").to(BF16), weight(k)
    b = (torch.randn(n, k, device="cuda") * k ** -0.5).to(BF16)
    bq, bs = tkreg.ops.per_block_quant_fp8(b)
    q, s = qops.rms_norm_quant_fp8(x, w)
    got = tkreg.ops.fp8_gemm(q, s, bq, bs).float()
    want = (rnorm.rms_norm(x, w).float() @ b.float().t())
    assert (got - want).norm() / want.norm() < 5e-2
