"""FP8 Linear-layer gradients on the GPU (DeepSeek-V3's recipe): tkreg.fp8_gemm_wgrad against the
dequantized fp32 reference (tight) and the unquantized product (FP8's error) at training and ragged
shapes, accumulation into main_grad in place, the dgrad through fp8_gemm on the exactly transposed
weight blocks, and tkreg.nn.Fp8Linear forward + backward (eager and torch.compile fullgraph)
against fp32 torch autograd."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.reference import fp8_gradients as ref
from tkreg.nn.fp8_linear import Fp8Linear

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
ops = tkreg.ops
# (M tokens, N out, K in): training shapes, M not a multiple of 128, N / K not multiples of 128, tiny
SHAPES = [(4096, 4096, 4096), (8192, 4096, 14336), (4096, 14336, 4096), (1040, 1024, 2048), (208, 200, 72),
          (16, 136, 264), (4112, 1032, 2056)]


def sm90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


needs_sm90 = pytest.mark.skipif(not sm90(), reason="tkreg.fp8_gemm_wgrad ships for sm_90a only")


def rel(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def maxerr(got, want) -> str:
    d = (got.double() - want.double()).abs()
    i = int(d.argmax())
    return (f"max |diff| {d.max().item():.4e} at {divmod(i, got.shape[-1])}: got {got.flatten()[i].item():.6e} "
            f"want {want.flatten()[i].item():.6e}; max |want| {want.abs().max().item():.4e}")


def casts(m, n, k):
    dy, x = torch.randn(m, n, device="cuda").to(BF16), torch.randn(m, k, device="cuda").to(BF16)
    dq, ds = ops.per_channel_quant_fp8(dy, transpose=True)
    xq, xs = ops.per_channel_quant_fp8(x, transpose=True)
    return dy, x, dq, ds, xq, xs


@needs_sm90
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_wgrad_vs_dequantized_reference(m, n, k, seed):
    dy, x, dq, ds, xq, xs = casts(m, n, k)
    got = ops.fp8_gemm_wgrad(dq, ds, xq, xs)
    assert got.shape == (n, k) and got.dtype == torch.float32
    want = ref.fp8_gemm_wgrad(dq, ds, xq, xs)    # fp32 matmul of the dequantized operands
    r = rel(got, want)
    # WGMMA's fp8 chain of one 128-token block rounds its fp32 sums (the forward's 2xAcc note): ~1e-4
    assert r < 1e-3, f"M={m} N={n} K={k}: rel {r:.3e} vs dequantized fp32; {maxerr(got, want)}"
    exact = dy.float().t() @ x.float()
    r = rel(got, exact)
    assert r < 6e-2, f"M={m} N={n} K={k}: rel {r:.3e} vs the unquantized fp32 product (e4m3: ~3e-2 expected)"


@needs_sm90
@pytest.mark.parametrize("m, n, k", [(4096, 4096, 4096), (208, 200, 72), (4112, 1032, 2056)])
def test_wgrad_accumulates_in_place(m, n, k, seed):
    _, _, dq, ds, xq, xs = casts(m, n, k)
    main = torch.randn(n, k, device="cuda") * 100
    before, ptr = main.clone(), main.data_ptr()
    assert ops.fp8_gemm_wgrad(dq, ds, xq, xs, main_grad=main) is main and main.data_ptr() == ptr
    prod = ref.fp8_gemm_wgrad(dq, ds, xq, xs)
    r = rel(main - before, prod)
    assert r < 1e-3, f"main_grad += (M={m} N={n} K={k}): rel {r:.3e}; {maxerr(main, before + prod)}"
    # a second call adds again (nothing overwritten)
    ops.fp8_gemm_wgrad(dq, ds, xq, xs, main_grad=main)
    r = rel(main - before, 2 * prod)
    assert r < 1e-3, f"second main_grad += : rel {r:.3e}; {maxerr(main, before + 2 * prod)}"


@needs_sm90
def test_wgrad_is_deterministic(seed):
    _, _, dq, ds, xq, xs = casts(4096, 4096, 4096)
    a = ops.fp8_gemm_wgrad(dq, ds, xq, xs)
    assert torch.equal(a, ops.fp8_gemm_wgrad(dq, ds, xq, xs))


@pytest.mark.parametrize("m, n, k", [(4096, 4096, 4096), (8192, 4096, 14336), (1000, 1024, 2048), (64, 256, 128)])
def test_dgrad_on_transposed_blocks(m, n, k, seed):
    """dx = dy @ w: dy 1x128 along N, w^T's blocks from fp8_transpose_blocks, the shipped fp8_gemm."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] not in (9, 10):
        pytest.skip("fp8_gemm ships for sm_90a / sm_100a")
    dy, w = torch.randn(m, n, device="cuda").to(BF16), torch.randn(n, k, device="cuda").to(BF16)
    wq, ws = ops.per_block_quant_fp8(w)
    wt, wst = ops.fp8_transpose_blocks(wq, ws)
    assert torch.equal(wt.view(torch.uint8).cpu(), wq.t().contiguous().view(torch.uint8).cpu())
    assert torch.equal(wst, ws.t().contiguous())
    dq, ds = ops.per_token_group_quant_fp8(dy)
    got = ops.fp8_gemm(dq, ds, wt, wst)
    assert got.shape == (m, k) and got.dtype == BF16
    want = ref.fp8_linear_dgrad(dy, w)
    r = rel(got, want)
    assert r < 5e-3, f"dgrad M={m} N={n} K={k}: rel {r:.3e} vs dequantized fp32 (bf16 out); {maxerr(got, want)}"
    r = rel(got, dy.float() @ w.float())
    assert r < 6e-2, f"dgrad M={m} N={n} K={k}: rel {r:.3e} vs the unquantized product"


