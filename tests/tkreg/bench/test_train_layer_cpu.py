"""The training-step bench's layers (CPU, tiny sizes, TKREG_FALLBACK=reference): the tkreg.nn layer
against the bench's own plain-torch layer in fp32 (its correctness check), output and every
gradient, for the dense and the MoE layer; and the bench's parameter names cover every parameter."""
from __future__ import annotations

import pytest
import torch

from tkreg.bench import train_layer as L

DENSE = dict(L.DENSE, hidden=128, heads=2, kv_heads=1, head_dim=64, inter=64)
MOE = dict(L.MOE, hidden=64, experts=8, inter=32, k=2, groups=4, topk_groups=2)


@pytest.fixture(autouse=True)
def _reference(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")


def errors(layer, f32, x):
    torch.manual_seed(1)
    return L.check(torch, layer, f32, dict(layer.named_parameters()), x, torch.randn_like(x))


def test_dense_layer_matches_fp32_torch():
    torch.manual_seed(0)
    layer, f = L.dense_layer(torch, DENSE, 24, device="cpu")
    x = torch.randn(1, 24, DENSE["hidden"]).to(torch.bfloat16)
    err = errors(layer, f, x)
    assert {"output", "grad x", "grad attn.qkv.weight", "grad mlp.down.weight", "grad norm1.weight"} <= set(err)
    assert max(err.values()) < 1e-2, err


def test_moe_layer_matches_fp32_torch():
    torch.manual_seed(0)
    layer, _ = L.moe_layer(torch, MOE, MOE["experts"], device="cpu")
    x = torch.randn(1, 24, MOE["hidden"]).to(torch.bfloat16)
    err = errors(layer, L.torch_moe(torch, MOE, layer.moe, choices=L.recording_choices(layer.moe)), x)
    assert {"grad moe.router", "grad moe.gate_up", "grad moe.down", "grad moe.shared.down.weight"} <= set(err)
    assert max(err.values()) < 1e-2, err


def test_dense_fp8_layer_within_fp8_error():
    torch.manual_seed(0)
    c = dict(DENSE, inter=128)            # Fp8Linear: features in multiples of 128
    layer, f = L.dense_layer(torch, c, 24, device="cpu")
    L.fp8_projections(torch, layer)
    assert sum(type(m).__name__ == "Fp8Linear" for m in layer.modules()) == 4
    x = torch.randn(1, 24, c["hidden"]).to(torch.bfloat16)
    err = errors(layer, f, x)
    assert max(err.values()) < L.ERROR_BARS[L.DENSE_CASE + " FP8"], err
