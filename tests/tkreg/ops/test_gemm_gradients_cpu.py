"""gemm_dgrad / gemm_wgrad, tkreg.gemm's autograd and rotary_embedding's backward without a GPU:
the references against float64 formulas, the reference fallback, the autograd against torch
autograd in float64 at tiny sizes (and bit for bit against the references it calls), the main_grad
path, torch.compile(fullgraph=True) tracing forward and backward, and bad input named."""
from __future__ import annotations

import importlib

import pytest
import torch

import tkreg
from tkreg.reference.rotary import _rotate

ref = importlib.import_module("tkreg.reference.gemm")   # the module (tkreg.reference.gemm is also a function)

BF16, FP16 = torch.bfloat16, torch.float16
ops = tkreg.ops


def rand(*shape, dt=BF16, scale=1.0):
    return (torch.randn(*shape) * scale).to(dt)


@pytest.mark.parametrize("dt", [BF16, FP16])
def test_references_vs_float64(dt, seed):
    dy, w, x = rand(9, 24, dt=dt), rand(24, 40, dt=dt), rand(9, 40, dt=dt)
    dx, dw = ref.gemm_dgrad(dy, w), ref.gemm_wgrad(dy, x)
    assert dx.dtype == dw.dtype == dt and dx.shape == (9, 40) and dw.shape == (24, 40)
    torch.testing.assert_close(dx.double(), dy.double() @ w.double(), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(dw.double(), dy.double().t() @ x.double(), rtol=1e-2, atol=1e-2)
    main = torch.randn(24, 40)
    want = main.double() + dy.double().t() @ x.double()
    assert ref.gemm_wgrad_accumulate(dy, x, main) is None
    torch.testing.assert_close(main.double(), want, rtol=1e-5, atol=1e-5)


def test_typed_functions_route_to_the_references(fallback, seed):
    dy, w, x = rand(5, 16), rand(16, 24), rand(5, 24)
    assert torch.equal(ops.gemm_dgrad(dy, w), ref.gemm_dgrad(dy, w))
    assert torch.equal(ops.gemm_wgrad(dy, x), ref.gemm_wgrad(dy, x))
    main = torch.zeros(16, 24)
    assert ops.gemm_wgrad(dy, x, main_grad=main) is main
    torch.testing.assert_close(main, dy.float().t() @ x.float(), rtol=1e-6, atol=1e-6)
    out = torch.empty(5, 24, dtype=BF16)
    assert ops.gemm_dgrad(dy, w, out=out) is out and torch.equal(out, ref.gemm_dgrad(dy, w))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dt", [BF16, FP16])
def test_gemm_autograd_vs_float64_torch(fallback, dt, bias, seed):
    a, b = rand(6, 16, dt=dt).requires_grad_(), rand(24, 16, dt=dt).requires_grad_()
    c = rand(24, dt=dt).requires_grad_() if bias else None
    dy = rand(6, 24, dt=dt)
    y = ops.gemm(a, b, c)
    assert y.requires_grad
    y.backward(dy)
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    c64 = c.detach().double().requires_grad_() if bias else None
    y64 = a64 @ b64.t() + (c64 if bias else 0)
    y64.backward(dy.double())
    for got, want in ((a.grad, a64.grad), (b.grad, b64.grad)) + (((c.grad, c64.grad),) if bias else ()):
        assert got.dtype == dt
        torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-2)
    # the backward is exactly the gradient ops (their references here)
    assert torch.equal(a.grad, ref.gemm_dgrad(dy, b.detach()))
    assert torch.equal(b.grad, ref.gemm_wgrad(dy, a.detach()))


def test_gemm_autograd_only_what_is_needed(fallback, seed):
    a, b = rand(4, 8).requires_grad_(), rand(16, 8)
    ops.gemm(a, b).sum().backward()
    assert a.grad is not None and b.grad is None


def test_gemm_autograd_adds_into_main_grad(fallback, seed):
    a, b = rand(6, 16).requires_grad_(), rand(24, 16).requires_grad_()
    b.main_grad = torch.ones(24, 16)
    dy = rand(6, 24)
    ops.gemm(a, b).backward(dy)
    assert b.grad is None
    torch.testing.assert_close(b.main_grad, 1 + dy.float().t() @ a.detach().float(), rtol=1e-6, atol=1e-6)


def test_gemm_autograd_falls_back_to_torch_without_kernels(monkeypatch, seed):
    """No kernel serves the CPU without TKREG_FALLBACK: the backward runs torch.matmul, same transposes."""
    from tkreg.ops.gemm import GemmGrad

    class Ctx:
        needs_input_grad = (True, True, True)

        def save_for_backward(self, *ts):
            self.saved_tensors = ts
    a, b, dy = rand(5, 8), rand(16, 8), rand(5, 16)
    ctx = Ctx()
    GemmGrad.setup_context(ctx, (a, b, None), None)
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    da, db, dbias = GemmGrad.backward(ctx, dy)
    assert torch.equal(da, torch.matmul(dy, b)) and torch.equal(db, torch.matmul(dy.t(), a)) and dbias is None


