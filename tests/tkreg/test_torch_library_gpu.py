"""torch.compile, opcheck, autograd and CUDA graphs with the real kernels."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
HAS_SWIGLU = "tkreg.silu_and_mul" in {o["op"] for o in tkreg.list_ops()}


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


class Attention(torch.nn.Module):
    """rms_norm -> gemm (qkv) -> rotary (in place) -> SDPA -> gemm: the attention half of a block."""

    def __init__(self, d=2048, heads=16, kv_heads=4, head_dim=128):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, head_dim
        self.norm = torch.nn.Parameter(torch.randn(d, dtype=BF16))
        self.qkv = torch.nn.Parameter(torch.randn((heads + 2 * kv_heads) * head_dim, d, dtype=BF16) / d ** 0.5)
        self.o = torch.nn.Parameter(torch.randn(d, heads * head_dim, dtype=BF16) / d ** 0.5)
        t = torch.arange(4096, dtype=torch.float32)[:, None] / 10000 ** (torch.arange(0, head_dim, 2) / head_dim)
        self.register_buffer("cache", torch.cat([t.cos(), t.sin()], dim=-1).to(BF16))

    def forward(self, x, positions):
        qkv = tkreg.ops.gemm(tkreg.ops.rms_norm(x, self.norm), self.qkv)
        q, k, v = qkv.split([self.h * self.hd, self.kv * self.hd, self.kv * self.hd], dim=-1)
        q, k = q.contiguous(), k.contiguous()
        tkreg.ops.rotary_embedding(positions, q, k, self.cache)
        t = x.shape[0]
        a = torch.nn.functional.scaled_dot_product_attention(
            q.view(t, self.h, self.hd).transpose(0, 1), k.view(t, self.kv, self.hd).transpose(0, 1),
            v.contiguous().view(t, self.kv, self.hd).transpose(0, 1), is_causal=True, enable_gqa=True)
        return x + tkreg.ops.gemm(a.transpose(0, 1).reshape(t, -1).contiguous(), self.o)


@pytest.mark.parametrize("tokens", [1, 77, 512])
def test_compiled_attention_with_rotary_matches_eager(tokens, seed):
    att = Attention().cuda()
    x = torch.randn(tokens, 2048, dtype=BF16, device="cuda")
    pos = torch.arange(tokens, device="cuda")
    with torch.no_grad():
        eager = att(x, pos)
        compiled = torch.compile(att, fullgraph=True)(x, pos)
    assert rel_err(compiled, eager) < 1e-2


class Block(torch.nn.Module):
    """rms_norm -> gemm (gate|up) -> SwiGLU -> gemm, with a residual: a transformer MLP."""

    def __init__(self, d=2048, i=4096):
        super().__init__()
        self.norm = torch.nn.Parameter(torch.randn(d, dtype=BF16))
        self.up = torch.nn.Parameter(torch.randn(2 * i, d, dtype=BF16) / d ** 0.5)
        self.down = torch.nn.Parameter(torch.randn(d, i, dtype=BF16) / i ** 0.5)

    def forward(self, x):
        h = tkreg.ops.rms_norm(x, self.norm)
        gu = tkreg.ops.gemm(h, self.up)
        if HAS_SWIGLU:
            a = tkreg.ops.silu_and_mul(gu)
        else:
            g, u = gu.chunk(2, dim=-1)
            a = (torch.nn.functional.silu(g.float()) * u.float()).to(BF16)
        return x + tkreg.ops.gemm(a.contiguous(), self.down)


@pytest.mark.parametrize("tokens", [1, 77, 512])
def test_compiled_block_matches_eager(tokens, seed):
    blk = Block().cuda()
    x = torch.randn(tokens, 2048, dtype=BF16, device="cuda")
    with torch.no_grad():
        eager = blk(x)
        compiled = torch.compile(blk, fullgraph=True)(x)
    assert rel_err(compiled, eager) < 1e-2


@pytest.mark.parametrize("op, make", [
    ("rms_norm", lambda: (torch.randn(33, 4096, dtype=BF16, device="cuda"), torch.randn(4096, dtype=BF16, device="cuda"), 1e-6)),
    ("gemm", lambda: (torch.randn(33, 256, dtype=BF16, device="cuda"), torch.randn(128, 256, dtype=BF16, device="cuda"))),
    ("fused_add_rms_norm", lambda: (torch.randn(9, 2048, dtype=BF16, device="cuda"), torch.randn(9, 2048, dtype=BF16, device="cuda"),
                                    torch.randn(2048, dtype=BF16, device="cuda"), 1e-6)),
    ("rms_norm_backward", lambda: (torch.randn(40, 1024, dtype=BF16, device="cuda"), torch.randn(40, 1024, dtype=BF16, device="cuda"),
                                   torch.randn(1024, dtype=BF16, device="cuda"), 1e-6)),
])
def test_opcheck_on_gpu(op, make):
    tkreg.register_torch_ops()
    torch.library.opcheck(getattr(torch.ops.tkreg, op).default, make())


def test_training_step_gradients(seed):
    x = torch.randn(64, 4096, dtype=BF16, device="cuda", requires_grad=True)
    w = torch.randn(4096, dtype=BF16, device="cuda", requires_grad=True)
    g = torch.randn(64, 4096, dtype=BF16, device="cuda")
    tkreg.ops.rms_norm(x, w).backward(g)
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    (reference.rms_norm(xr, wr) * g.float()).sum().backward()
    assert rel_err(x.grad, xr.grad) < 2e-2 and rel_err(w.grad, wr.grad) < 2e-2


@pytest.mark.parametrize("n", [256, 14336, 1002])
def test_silu_and_mul_backward_kernel(n, seed):
    x = torch.randn(333, n, dtype=BF16, device="cuda")
    dy = torch.randn(333, n // 2, dtype=BF16, device="cuda")
    got = tkreg.ops.silu_and_mul_backward(dy, x)
    assert rel_err(got, reference.silu_and_mul_backward(dy, x)) < 1e-2
    xr = x.float().requires_grad_()
    g, u = xr.chunk(2, dim=-1)
    (torch.nn.functional.silu(g) * u * dy.float()).sum().backward()
    assert rel_err(got, xr.grad) < 1e-2


def test_mlp_training_step_through_both_backward_kernels(seed):
    x = torch.randn(64, 2048, dtype=BF16, device="cuda", requires_grad=True)
    w = torch.randn(2048, dtype=BF16, device="cuda", requires_grad=True)
    up = torch.randn(2 * 1024, 2048, dtype=BF16, device="cuda") / 45

    def f(x, w):
        return tkreg.ops.silu_and_mul(torch.matmul(tkreg.ops.rms_norm(x, w), up.t())).float().square().mean()
    torch.compile(f, fullgraph=True)(x, w).backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    h = reference.rms_norm(xr, wr) @ up.float().t()
    g, u = h.chunk(2, dim=-1)
    (torch.nn.functional.silu(g) * u).square().mean().backward()
    assert rel_err(gx, xr.grad) < 3e-2 and rel_err(gw, wr.grad) < 3e-2


def test_compiled_training_step(seed):
    def loss(x, w):
        return tkreg.ops.rms_norm(x, w).float().square().mean()
    x = torch.randn(32, 2048, dtype=BF16, device="cuda", requires_grad=True)
    w = torch.randn(2048, dtype=BF16, device="cuda", requires_grad=True)
    torch.compile(loss, fullgraph=True)(x, w).backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    loss(x, w).backward()
    assert rel_err(gx, x.grad) < 1e-2 and rel_err(gw, w.grad) < 1e-2


def test_cuda_graph_of_a_sequence_equals_eager(seed):
    x = torch.randn(16, 4096, dtype=BF16, device="cuda")
    r = torch.randn(16, 4096, dtype=BF16, device="cuda")
    w = torch.randn(4096, dtype=BF16, device="cuda")
    b = torch.randn(512, 4096, dtype=BF16, device="cuda")

    def seq(x, r):
        tkreg.ops.fused_add_rms_norm(x, r, w)
        return tkreg.ops.gemm(tkreg.ops.rms_norm(x, w), b)

    x0, r0 = x.clone(), r.clone()
    want = seq(x0.clone(), r0.clone())
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        seq(x.clone(), r.clone())
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = seq(x, r)
    x.copy_(x0)
    r.copy_(r0)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, want, rtol=0, atol=0)
