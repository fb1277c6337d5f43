"""tkreg.nn.Attention and tkreg.nn.MoE on the GPU (the kernels: flash attention forward and
backward, rotary, the grouped GEMMs and their gradients, expand/combine): outputs and every
parameter gradient against the fp32 torch oracles of conftest.py, eager and compiled."""
from __future__ import annotations

import pytest
import torch

import tkreg.nn as tnn

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


def rel(got, want) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30))


def fp32(*ps):
    return [p.detach().float().requires_grad_() for p in ps]


@pytest.mark.parametrize("heads,kv,d,compiled", [(8, 2, 128, False), (4, 4, 64, False), (8, 2, 128, True)])
def test_attention_matches_fp32(heads, kv, d, compiled, seed, torch_layers):
    att = tnn.Attention(heads * d, heads, kv, d, max_positions=512, device="cuda")
    x = (torch.randn(2, 300, heads * d, device="cuda") * 0.5).to(BF16).requires_grad_()
    f = torch.compile(att, fullgraph=True) if compiled else att
    y = f(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    x32, wqkv, wo = fp32(x, att.qkv.weight, att.o.weight)
    want = torch_layers.attention(att, x32, wqkv, wo)
    want.backward(dy.float())
    errs = {"out": rel(y, want), "dx": rel(x.grad, x32.grad), "dqkv": rel(att.qkv.weight.grad, wqkv.grad),
            "do": rel(att.o.weight.grad, wo.grad)}
    assert max(errs.values()) < 1e-2, errs


@pytest.mark.parametrize("compiled", [False, True])
def test_moe_matches_fp32(compiled, seed, torch_layers):
    moe = tnn.MoE(256, 128, 16, 4, scoring="sigmoid", n_groups=4, topk_groups=2, routed_scaling_factor=2.5,
                  shared_intermediate=128, device="cuda")
    x = torch.randn(333, 256, device="cuda").to(BF16).requires_grad_()
    f = torch.compile(moe, fullgraph=True) if compiled else moe
    y = f(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    with torch.no_grad():
        idx = moe.route(x)[0]        # the module's choices (deterministic kernels)
    x32, router, gu, dn, sgu, sdn = fp32(x, moe.router, moe.gate_up, moe.down, moe.shared.gate_up.weight,
                                         moe.shared.down.weight)
    want = torch_layers.moe(moe, x32, idx, router, gu, dn, (sgu, sdn))
    want.backward(dy.float())
    errs = {"out": rel(y, want), "dx": rel(x.grad, x32.grad), "router": rel(moe.router.grad, router.grad),
            "gate_up": rel(moe.gate_up.grad, gu.grad), "down": rel(moe.down.grad, dn.grad),
            "shared": rel(moe.shared.down.weight.grad, sdn.grad)}
    assert max(errs.values()) < 1e-2, errs
