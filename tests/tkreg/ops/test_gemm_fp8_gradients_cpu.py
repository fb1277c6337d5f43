"""FP8 Linear-layer gradients without a GPU: the wgrad reference against the kernel's block-by-block
promotion formula (tight) and the unquantized product (FP8's error), the exact block transpose,
the typed functions' errors before launch, and tkreg.nn.Fp8Linear (reference path) against bf16 /
fp32 torch autograd, main_grad accumulation and torch.compile(fullgraph=True) tracing."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.reference import fp8_gradients as ref
from tkreg.reference import quant as rq
from tkreg.nn.fp8_linear import Fp8Linear

ops = tkreg.ops
BF16 = torch.bfloat16


def rand(*shape, scale=1.0):
    return (torch.randn(*shape) * scale).to(BF16)


def rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def promoted(dq, ds, xq, xs):
    """The kernel's arithmetic: per 128-token block, the fp32 product of the e4m3 codes, then times
    the row's and the column's scale, summed block by block."""
    m = dq.shape[1]
    out = torch.zeros(dq.shape[0], xq.shape[0], dtype=torch.float64)
    for b in range(-(-m // 128)):
        part = dq[:, b * 128:(b + 1) * 128].double() @ xq[:, b * 128:(b + 1) * 128].double().t()
        out += part * ds[b].double()[:, None] * xs[b].double()[None, :]
    return out


@pytest.mark.parametrize("m", [256, 200, 48])
def test_wgrad_reference_vs_promotion_and_fp32(m, seed):
    dy, x = rand(m, 256), rand(m, 384)
    dq, ds = rq.per_channel_quant_fp8_transpose(dy)
    xq, xs = rq.per_channel_quant_fp8_transpose(x)
    assert dq.shape == (256, m) and ds.shape == (-(-m // 128), 256) and xs.shape == (-(-m // 128), 384)
    dw = ref.fp8_gemm_wgrad(dq, ds, xq, xs)
    assert dw.dtype == torch.float32 and dw.shape == (256, 384)
    want = promoted(dq, ds, xq, xs)
    assert rel(dw, want) < 1e-6, f"reference vs block-promotion formula: rel {rel(dw, want):.3e}"
    exact = dy.double().t() @ x.double()
    assert rel(dw, exact) < 6e-2, f"FP8 wgrad vs unquantized fp64: rel {rel(dw, exact):.3e} (e4m3: ~2-4e-2)"
    main = torch.randn(256, 384)
    before = main.clone()
    assert ref.fp8_gemm_wgrad_accumulate(dq, ds, xq, xs, main) is None
    torch.testing.assert_close(main, before + dw, rtol=1e-6, atol=1e-5)


def test_transpose_blocks_is_exact(seed):
    w = rand(384, 256)
    q, s = rq.per_block_quant_fp8(w)
    qt, st = ops.fp8_transpose_blocks(q, s)
    assert qt.shape == (256, 384) and st.shape == (2, 3) and qt.is_contiguous() and st.is_contiguous()
    assert torch.equal(qt.view(torch.uint8), q.t().contiguous().view(torch.uint8))
    assert torch.equal(rq.dequant_blocks(qt, st), rq.dequant_blocks(q, s).t())
    # quantizing w^T directly gives the same blocks (the transposition is the recipe's w^T cast)
    q2, s2 = rq.per_block_quant_fp8(w.t().contiguous())
    assert torch.equal(q2.view(torch.uint8), qt.view(torch.uint8)) and torch.equal(s2, st)


def test_typed_wgrad_routes_to_reference(fallback, seed):
    dq, ds = rq.per_channel_quant_fp8_transpose(rand(64, 128))
    xq, xs = rq.per_channel_quant_fp8_transpose(rand(64, 256))
    dw = ops.fp8_gemm_wgrad(dq, ds, xq, xs)
    assert torch.equal(dw, ref.fp8_gemm_wgrad(dq, ds, xq, xs))
    main = torch.ones(128, 256)
    assert ops.fp8_gemm_wgrad(dq, ds, xq, xs, main_grad=main) is main
    torch.testing.assert_close(main, 1 + dw, rtol=1e-6, atol=1e-5)


def test_bad_input_is_named_before_launch():
    dq, ds = rq.per_channel_quant_fp8_transpose(rand(40, 128))
    xq, xs = rq.per_channel_quant_fp8_transpose(rand(40, 256))
    with pytest.raises(ValueError, match=r"fp8_gemm_wgrad.*M = 40.*multiple of 16"):
        ops.fp8_gemm_wgrad(dq, ds, xq, xs)
    xq2, xs2 = rq.per_channel_quant_fp8_transpose(rand(48, 256))
    with pytest.raises(ValueError, match=r"fp8_gemm_wgrad.*share M"):
        ops.fp8_gemm_wgrad(dq, ds, xq2, xs2)
    with pytest.raises(ValueError, match=r"fp8_gemm_wgrad.*`dy_t` must have 2 dims"):
        ops.fp8_gemm_wgrad(dq[None], ds, xq, xs)
    with pytest.raises(ValueError, match="main_grad.*out="):
        ops.fp8_gemm_wgrad(dq[:, :32], ds[:1], xq[:, :32], xs[:1], main_grad=torch.zeros(128, 256),
                           out=torch.zeros(128, 256))
    q, s = rq.per_block_quant_fp8(rand(256, 128))
    with pytest.raises(TypeError, match="fp8_transpose_blocks.*float8_e4m3fn"):
        ops.fp8_transpose_blocks(q.float(), s)
    with pytest.raises(ValueError, match=r"fp8_transpose_blocks.*`s` has shape"):
        ops.fp8_transpose_blocks(q, s.t())


def _fp8_linear_vs_torch(lin, x, dy, tol=5e-2):
    """Fp8Linear's y, dx, dw against fp32 torch autograd of the same bf16 parameters."""
    xr = x.detach().float().requires_grad_()
    wr = lin.weight.detach().float().requires_grad_()
    yr = xr @ wr.t() + (lin.bias.detach().float() if lin.bias is not None else 0)
    yr.backward(dy.float())
    return yr, xr.grad, wr.grad