def test_gemm_autograd_compiles_fullgraph(fallback, seed, compile_matches_eager):
    a, b = rand(6, 16).requires_grad_(), rand(24, 16).requires_grad_()
    c = rand(24).requires_grad_()
    compile_matches_eager(lambda a, b, c: ops.silu_and_mul(ops.gemm(a, b, c)).float().sum(), (a, b, c))


@pytest.mark.parametrize("is_neox", [True, False])
def test_rotary_backward_vs_float64_torch(fallback, is_neox, seed):
    t, hq, hk, d, p = 5, 2, 1, 64, 16
    cache = torch.cat([torch.cos(torch.rand(p, d // 2) * 6), torch.sin(torch.rand(p, d // 2) * 6)], 1).to(BF16)
    cos, sin = cache[:, : d // 2].float(), cache[:, d // 2:].float()
    cache = torch.cat([cos, sin], 1).to(BF16)
    pos = torch.randint(0, p, (t,))
    q0, k0 = rand(t, hq * d).requires_grad_(), rand(t, hk * d).requires_grad_()
    q, k = q0 * 1, k0 * 1                    # non-leaf: rotated in place
    qr, kr = ops.rotary_embedding(pos, q, k, cache, is_neox)
    assert qr is q and kr is k
    dq, dk = rand(t, hq * d), rand(t, hk * d)
    torch.autograd.backward((q, k), (dq, dk))
    c64, s64 = cache.double()[pos, None, : d // 2], cache.double()[pos, None, d // 2:]
    q64, k64 = q0.detach().double().requires_grad_(), k0.detach().double().requires_grad_()
    outs = [_rotate(x.view(t, -1, d), c64, s64, is_neox) for x in (q64, k64)]
    torch.autograd.backward(outs, (dq.double().view(t, hq, d), dk.double().view(t, hk, d)))
    torch.testing.assert_close(q0.grad.double(), q64.grad, rtol=1e-2, atol=2e-2)
    torch.testing.assert_close(k0.grad.double(), k64.grad, rtol=1e-2, atol=2e-2)


def test_rotary_autograd_compiles_fullgraph(fallback, seed, compile_matches_eager):
    t, d, p = 5, 64, 16
    cache, pos = torch.randn(p, d).to(BF16), torch.randint(0, p, (t,))

    def f(q0, k0):
        q, k = q0 * 1, k0 * 1
        ops.rotary_embedding(pos, q, k, cache, True)
        return (q.float() ** 2).sum() + k.float().sum()
    compile_matches_eager(f, (rand(t, 2 * d).requires_grad_(), rand(t, d).requires_grad_()))


def test_rotary_inverse_cache_built_once(seed):
    from tkreg.ops.rotary import inverse_cache
    cache = torch.randn(8, 64).to(BF16)
    inv = inverse_cache(cache)
    assert inv is inverse_cache(cache)
    assert torch.equal(inv[:, :32], cache[:, :32]) and torch.equal(inv[:, 32:], -cache[:, 32:])
    cache.mul_(2)                            # a changed cache gets a new inverse
    assert torch.equal(inverse_cache(cache)[:, 32:], -cache[:, 32:])


@pytest.mark.parametrize("make, err, msg", [
    (lambda: ops.gemm_dgrad(rand(4, 16), rand(16, 24, dt=FP16)), TypeError, "`w` has dtype torch.float16; expected torch.bfloat16"),
    (lambda: ops.gemm_dgrad(rand(4, 16), rand(8, 24)), ValueError, r"`w` has shape \(8, 24\); expected \(16, 24\)"),
    (lambda: ops.gemm_dgrad(rand(16, 4).t(), rand(16, 24)), ValueError, "tkreg.gemm_dgrad.*`dy`.*contiguous"),
    (lambda: ops.gemm_wgrad(rand(4, 16), rand(5, 24)), ValueError, r"`x` has shape \(5, 24\); expected \(4, 24\)"),
    (lambda: ops.gemm_wgrad(rand(4, 16, dt=torch.float32), rand(4, 24)), TypeError, "`dy` has dtype torch.float32"),
    (lambda: ops.gemm_wgrad(rand(4, 16), rand(4, 24), main_grad=torch.zeros(16, 24, dtype=BF16)), TypeError,
     "tkreg.gemm_wgrad_accumulate.*`main_grad` has dtype torch.bfloat16; expected torch.float32"),
    (lambda: ops.gemm_wgrad(rand(4, 16), rand(4, 24), main_grad=torch.zeros(24, 16)), ValueError,
     r"tkreg.gemm_wgrad_accumulate.*`main_grad` has shape \(24, 16\); expected \(16, 24\)"),
    (lambda: ops.gemm_wgrad(rand(4, 16), rand(4, 24), main_grad=torch.zeros(16, 24), out=rand(16, 24)), ValueError,
     "tkreg.gemm_wgrad: give `main_grad`"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_arguments_are_named(make, err, msg, fallback):
    with pytest.raises(err, match=msg):
        make()
