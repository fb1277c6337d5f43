"""The example plugin's kernel on a GPU against its torch reference (sm_90a / sm_100a).

Needs the plugin installed next to tkreg (README, "Write a plugin": build the wheel into
dist/plugins/, then `pip install dist/plugins/tkreg_example-*.whl`); skips without it or
without a GPU.  Nothing falls back: TKREG_FALLBACK is unset, so the cubin runs or the test fails.
"""
from __future__ import annotations

import pytest
import torch

import tkreg

tkreg_example = pytest.importorskip("tkreg_example")
reference = pytest.importorskip("tkreg_example.reference")

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (3, 8), (7, 300), (129, 1000), (4096, 4096), (1, 65536), (70000, 8)]


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("m, n", SHAPES, ids=str)
def test_scale_add_matches_reference(m, n, dt, seed):
    x = torch.randn(m, n, dtype=dt, device="cuda")
    y = torch.randn(m, n, dtype=dt, device="cuda")
    got = tkreg.call("example.scale_add", x, y, alpha=-1.75)
    want = reference.scale_add(x, y, -1.75)
    # The kernel may fuse x * alpha + y into one fma; the reference rounds the product first.
    torch.testing.assert_close(got, want, msg=lambda s: f"example.scale_add [{m}, {n}] {dt}: {s}")
    assert got.shape == (m, n) and got.dtype == dt and got.device == x.device


def test_kernel_runs_not_the_reference():
    x = torch.randn(5, 64, dtype=torch.bfloat16, device="cuda")
    e = tkreg.explain("example.scale_add", x, x)
    assert e.chosen == "dtype=bfloat16", str(e)


def test_wrapper_out_qualified_name_and_empty(seed):
    x = torch.randn(33, 130, dtype=torch.float16, device="cuda")
    y = torch.randn_like(x)
    out = torch.empty_like(x)
    assert tkreg_example.scale_add(x, y, 2.0, out=out) is out
    torch.testing.assert_close(out, reference.scale_add(x, y, 2.0))
    torch.testing.assert_close(tkreg.call("example:example.scale_add", x, y), reference.scale_add(x, y))
    e = torch.empty(0, 64, dtype=torch.float16, device="cuda")
    assert tkreg_example.scale_add(e, e).shape == (0, 64)
    torch.cuda.synchronize()


def test_on_a_side_stream(seed):
    x = torch.randn(1024, 1024, dtype=torch.bfloat16, device="cuda")
    y = torch.randn_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = tkreg_example.scale_add(x, y, 3.0)
    s.synchronize()
    torch.testing.assert_close(got, reference.scale_add(x, y, 3.0))


def test_plugin_op_under_torch_compile(seed):
    """The plugin's op is `torch.ops.example.scale_add`: compiled code calls it with no graph break."""
    tkreg.register_torch_ops()
    def f(x, y):
        return torch.ops.example.scale_add(x, y, 0.5) * 2

    x = torch.randn(37, 640, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(37, 640, dtype=torch.bfloat16, device="cuda")
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x, y), reference.scale_add(x, y, 0.5) * 2)
    torch.library.opcheck(torch.ops.example.scale_add.default, (x, y, 0.5))
