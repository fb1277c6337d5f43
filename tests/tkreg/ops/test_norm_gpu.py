"""The norm family (rms_norm, fused_add_rms_norm, rms_norm_backward) on a real GPU, from the
installed wheel, against tkreg.reference.norm.

Sizes: every static N the wheel ships (read from its rms_norm keys), the head-dim rows of qk-norm
(N <= 256), and other N % 8 == 0 that take the any-N kernels (register-resident or two-pass).
Forward outputs within bf16 / fp16 rounding of the fp32 reference; the fused op's residual is
exact and its x equals rms_norm of the new residual bit for bit.  Backward: relative Frobenius
error of dx and dw <= 1e-2 against the reference, which computes in fp32.
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference
from tkreg.spec import Variant

pytestmark = pytest.mark.gpu
BF16, FP16 = torch.bfloat16, torch.float16
DTYPES = pytest.mark.parametrize("dt", [BF16, FP16], ids=["bf16", "fp16"])
# the N the wheel's rms_norm kernels bake in (N=0 keys: the any-N kernels)
STATIC_N = tuple(sorted({Variant.parse_key(k)["N"] for o in tkreg.list_ops() if o["op"] == "tkreg.rms_norm"
                         for keys in o["variants"].values() for k in keys} - {0}))
HEAD_DIM = (64, 96, 128, 256)                          # qk-norm rows: several rows a CTA, lane groups
ANY_N = (8, 2056, 2880, 3584, 4088, 16384, 16392)      # any-N kernels: resident rows, 16392 two-pass
BACKWARD_N = (8, 64, 2880, 3584, 4096, 16384, 16392)
TOL = {BF16: dict(rtol=1.6e-2, atol=1e-2), FP16: dict(rtol=2e-3, atol=2e-3)}


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def test_the_wheel_ships_static_sizes():
    assert STATIC_N and not set(STATIC_N) & set(HEAD_DIM + ANY_N), STATIC_N


@DTYPES
@pytest.mark.parametrize("n", STATIC_N + HEAD_DIM + ANY_N)
@pytest.mark.parametrize("m", [1, 37, 4097])
def test_rms_norm_matches_reference(m, n, dt, seed):
    x = torch.randn(m, n, dtype=dt, device="cuda") * 3
    w = torch.randn(n, dtype=dt, device="cuda")
    out = torch.full_like(x, float("nan"))  # poisoned: every element must be written
    y = tkreg.ops.rms_norm(x, w, 1e-5, out=out)
    assert y is out and not torch.isnan(y).any()
    torch.testing.assert_close(y, reference.rms_norm(x, w, 1e-5), **TOL[dt], msg=lambda s: f"m={m} n={n} {dt}: {s}")
    torch.testing.assert_close(tkreg.ops.rms_norm(x, w, 1e-5), y, rtol=0, atol=0)


@DTYPES
@pytest.mark.parametrize("n", STATIC_N + HEAD_DIM + ANY_N)
@pytest.mark.parametrize("m", [0, 1, 37, 4097])
def test_fused_add_rms_norm_is_in_place_and_exact(m, n, dt, seed):
    x = torch.randn(m, n, dtype=dt, device="cuda")
    r = torch.randn(m, n, dtype=dt, device="cuda")
    w = torch.randn(n, dtype=dt, device="cuda")
    xr, rr = x.clone(), r.clone()
    reference.fused_add_rms_norm(xr, rr, w, 1e-6)
    out = tkreg.ops.fused_add_rms_norm(x, r, w, 1e-6)
    assert out[0] is x and out[1] is r
    torch.testing.assert_close(r, rr, rtol=0, atol=0)  # the rounded sum is exact
    torch.testing.assert_close(x, xr, **TOL[dt])
    # x is exactly rms_norm of the new residual, as the kernel promises
    torch.testing.assert_close(x, tkreg.ops.rms_norm(r, w, 1e-6), rtol=0, atol=0)


@DTYPES
@pytest.mark.parametrize("n", sorted(set(STATIC_N + BACKWARD_N)))
@pytest.mark.parametrize("m", [0, 1, 37, 4097])
def test_rms_norm_backward_matches_reference(m, n, dt, seed):
    dy = torch.randn(m, n, dtype=dt, device="cuda")
    x = torch.randn(m, n, dtype=dt, device="cuda")
    w = torch.randn(n, dtype=dt, device="cuda")
    dx, dw = tkreg.ops.rms_norm_backward(dy, x, w, 1e-6)
    assert dx.shape == (m, n) and dw.shape == (n,) and dx.dtype == dw.dtype == dt
    if m:
        rdx, rdw = reference.rms_norm_backward(dy, x, w, 1e-6)
        assert rel_err(dx, rdx) <= 1e-2, (m, n, dt, rel_err(dx, rdx))
        assert rel_err(dw, rdw) <= 1e-2, (m, n, dt, rel_err(dw, rdw))
    else:
        assert torch.count_nonzero(dw) == 0


@DTYPES
def test_autograd_through_rms_norm_at_any_n(dt, seed):
    """tkreg.ops.rms_norm's backward (rms_norm_backward's any-N kernel at N = 2880) against torch
    autograd of the reference in fp32."""
    m, n = 333, 2880
    x = torch.randn(m, n, dtype=dt, device="cuda", requires_grad=True)
    w = torch.randn(n, dtype=dt, device="cuda", requires_grad=True)
    g = torch.randn(m, n, dtype=dt, device="cuda")
    tkreg.ops.rms_norm(x, w).backward(g)
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    (reference.rms_norm(xr, wr) * g.float()).sum().backward()
    assert rel_err(x.grad, xr.grad) <= 1e-2 and rel_err(w.grad, wr.grad) <= 1e-2, \
        (rel_err(x.grad, xr.grad), rel_err(w.grad, wr.grad))


def test_no_variant_raises_or_falls_back(monkeypatch):
    x, w = torch.randn(3, 1004, dtype=BF16, device="cuda"), torch.randn(1004, dtype=BF16, device="cuda")
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(tkreg.NoKernelError, match="N % 8 == 0"):
        tkreg.ops.rms_norm(x, w)
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    torch.testing.assert_close(tkreg.ops.rms_norm(x, w), reference.rms_norm(x, w))
