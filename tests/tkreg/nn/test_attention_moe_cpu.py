"""tkreg.nn.Attention and tkreg.nn.MoE without a GPU (TKREG_FALLBACK=reference): outputs and every
parameter gradient against the fp32 torch oracles of conftest.py, torch.compile(fullgraph=True)
forward and backward, and bad configurations named."""
from __future__ import annotations

import functools

import pytest
import torch

import tkreg.nn as tnn

BF16 = torch.bfloat16
pytestmark = pytest.mark.usefixtures("fallback")


@pytest.fixture
def close(close):
    """conftest's `close` at these layers' bar, 2e-2."""
    return functools.partial(close, rel=2e-2)


def fp32(*ps):
    return [p.detach().float().requires_grad_() for p in ps]


@pytest.mark.parametrize("heads,kv,causal", [(4, 2, True), (2, 2, False)])
def test_attention_matches_torch(heads, kv, causal, seed, torch_layers, close):
    att = tnn.Attention(128, heads, kv, 64, causal=causal, max_positions=64)
    x = (torch.randn(2, 9, 128) * 0.5).to(BF16).requires_grad_()
    y = att(x)
    assert y.shape == x.shape and y.dtype == BF16
    dy = torch.randn_like(y)
    y.backward(dy)
    x32, wqkv, wo = fp32(x, att.qkv.weight, att.o.weight)
    want = torch_layers.attention(att, x32, wqkv, wo)
    close(y, want)
    want.backward(dy.float())
    close(x.grad, x32.grad)
    close(att.qkv.weight.grad, wqkv.grad)
    close(att.o.weight.grad, wo.grad)


def test_attention_one_sequence_and_compile(seed, compile_matches_eager):
    att = tnn.Attention(128, 2, 1, 64, max_positions=32)
    x = (torch.randn(5, 128) * 0.5).to(BF16).requires_grad_()
    compile_matches_eager(att, (x,), (x, *att.parameters()))


def test_attention_rejects_bad_config():
    with pytest.raises(ValueError, match="num_heads=6 is not a multiple of num_kv_heads=4"):
        tnn.Attention(384, 6, 4, 64)
    with pytest.raises(ValueError, match="head_dim=96"):
        tnn.Attention(384, 4, 4, 96)


@pytest.mark.parametrize("groups,shared", [(None, 0), ((4, 2), 16)])
def test_moe_matches_torch(groups, shared, seed, torch_layers, close):
    kw = dict(n_groups=groups[0], topk_groups=groups[1], scoring="sigmoid") if groups else {}
    moe = tnn.MoE(32, 16, 8, 2, shared_intermediate=shared, **kw)
    x = torch.randn(3, 7, 32).to(BF16).requires_grad_()
    y = moe(x)
    assert y.shape == x.shape
    dy = torch.randn_like(y)
    y.backward(dy)
    idx, _ = moe.route(x.detach().view(-1, 32))
    x32, router, gu, dn = fp32(x, moe.router, moe.gate_up, moe.down)
    sh = fp32(moe.shared.gate_up.weight, moe.shared.down.weight) if shared else None
    want = torch_layers.moe(moe, x32.view(-1, 32), idx, router, gu, dn, sh)
    close(y.view(-1, 32), want)
    want.backward(dy.float().view(-1, 32))
    close(x.grad, x32.grad)
    for got, ref in ((moe.router, router), (moe.gate_up, gu), (moe.down, dn)):
        close(got.grad, ref.grad)
    if shared:
        close(moe.shared.gate_up.weight.grad, sh[0].grad)
        close(moe.shared.down.weight.grad, sh[1].grad)


def test_moe_compiles_fullgraph(seed, compile_matches_eager):
    moe = tnn.MoE(32, 16, 4, 2)
    x = torch.randn(6, 32).to(BF16).requires_grad_()
    compile_matches_eager(moe, (x,), (x, *moe.parameters()))


def test_moe_rejects_bad_config():
    with pytest.raises(ValueError, match="scoring='relu'"):
        tnn.MoE(32, 16, 4, 2, scoring="relu")
    with pytest.raises(ValueError, match="n_groups and topk_groups"):
        tnn.MoE(32, 16, 4, 2, n_groups=2)
