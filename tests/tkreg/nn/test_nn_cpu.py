"""tkreg.nn without a GPU (TKREG_FALLBACK=reference): each module's output and parameter gradients
against the same module written in plain torch (fp32 math on the same bf16 weights), and the
SwiGLU MLP compiled with torch.compile(fullgraph=True), forward and backward."""
from __future__ import annotations

import pytest
import torch

import tkreg.nn as tnn

BF16 = torch.bfloat16
pytestmark = pytest.mark.usefixtures("fallback")


def torch_mlp(x, gate, up, down):
    g, u = x.float() @ gate.float().t(), x.float() @ up.float().t()
    return (torch.nn.functional.silu(g) * u) @ down.float().t()


@pytest.mark.parametrize("bias", [False, True])
def test_linear_matches_torch(bias, seed, close):
    lin = tnn.Linear(32, 48, bias=bias)
    x = torch.randn(2, 3, 32).to(BF16).requires_grad_()
    y = lin(x)
    assert y.shape == (2, 3, 48) and y.dtype == BF16
    dy = torch.randn_like(y)
    y.backward(dy)
    w = lin.weight.detach().float().requires_grad_()
    b = lin.bias.detach().float().requires_grad_() if bias else None
    x32 = x.detach().float().requires_grad_()
    torch.nn.functional.linear(x32, w, b).backward(dy.float())
    close(x.grad, x32.grad)
    close(lin.weight.grad, w.grad)
    if bias:
        close(lin.bias.grad, b.grad)


def test_linear_main_grad(seed, close):
    lin = tnn.Linear(16, 24, bias=False)
    lin.weight.main_grad = torch.zeros(24, 16)
    x = torch.randn(5, 16).to(BF16)
    lin(x).float().sum().backward()
    assert lin.weight.grad is None
    close(lin.weight.main_grad, torch.ones(5, 24).t() @ x.float())


def test_rms_norm_matches_torch(seed, close):
    norm = tnn.RMSNorm(64, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(64) + 0.5)
    x = torch.randn(3, 4, 64).to(BF16).requires_grad_()
    y = norm(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    x32, w32 = x.detach().float().requires_grad_(), norm.weight.detach().float().requires_grad_()
    (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5) * w32).backward(dy.float())
    close(x.grad, x32.grad)
    close(norm.weight.grad, w32.grad)


def test_swiglu_mlp_matches_torch(seed, close):
    h, i = 32, 48
    gate, up, down = ((torch.randn(*s) * 0.2).to(BF16) for s in ((i, h), (i, h), (h, i)))
    mlp = tnn.SwiGLUMLP.from_weights(gate, up, down)
    x = torch.randn(7, h).to(BF16).requires_grad_()
    y = mlp(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    ws = [w.float().requires_grad_() for w in (gate, up, down)]
    x32 = x.detach().float().requires_grad_()
    want = torch_mlp(x32, *ws)
    close(y, want)
    want.backward(dy.float())
    close(x.grad, x32.grad)
    gu = mlp.gate_up.weight.grad
    close(gu[:i], ws[0].grad)
    close(gu[i:], ws[1].grad)
    close(mlp.down.weight.grad, ws[2].grad)


def test_swiglu_mlp_compiles_fullgraph(seed, compile_matches_eager):
    mlp = tnn.SwiGLUMLP(32, 48)
    x = torch.randn(6, 32).to(BF16).requires_grad_()
    compile_matches_eager(mlp, (x,), (x, *mlp.parameters()))
