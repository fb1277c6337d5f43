"""rms_norm_heads (qk-norm on the strided q/k slices of a fused qkv output) on a real GPU.

The kernel is rms_norm's head-dim resident-row kernel reading rows through the token and head
strides, so its output equals tkreg.ops.rms_norm of the contiguous copy bit for bit, and is
within bf16 / fp16 rounding of the fp32 reference.  The qkv buffer is never written.
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

pytestmark = pytest.mark.gpu
BF16, FP16 = torch.bfloat16, torch.float16
TOL = {BF16: dict(rtol=1.6e-2, atol=1e-2), FP16: dict(rtol=2e-3, atol=2e-3)}


@pytest.mark.parametrize("dt", [BF16, FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128, 256, 96])
@pytest.mark.parametrize("hq, hk", [(32, 8), (16, 16), (64, 4), (5, 1)])
@pytest.mark.parametrize("t", [1, 7, 4097])
def test_matches_rms_norm_of_the_copy(t, hq, hk, d, dt, seed):
    qkv = (torch.randn(t, (hq + 2 * hk) * d, device="cuda") * 3).to(dt)
    q, k, _ = qkv.view(t, hq + 2 * hk, d).split([hq, hk, hk], 1)
    qkv0 = qkv.clone()
    w = torch.randn(d, device="cuda").to(dt)
    for x in (q, k):
        out = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)     # poisoned: every element written
        y = tkreg.ops.rms_norm(x, w, 1e-6, out=out)
        assert y is out and y.is_contiguous() and not torch.isnan(y).any()
        want = tkreg.ops.rms_norm(x.reshape(-1, d).contiguous(), w, 1e-6).view(x.shape)
        torch.testing.assert_close(y, want, rtol=0, atol=0)
        torch.testing.assert_close(y, reference.rms_norm(x, w, 1e-6), **TOL[dt])
    assert torch.equal(qkv, qkv0)


def test_head_major_and_empty(seed):
    x = torch.randn(4, 33, 128, device="cuda").to(BF16).transpose(0, 1)       # [33, 4, 128], token stride 128
    w = torch.randn(128, device="cuda").to(BF16)
    torch.testing.assert_close(tkreg.ops.rms_norm(x, w), tkreg.ops.rms_norm(x.reshape(-1, 128).contiguous(), w).view(33, 4, 128),
                               rtol=0, atol=0)
    e = torch.empty(0, 6, 128, device="cuda", dtype=BF16)[:, :4]
    assert tkreg.ops.rms_norm_heads(e, w).shape == (0, 4, 128)
