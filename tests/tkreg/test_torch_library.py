"""torch.ops registration, fake tensors, compile and autograd, checked on the CPU through the
reference fallback (the GPU twin is tests/tkreg/test_torch_library_gpu.py)."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference
from tkreg.runtime import RUNTIME
from tkreg.torch_library import schema

BF16 = torch.bfloat16


@pytest.fixture(autouse=True)
def cpu_reference(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")


COMPILE_FIRST = r"""
import torch, tkreg
from tkreg import reference
def f(x, w, wu):
    return tkreg.ops.gemm(tkreg.ops.rms_norm(x, w), wu)
x, w, wu = torch.randn(5, 1024, dtype=torch.bfloat16), torch.randn(1024, dtype=torch.bfloat16), torch.randn(64, 1024, dtype=torch.bfloat16)
assert not hasattr(torch.ops.tkreg, "rms_norm")           # nothing registered before compiling
got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, w, wu)
torch.testing.assert_close(got, reference.gemm(reference.rms_norm(x, w, 1e-6), wu))
print("OK", sorted(n for n in ("rms_norm", "gemm", "silu_and_mul") if hasattr(torch.ops.tkreg, n)))
"""


def test_compiling_first_registers_what_it_needs():
    """A fresh process compiles a model before any tkreg call: each op becomes a torch op while
    Dynamo traces it (no graph break), and only the ops it uses are registered."""
    import os
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", COMPILE_FIRST], capture_output=True, text=True, cwd="/",
                       env=dict(os.environ, TKREG_FALLBACK="reference"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK ['gemm', 'rms_norm']" in r.stdout


def test_schemas_follow_the_specs():
    assert schema(RUNTIME.registry.entry("tkreg.rms_norm").spec) == "rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor"
    assert schema(RUNTIME.registry.entry("tkreg.gemm").spec) == "gemm(Tensor a, Tensor b, Tensor? bias=None) -> Tensor"
    assert schema(RUNTIME.registry.entry("tkreg.fused_add_rms_norm").spec) == \
        "fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps=1e-06) -> ()"
    assert schema(RUNTIME.registry.entry("tkreg.rms_norm_backward").spec) == \
        "rms_norm_backward(Tensor dy, Tensor x, Tensor weight, float eps=1e-06) -> (Tensor, Tensor)"


def test_every_op_is_registered():
    assert tkreg.register_torch_ops()
    for o in tkreg.list_ops():
        ns, short = o["op"].split(".", 1)
        assert hasattr(getattr(torch.ops, ns), short), o["op"]


@pytest.mark.parametrize("op, args", [
    ("rms_norm", lambda: (torch.randn(5, 1024, dtype=BF16), torch.randn(1024, dtype=BF16), 1e-5)),
    ("gemm", lambda: (torch.randn(7, 64, dtype=BF16), torch.randn(24, 64, dtype=BF16))),
    ("fused_add_rms_norm", lambda: (torch.randn(3, 2048, dtype=BF16), torch.randn(3, 2048, dtype=BF16),
                                    torch.randn(2048, dtype=BF16), 1e-6)),
    ("rms_norm_backward", lambda: (torch.randn(4, 1024, dtype=BF16), torch.randn(4, 1024, dtype=BF16),
                                   torch.randn(1024, dtype=BF16), 1e-6)),
])
def test_opcheck(op, args):
    tkreg.register_torch_ops()
    torch.library.opcheck(getattr(torch.ops.tkreg, op).default, args(),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


def _block(x, w1, w_up, w_down):
    h = tkreg.ops.rms_norm(x, w1)
    u = tkreg.ops.gemm(h, w_up)
    u = torch.nn.functional.silu(u)
    return tkreg.ops.gemm(u.contiguous(), w_down)


def test_compile_fullgraph_matches_eager(seed):
    x = torch.randn(8, 1024, dtype=BF16)
    w1, wu, wd = torch.randn(1024, dtype=BF16), torch.randn(256, 1024, dtype=BF16), torch.randn(1024, 256, dtype=BF16)
    eager = _block(x, w1, wu, wd)
    compiled = torch.compile(_block, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x, w1, wu, wd), eager)


def test_compiled_out_and_inplace_forms(seed):
    def f(x, r, w, out):
        tkreg.ops.fused_add_rms_norm(x, r, w)
        return tkreg.ops.rms_norm(x, w, out=out)
    args = [torch.randn(3, 2048, dtype=BF16), torch.randn(3, 2048, dtype=BF16), torch.randn(2048, dtype=BF16)]
    e_args = [a.clone() for a in args]
    want = f(*e_args, torch.empty(3, 2048, dtype=BF16))
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(*args, torch.empty(3, 2048, dtype=BF16))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(args[1], e_args[1])


def test_rms_norm_autograd_matches_torch(seed):
    x = torch.randn(6, 1024, dtype=torch.float32).to(BF16).requires_grad_()
    w = torch.randn(1024, dtype=BF16).requires_grad_()
    y = tkreg.ops.rms_norm(x, w)
    assert y.grad_fn is not None
    g = torch.randn_like(y)
    y.backward(g)
    x2, w2 = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    (torch.nn.functional.rms_norm(x2, (1024,), w2, 1e-6) * g.float()).sum().backward()
    torch.testing.assert_close(x.grad.float(), x2.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(w.grad.float(), w2.grad, rtol=2e-2, atol=5e-2)


def test_ops_without_backward_refuse_clearly():
    a = torch.randn(4, 64, dtype=BF16, requires_grad=True)
    with pytest.raises(RuntimeError, match="tkreg.gemm_swiglu has no backward kernel"):
        tkreg.ops.gemm_swiglu(a, torch.randn(16, 64, dtype=BF16))
    with pytest.raises(RuntimeError, match="out= tensors do not support autograd"):
        tkreg.ops.rms_norm(torch.randn(2, 1024, dtype=BF16, requires_grad=True), torch.randn(1024, dtype=BF16),
                           out=torch.empty(2, 1024, dtype=BF16))
    with torch.no_grad():
        tkreg.ops.gemm(a, torch.randn(8, 64, dtype=BF16))


def test_reference_backward_matches_autograd(seed):
    x = torch.randn(5, 1024, dtype=torch.float64)
    w = torch.randn(1024, dtype=torch.float64)
    dy = torch.randn(5, 1024, dtype=torch.float64)
    dx, dw = reference.rms_norm_backward(dy, x, w, 1e-6)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    (reference.rms_norm(xr, wr, 1e-6) * dy).sum().backward()
    # the reference computes in fp32, as the kernels do
    torch.testing.assert_close(dx, xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw, wr.grad, rtol=1e-4, atol=1e-5)


def test_silu_and_mul_autograd_matches_torch(seed):
    x = torch.randn(7, 256, dtype=BF16, requires_grad=True)
    y = tkreg.ops.silu_and_mul(x)
    assert y.grad_fn is not None
    g = torch.randn_like(y)
    y.backward(g)
    xr = x.detach().float().requires_grad_()
    gate, up = xr.chunk(2, dim=-1)
    (torch.nn.functional.silu(gate) * up * g.float()).sum().backward()
    torch.testing.assert_close(x.grad.float(), xr.grad, rtol=2e-2, atol=2e-2)


def test_silu_and_mul_backward_reference(seed):
    x = torch.randn(5, 64, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(5, 32, dtype=torch.float64)
    gate, up = x.chunk(2, dim=-1)
    (torch.nn.functional.silu(gate) * up * dy).sum().backward()
    torch.testing.assert_close(reference.silu_and_mul_backward(dy, x.detach()), x.grad, rtol=1e-5, atol=1e-6)


def test_tkreg_call_compiles_like_a_typed_op(seed):
    """A plugin's wrapper is one line over tkreg.call: under compile it is the torch op, with
    positional and keyword scalars, out= and in-place tensors."""
    def f(x, w, r):
        y = tkreg.call("tkreg.rms_norm", x, w, eps=1e-5)
        z = tkreg.call("tkreg.rms_norm", y, w, 1e-5, out=torch.empty_like(y))
        tkreg.call("tkreg.fused_add_rms_norm", z, r, w)
        return z, r
    args = [torch.randn(4, 2048, dtype=BF16), torch.randn(2048, dtype=BF16), torch.randn(4, 2048, dtype=BF16)]
    want = f(*[a.clone() for a in args])
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(*[a.clone() for a in args])
    torch.testing.assert_close(got, want)
