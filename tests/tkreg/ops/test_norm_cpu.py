"""The norm family (rms_norm, fused_add_rms_norm, rms_norm_backward) without a GPU: the installed
variants against kernels_src/norm's specs, which N get a kernel and what explain says for the
others, the references against float64 formulas and torch autograd, and the calls (autograd
included) through the reference fallback."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

BF16, FP16 = torch.bfloat16, torch.float16
OPS = ("rms_norm", "fused_add_rms_norm", "rms_norm_backward")


def test_wheel_ships_the_norm_specs(ships_the_specs):
    assert set(ships_the_specs("norm")) == {f"tkreg.{n}" for n in OPS + ("rms_norm_heads",)}


def test_registered_for_both_archs(shipped):
    for name in OPS:
        have = shipped[f"tkreg.{name}"]
        assert have["archs"] == ["sm_100a", "sm_90a"] and all(have["variants"].values()), (name, have["variants"])


def norm_args(op, m, n, dt):
    return [torch.empty(m, n, dtype=dt)] * (1 if op == "rms_norm" else 2) + [torch.empty(n, dtype=dt)]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("dt", [BF16, FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("op", OPS)
def test_every_n_divisible_by_8_has_a_kernel(op, dt, arch):
    for n in (8, 64, 96, 128, 256, 264, 1000, 1024, 2056, 2880, 4096, 6144, 7168, 16384, 16392, 65536):
        e = tkreg.explain(op, *norm_args(op, 3, n, dt), arch=arch)
        assert e.chosen is not None, str(e)
    e = tkreg.explain(op, *norm_args(op, 3, 1004, dt), arch=arch)
    assert e.chosen is None and any(why == "needs N % 8 == 0" for _, _, why in e.rows), str(e)


# ---- references ---------------------------------------------------------------------------------
def rms_norm64(x, w, eps):
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


@pytest.mark.parametrize("dt", [BF16, FP16], ids=["bf16", "fp16"])
def test_rms_norm_reference_rounds_the_formula_once(dt, seed):
    x, w = torch.randn(33, 2880, dtype=dt) * 3, torch.randn(2880, dtype=dt)
    got = reference.rms_norm(x, w, 1e-5)
    assert got.dtype == dt
    torch.testing.assert_close(got.double(), rms_norm64(x, w, 1e-5), rtol=2 ** -7 if dt == BF16 else 2 ** -10,
                               atol=1e-5)


def test_fused_add_reference_rounds_the_sum_first(seed):
    x, r, w = torch.randn(9, 256, dtype=BF16), torch.randn(9, 256, dtype=BF16), torch.randn(256, dtype=BF16)
    x0, r0 = x.clone(), r.clone()
    reference.fused_add_rms_norm(x, r, w, 1e-6)
    assert torch.equal(r, (x0.double() + r0.double()).to(BF16))        # one rounding of the exact sum
    torch.testing.assert_close(x.double(), rms_norm64(r, w, 1e-6), rtol=2 ** -7, atol=1e-5)


@pytest.mark.parametrize("m", [1, 37])
def test_backward_reference_is_autograd_of_the_formula(m, seed):
    """rms_norm_backward's fp32 formula against float64 autograd of y = x * rsqrt(mean(x^2) + eps) * w."""
    dy, x, w = torch.randn(m, 200, dtype=BF16), torch.randn(m, 200, dtype=BF16), torch.randn(200, dtype=BF16)
    dx, dw = reference.rms_norm_backward(dy, x, w, 1e-6)
    assert dx.dtype == dw.dtype == BF16 and dx.shape == (m, 200) and dw.shape == (200,)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    rms_norm64(x64, w64, 1e-6).backward(dy.double())
    torch.testing.assert_close(dx.double(), x64.grad, rtol=2 ** -7, atol=1e-3 * x64.grad.abs().max().item())
    torch.testing.assert_close(dw.double(), w64.grad, rtol=2 ** -7, atol=1e-3 * w64.grad.abs().max().item())


# ---- the typed functions through TKREG_FALLBACK=reference ---------------------------------------
def test_calls_and_autograd_route_to_the_reference(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    dy, x, w = torch.randn(5, 264, dtype=FP16), torch.randn(5, 264, dtype=FP16), torch.randn(264, dtype=FP16)
    got = tkreg.ops.rms_norm_backward(dy, x, w, 1e-5)
    want = reference.rms_norm_backward(dy, x, w, 1e-5)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    tkreg.ops.rms_norm(xg, wg, 1e-5).backward(dy)         # rms_norm's backward is rms_norm_backward
    assert torch.equal(xg.grad, want[0]) and torch.equal(wg.grad, want[1])
    r = torch.randn(5, 264, dtype=FP16)
    xr, rr = x.clone(), r.clone()
    reference.fused_add_rms_norm(xr, rr, w)
    out = tkreg.ops.fused_add_rms_norm(x, r, w)
    assert out[0] is x and out[1] is r and torch.equal(x, xr) and torch.equal(r, rr)
