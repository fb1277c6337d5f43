"""gemm_dgrad / gemm_wgrad kernels and tkreg.gemm's autograd on the GPU: against fp32 torch at the
training shapes and ragged M / N / K (both classes of dgrad), main_grad accumulation, rotary's
backward, tkreg.nn modules against torch autograd, and a compiled tkreg.nn MLP forward + backward."""
from __future__ import annotations

import pytest
import torch

import tkreg
import tkreg.nn as tnn

pytestmark = pytest.mark.gpu
BF16, FP16 = torch.bfloat16, torch.float16
ops = tkreg.ops
SHAPES = [(4096, 4096, 4096), (8192, 4096, 14336), (4096, 14336, 4096), (1000, 4096, 1024), (77, 200, 72),
          (1, 64, 128), (333, 136, 264), (4100, 1032, 2056)]


def sm90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


needs_sm90 = pytest.mark.skipif(not sm90(), reason="the gradient GEMMs ship for sm_90a only")


def close(got, want, rel):
    """max |got - want| within rel of want's largest magnitude."""
    err = (got.float() - want.float()).abs().max().item()
    assert err <= rel * want.float().abs().max().item(), (err, want.float().abs().max().item())


def rand(*shape, dt=BF16):
    return torch.randn(*shape, device="cuda").to(dt)


@needs_sm90
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_dgrad_vs_fp32(m, n, k, dt, seed):
    dy, w = rand(m, n, dt=dt), rand(n, k, dt=dt)
    got = ops.gemm_dgrad(dy, w)
    assert got.shape == (m, k) and got.dtype == dt
    close(got, dy.float() @ w.float(), 1e-2)


@needs_sm90
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_wgrad_vs_fp32(m, n, k, dt, seed):
    dy, x = rand(m, n, dt=dt), rand(m, k, dt=dt)
    want = dy.float().t() @ x.float()
    got = ops.gemm_wgrad(dy, x)
    assert got.shape == (n, k) and got.dtype == dt
    close(got, want, 1e-2)
    main = torch.randn(n, k, device="cuda")
    start = main.clone()
    assert ops.gemm_wgrad(dy, x, main_grad=main) is main
    close(main - start, want, 1e-4)      # fp32 all the way: only summation order differs


@needs_sm90
def test_wgrad_accumulates_over_micro_batches(seed):
    n, k = 1024, 2048
    main = torch.zeros(n, k, device="cuda")
    want = torch.zeros(n, k, device="cuda")
    for _ in range(3):
        dy, x = rand(4096, n), rand(4096, k)
        ops.gemm_wgrad(dy, x, main_grad=main)
        want += dy.float().t() @ x.float()
    close(main, want, 1e-4)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m, n, k", [(4096, 4096, 4096), (300, 136, 72)])
def test_gemm_autograd_vs_torch(m, n, k, bias, seed):
    """On sm_90a the gradient kernels; elsewhere the torch.matmul fallback."""
    a, b = rand(m, k).requires_grad_(), (rand(n, k) * 0.05).requires_grad_()
    c = rand(n).requires_grad_() if bias else None
    y = ops.gemm(a, b, c)
    dy = rand(m, n)
    y.backward(dy)
    a32, b32 = a.detach().float().requires_grad_(), b.detach().float().requires_grad_()
    c32 = c.detach().float().requires_grad_() if bias else None
    torch.nn.functional.linear(a32, b32, c32).backward(dy.float())
    close(a.grad, a32.grad, 1e-2)
    close(b.grad, b32.grad, 1e-2)
    if bias:
        close(c.grad, c32.grad, 1e-2)


@needs_sm90
def test_gemm_autograd_main_grad(seed):
    a, b = rand(2048, 1024).requires_grad_(), rand(512, 1024).requires_grad_()
    b.main_grad = torch.ones(512, 1024, device="cuda")
    dy = rand(2048, 512)
    ops.gemm(a, b).backward(dy)
    assert b.grad is None
    close(b.main_grad - 1, dy.float().t() @ a.detach().float(), 1e-4)


@pytest.mark.parametrize("is_neox", [True, False])
def test_rotary_backward_is_the_inverse_rotation(is_neox, seed):
    t, hq, hk, d, p = 257, 8, 2, 128, 4096
    theta = torch.rand(p, d // 2, device="cuda") * 6
    cache = torch.cat([theta.cos(), theta.sin()], 1).to(BF16)
    pos = torch.randint(0, p, (t,), device="cuda")
    q0, k0 = rand(t, hq * d).requires_grad_(), rand(t, hk * d).requires_grad_()
    q, k = q0 * 1, k0 * 1
    ops.rotary_embedding(pos, q, k, cache, is_neox)
    dq, dk = rand(t, hq * d), rand(t, hk * d)
    torch.autograd.backward((q, k), (dq, dk))
    from tkreg.reference.rotary import _rotate
    cs = cache.float()[pos]
    c, s = cs[:, None, : d // 2], cs[:, None, d // 2:]
    q32, k32 = q0.detach().float().requires_grad_(), k0.detach().float().requires_grad_()
    torch.autograd.backward([_rotate(x.view(t, -1, d), c, s, is_neox) for x in (q32, k32)],
                            (dq.float().view(t, hq, d), dk.float().view(t, hk, d)))
    close(q0.grad, q32.grad, 1e-2)
    close(k0.grad, k32.grad, 1e-2)


def test_nn_modules_vs_torch(seed):
    h, i, t = 1024, 2816, 2048
    gate, up, down = ((torch.randn(*s, device="cuda") * 0.02).to(BF16) for s in ((i, h), (i, h), (h, i)))
    norm, mlp = tnn.RMSNorm(h, device="cuda"), tnn.SwiGLUMLP.from_weights(gate, up, down)
    x = rand(t, h).requires_grad_()
    y = mlp(norm(x))
    dy = rand(t, h)
    y.backward(dy)
    ws = [w.float().requires_grad_() for w in (gate, up, down)]
    nw, x32 = norm.weight.detach().float().requires_grad_(), x.detach().float().requires_grad_()
    xn = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * nw
    y32 = (torch.nn.functional.silu(xn @ ws[0].t()) * (xn @ ws[1].t())) @ ws[2].t()
    close(y, y32, 1e-2)
    y32.backward(dy.float())
    close(x.grad, x32.grad, 1e-2)
    close(norm.weight.grad, nw.grad, 1e-2)
    close(mlp.gate_up.weight.grad[:i], ws[0].grad, 1e-2)
    close(mlp.gate_up.weight.grad[i:], ws[1].grad, 1e-2)
    close(mlp.down.weight.grad, ws[2].grad, 1e-2)


def test_nn_mlp_compiles_fullgraph_forward_and_backward(seed):
    h, i, t = 1024, 2816, 1024
    mlp = torch.nn.Sequential(tnn.RMSNorm(h, device="cuda"), tnn.SwiGLUMLP(h, i, device="cuda"),
                              tnn.Linear(h, h, device="cuda"))
    for p in mlp.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=0.02)
    x = rand(t, h).requires_grad_()
    dy = rand(t, h)
    compiled = torch.compile(mlp, fullgraph=True)
    compiled(x).backward(dy)
    got = [p.grad.clone() for p in (x, *mlp.parameters())]
    x.grad = None
    mlp.zero_grad(set_to_none=True)
    mlp(x).backward(dy)
    for g, p in zip(got, (x, *mlp.parameters())):
        close(g, p.grad, 1e-3)
