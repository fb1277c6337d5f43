"""silu_and_mul / swiglu on a real GPU against the torch reference, bit for bit.

Kernel and reference do the same fp32 operations in the same order (precise expf, IEEE
division, no FMA) and round once, so the comparison is exact (NaN == NaN).
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

pytestmark = pytest.mark.gpu
DEV = "cuda"
BF16, FP16 = torch.bfloat16, torch.float16
NAN = float("nan")
# 16-byte path: real intermediate sizes (and 8); scalar path: I = 15, 100 (N % 16 != 0).
SIZES = (8, 1408, 2560, 2880, 14336, 18432, 15, 100)
GPT_OSS = (7.0, 1.702, 1.0)


def same(got, want, what):
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


def make_x(t, i, dt, scale=4.0):
    return (torch.randn(t, 2 * i, device=DEV) * scale).to(dt)


@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("i", SIZES)
@pytest.mark.parametrize("t", [1, 37, 4097])
def test_silu_and_mul_matches_reference_exactly(t, i, dt, seed):
    x = make_x(t, i, dt)
    out = torch.full((t, i), NAN, dtype=dt, device=DEV)  # poisoned: every element must be written
    y = tkreg.ops.silu_and_mul(x, out=out)
    assert y is out
    same(y, reference.silu_and_mul(x), f"silu_and_mul t={t} i={i} {dt}")
    same(tkreg.ops.silu_and_mul(x), y, "allocating call")


@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("t", [7022, 8191])  # T % 3 != 0: a ragged last row block
def test_big_silu_and_mul_matches_reference_exactly(t, dt, seed):
    """The 3-tokens-a-thread kernel big calls take (T * N >= 3 * 2^25), ragged last row block too."""
    x = make_x(t, 7168, dt)
    assert "rows_per_thread=3" in tkreg.explain("silu_and_mul", x).chosen
    out = torch.full((t, 7168), NAN, dtype=dt, device=DEV)
    same(tkreg.ops.silu_and_mul(x, out=out), reference.silu_and_mul(x), f"silu_and_mul t={t} {dt}")


@pytest.mark.parametrize("params", [(0.0, 1.0, 0.0), GPT_OSS, (-1.0, 0.5, -0.25), (0.5, 1.0, 0.0)])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("i", SIZES)
@pytest.mark.parametrize("t", [1, 37, 4097])
def test_swiglu_matches_reference_exactly(t, i, dt, params, seed):
    x = make_x(t, i, dt, scale=8.0)  # well past the clamps
    out = torch.full((t, i), NAN, dtype=dt, device=DEV)
    y = tkreg.ops.swiglu(x, *params, out=out)
    assert y is out
    same(y, reference.swiglu(x, *params), f"swiglu{params} t={t} i={i} {dt}")


@pytest.mark.parametrize("op", ["silu_and_mul", "swiglu"])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("i", [1408, 100])
def test_special_values(op, dt, i, seed):
    x = make_x(64, i, dt)
    vals = torch.tensor([NAN, float("inf"), float("-inf"), 0.0, -0.0, 100.0, -100.0, 65504.0, -65504.0],
                        device=DEV).to(dt)
    idx = torch.randint(0, x.numel(), (x.numel() // 8,), device=DEV)
    x.view(-1)[idx] = vals[torch.randint(0, len(vals), idx.shape, device=DEV)]
    params = GPT_OSS if op == "swiglu" else ()
    got = getattr(tkreg.ops, op)(x, *params)
    same(got, getattr(reference, op)(x, *params), f"{op} special values {dt} i={i}")


def test_defaults_of_swiglu_are_silu_and_mul(seed):
    x = make_x(333, 14336, BF16)
    torch.testing.assert_close(tkreg.ops.swiglu(x), tkreg.ops.silu_and_mul(x), rtol=0, atol=0)


def test_leading_dims_and_empty(seed):
    x = make_x(6, 1408, BF16).view(2, 3, 2816)
    y = tkreg.ops.silu_and_mul(x)
    assert y.shape == (2, 3, 1408)
    same(y, reference.silu_and_mul(x), "3-D x")
    e = tkreg.ops.silu_and_mul(torch.empty(0, 2816, dtype=BF16, device=DEV))
    assert e.shape == (0, 1408) and e.device.type == torch.device(DEV).type
    assert tkreg.ops.swiglu(torch.empty(0, 7, 32, dtype=FP16, device=DEV), *GPT_OSS).shape == (0, 7, 16)


def test_input_is_not_written(seed):
    x = make_x(129, 2880, FP16)
    x0 = x.clone()
    tkreg.ops.swiglu(x, *GPT_OSS)
    assert torch.equal(x, x0)


def test_odd_width_raises_or_falls_back(monkeypatch):
    x = make_x(3, 8, BF16)[:, :15].contiguous()
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(tkreg.NoKernelError, match="N % 2 == 0"):
        tkreg.ops.silu_and_mul(x)


def test_cuda_graph_replay(seed):
    x = make_x(37, 14336, BF16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        tkreg.ops.silu_and_mul(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = tkreg.ops.swiglu(tkreg.ops.silu_and_mul(x), *GPT_OSS)
    for _ in range(2):
        x.copy_(make_x(37, 14336, BF16))
        g.replay()
        torch.cuda.synchronize()
        same(y, reference.swiglu(reference.silu_and_mul(x), *GPT_OSS), "graph replay")
