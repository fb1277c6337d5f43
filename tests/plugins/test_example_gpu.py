"""The example plugin on a GPU beyond its own generated tests (tests/plugins/tkreg_example/tests):
the plugin-qualified name, a side stream, empty inputs and the torch op used directly.

Needs the plugin installed next to tkreg (`.ci/gpu-check` installs dist/plugins/*.whl); skips
without it or without a GPU.  Nothing falls back: TKREG_FALLBACK is unset.
"""
from __future__ import annotations

import pytest
import torch

import tkreg

tkreg_example = pytest.importorskip("tkreg_example")
reference = pytest.importorskip("tkreg_example.reference")

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)


def test_kernel_runs_not_the_reference():
    x = torch.randn(5, 64, dtype=torch.bfloat16, device="cuda")
    assert tkreg.explain("example.gelu_tanh_and_mul", x).chosen == "dtype=bfloat16"


def test_qualified_name_out_and_empty(seed):
    x = torch.randn(33, 260, dtype=torch.float16, device="cuda")
    out = torch.empty(33, 130, dtype=torch.float16, device="cuda")
    assert tkreg_example.gelu_tanh_and_mul(x, out=out) is out
    torch.testing.assert_close(out, reference.gelu_tanh_and_mul(x), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(tkreg.call("example:example.gelu_tanh_and_mul", x), out)
    e = torch.empty(0, 64, dtype=torch.float16, device="cuda")
    assert tkreg_example.gelu_tanh_and_mul(e).shape == (0, 32)
    assert tkreg_example.axpy(e[:, :32], torch.empty(0, 32, dtype=torch.float16, device="cuda")).shape == (0, 32)


def test_on_a_side_stream(seed):
    x = torch.randn(1024, 1024, dtype=torch.bfloat16, device="cuda")
    y = torch.randn_like(x)
    want = x.clone()
    reference.axpy(want, y, 3.0)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        tkreg_example.axpy(x, y, 3.0)
    s.synchronize()
    torch.testing.assert_close(x, want, rtol=1e-2, atol=1e-2)


def test_the_torch_op_directly(seed):
    tkreg.register_torch_ops()
    x = torch.randn(37, 640, dtype=torch.bfloat16, device="cuda")
    f = torch.compile(lambda x: torch.ops.example.gelu_tanh_and_mul(x) * 2, fullgraph=True)
    torch.testing.assert_close(f(x), reference.gelu_tanh_and_mul(x) * 2, rtol=1e-2, atol=1e-2)
    torch.library.opcheck(torch.ops.example.gelu_tanh_and_mul.default, (x,))