@pytest.mark.parametrize("reference_ops", [False, True])
def test_fp8_linear_forward_backward_vs_torch(monkeypatch, reference_ops, seed):
    """Both CPU paths: torch math (no kernel serves) and the kernels' ops run as their references."""
    if reference_ops:
        monkeypatch.setenv("TKREG_FALLBACK", "reference")
    else:
        monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    lin = Fp8Linear(256, 384)
    x = rand(2, 40, 256).requires_grad_()
    dy = rand(2, 40, 384)
    y = lin(x)
    assert y.shape == (2, 40, 384) and y.dtype == BF16
    y.backward(dy)
    yr, dxr, dwr = _fp8_linear_vs_torch(lin, x.reshape(80, 256), dy.reshape(80, 384))
    for name, got, want in (("y", y.reshape(80, 384), yr), ("dx", x.grad.reshape(80, 256), dxr),
                            ("dw", lin.weight.grad, dwr)):
        r = rel(got, want)
        print(f"Fp8Linear {name}: rel {r:.3e} vs fp32 torch autograd")
        assert r < 5e-2, f"Fp8Linear {name}: rel {r:.3e} vs fp32 torch autograd"
    assert lin.weight.grad.dtype == BF16 and lin.bias.grad is not None
    # the backward is exactly the recipe's references
    w = lin.weight.detach()
    assert torch.equal(x.grad.reshape(80, 256), ref.fp8_linear_dgrad(dy.reshape(80, 384), w))
    assert torch.equal(lin.weight.grad, ref.fp8_linear_wgrad(dy.reshape(80, 384), x.detach().reshape(80, 256)).to(BF16))


def test_fp8_linear_adds_into_main_grad(fallback, seed):
    lin = Fp8Linear(128, 256, bias=False)
    lin.weight.main_grad = torch.ones(256, 128)
    x, dy = rand(48, 128).requires_grad_(), rand(48, 256)
    lin(x).backward(dy)
    assert lin.weight.grad is None
    torch.testing.assert_close(lin.weight.main_grad, 1 + ref.fp8_linear_wgrad(dy, x.detach()), rtol=1e-6, atol=1e-5)


def test_fp8_linear_compiles_fullgraph(fallback, seed, compile_matches_eager):
    lin = Fp8Linear(128, 256)
    x = rand(32, 128).requires_grad_()
    compile_matches_eager(lambda x: lin(x).float().square().sum(), (x,), (x, lin.weight, lin.bias))


def test_fp8_linear_bad_input():
    with pytest.raises(ValueError, match="Fp8Linear.*multiples of 128"):
        Fp8Linear(100, 256)
    lin = Fp8Linear(128, 256)
    with pytest.raises(TypeError, match="Fp8Linear.*bfloat16"):
        lin(torch.randn(4, 128))
    with pytest.raises(ValueError, match="Fp8Linear.*K = 128"):
        lin(rand(4, 64))
