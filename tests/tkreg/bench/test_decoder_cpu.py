"""The decoder-stack bench's two stacks compute the same model (CPU, the ops' torch references)."""
from __future__ import annotations

import pytest
import torch

from tkreg.bench import decoder

TINY = dict(hidden=256, heads=4, kv_heads=2, head_dim=64, inter=256, eps=1e-6, theta=1e4)


@pytest.fixture(autouse=True)
def _reference(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("b,s,ctx", [(2, 8, 0), (3, 1, 70)])
def test_tkreg_stack_matches_the_torch_stack(b, s, ctx, fp8):
    W = decoder.Weights(torch, 2, TINY, device="cpu")
    torch_args, tkreg_args = decoder.inputs(torch, W, TINY, b, s, ctx, device="cpu")
    ref = decoder.torch_stack(torch, W, TINY)(*torch_args).view(b * s, -1).float()
    out = decoder.tkreg_stack(torch, W, TINY, swiglu=not fp8, fp8=fp8)(*tkreg_args).float()
    err = float((out - ref).norm() / ref.norm())
    print(f"relative error {err:.2e}")
    assert err < (5e-2 if fp8 else 1e-2), err       # bf16 rounding; e4m3 GEMMs (~4% each on random data)
    # both stacks wrote the step's K/V at the same places: the paged cache equals the contiguous one
    kc = torch_args[2]
    kp = tkreg_args[3]
    pages = kp[0].view(b, -1, TINY["kv_heads"], TINY["head_dim"])[:, ctx:ctx + s].float()
    want = kc[0, :, :, ctx:ctx + s].transpose(1, 2).float()
    assert float((pages - want).norm() / want.norm()) < (5e-2 if fp8 else 1e-2)