def _torch_grads(lin, x, dy):
    xr, wr = x.detach().float().requires_grad_(), lin.weight.detach().float().requires_grad_()
    yr = xr @ wr.t() + lin.bias.detach().float()
    yr.backward(dy.float())
    return yr, xr.grad, wr.grad


@needs_sm90
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("m, k, n", [(4096, 4096, 4096), (1000, 1024, 2048), (40, 256, 384)])
def test_fp8_linear_vs_torch_autograd(m, k, n, compiled, seed):
    lin = Fp8Linear(k, n, device="cuda")
    x = torch.randn(m, k, device="cuda").to(BF16).requires_grad_()
    dy = torch.randn(m, n, device="cuda").to(BF16)
    f = torch.compile(lin, fullgraph=True) if compiled else lin
    y = f(x)
    y.backward(dy)
    yr, dxr, dwr = _torch_grads(lin, x, dy)
    for name, got, want in (("y", y, yr), ("dx", x.grad, dxr), ("dw", lin.weight.grad, dwr)):
        r = rel(got, want)
        assert r < 5e-2, f"Fp8Linear {name} (M={m} K={k} N={n}, compiled={compiled}): rel {r:.3e} vs fp32 autograd"
    # the kernels' backward against the recipe's torch path (the same casts, fp32 products)
    w = lin.weight.detach()
    r = rel(x.grad, ref.fp8_linear_dgrad(dy, w))
    assert r < 5e-3, f"Fp8Linear dx vs the recipe's reference: rel {r:.3e}"
    r = rel(lin.weight.grad, ref.fp8_linear_wgrad(dy, x.detach()))
    assert r < 5e-3, f"Fp8Linear dw vs the recipe's reference: rel {r:.3e}"


@needs_sm90
def test_fp8_linear_main_grad(seed):
    lin = Fp8Linear(1024, 2048, bias=False, device="cuda")
    lin.weight.main_grad = torch.ones(2048, 1024, device="cuda")
    x, dy = torch.randn(1000, 1024, device="cuda").to(BF16), torch.randn(1000, 2048, device="cuda").to(BF16)
    lin(x).backward(dy)   # M = 1000: padded to 1008 tokens for the kernel
    assert lin.weight.grad is None
    want = ref.fp8_linear_wgrad(dy, x)
    r = rel(lin.weight.main_grad - 1, want)
    assert r < 1e-3, f"Fp8Linear main_grad: rel {r:.3e}; {maxerr(lin.weight.main_grad, 1 + want)}"
