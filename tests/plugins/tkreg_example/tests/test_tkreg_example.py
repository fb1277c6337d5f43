"""tkreg-example's ops against their torch references: on the CPU through TKREG_FALLBACK=reference
(the calling convention, shapes, errors), and on a GPU through the kernels, eager and under
torch.compile(fullgraph=True).  Needs the plugin installed next to tkreg; skips without it."""
from __future__ import annotations

import pytest
import torch

import tkreg

tkreg_example = pytest.importorskip("tkreg_example")
reference = pytest.importorskip("tkreg_example.reference")

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
SHAPES = [(1, 8), (37, 300), (129, 1000), (2048, 4096)]


def data(m, n, dt, device):
    g = torch.Generator().manual_seed(m * 7919 + n)
    return tuple(torch.randn(m, n, generator=g).to(device=device, dtype=dt) for _ in range(2))


def test_the_plugin_is_registered():
    ops = {o["op"]: o for o in tkreg.list_ops()}
    assert {"example.gelu_tanh_and_mul", "example.axpy"} <= set(ops)
    assert ops["example.axpy"]["owner"] == "plugin:example"


def test_cpu_calls_route_to_the_references(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    x, y = data(5, 64, torch.bfloat16, "cpu")
    assert torch.equal(tkreg_example.gelu_tanh_and_mul(x), reference.gelu_tanh_and_mul(x))
    want = x.clone()
    reference.axpy(want, y, 0.5)
    assert tkreg_example.axpy(x, y, 0.5) is x and torch.equal(x, want)


def test_wrappers_compile_on_the_cpu(monkeypatch):
    """torch.compile(fullgraph=True) traces the wrappers as the plugin's torch ops (here run by the
    references on the CPU; on a GPU, test_wrappers_under_torch_compile runs the kernels)."""
    monkeypatch.setenv("TKREG_FALLBACK", "reference")

    def f(x, a):
        return tkreg_example.axpy(tkreg_example.gelu_tanh_and_mul(x), a, 0.25)

    x, _ = data(6, 128, torch.bfloat16, "cpu")
    a, _ = data(6, 64, torch.bfloat16, "cpu")
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="aot_eager")(x, a), f(x, a))


def test_dispatch_and_bad_input():
    x = torch.empty(3, 16, dtype=torch.float16)
    assert tkreg.explain("example.gelu_tanh_and_mul", x, arch="sm_90a").chosen == "dtype=float16"
    with pytest.raises(ValueError, match=r"`x` has shape \(3, 15\)"):    # 2 * N: an even width
        tkreg.explain("example.gelu_tanh_and_mul", torch.empty(3, 15, dtype=torch.float16), arch="sm_90a")
    with pytest.raises(TypeError, match="`y` has dtype torch.float32"):
        tkreg.call("example.axpy", torch.empty(2, 8, dtype=torch.bfloat16), torch.empty(2, 8))


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("m, n", SHAPES, ids=str)
def test_kernels_match_the_references(m, n, dt, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    x, y = data(m, 2 * n, dt, "cuda")
    torch.testing.assert_close(tkreg_example.gelu_tanh_and_mul(x), reference.gelu_tanh_and_mul(x), rtol=1e-2, atol=1e-2)
    x, y = data(m, n, dt, "cuda")
    want = x.clone()
    reference.axpy(want, y, -1.5)
    torch.testing.assert_close(tkreg_example.axpy(x, y, -1.5), want, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@GPU
def test_wrappers_under_torch_compile(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)

    def f(x, a, b):
        h = tkreg_example.gelu_tanh_and_mul(x)
        return tkreg_example.axpy(h, a, 0.25) * b

    x, _ = data(33, 512, torch.bfloat16, "cuda")
    a, b = data(33, 256, torch.bfloat16, "cuda")
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x, a, b), f(x, a, b))
