"""rms_norm_quant_fp8 / fused_add_rms_norm_quant_fp8 without a GPU: registration, explain's
reasons, argument validation, and the reference semantics (bit for bit rms_norm followed by
per_token_group_quant_fp8) through the typed functions, TKREG_FALLBACK=reference and torch.compile."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.ops import quant as qops
from tkreg.reference import norm as rnorm
from tkreg.reference import quant as ref

BF16, FP16, FP8 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
OPS = ("rms_norm_quant_fp8", "fused_add_rms_norm_quant_fp8")


def bits(t):
    return t.view(torch.uint8) if t.dtype == FP8 else t


def assert_same(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert torch.equal(bits(g), bits(w))


def make(m, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, n, generator=g) * 2.0 ** torch.randint(-6, 7, (m, 1), generator=g).float()).to(BF16)
    r = torch.randn(m, n, generator=g).to(BF16)
    w = (1 + 0.3 * torch.randn(n, generator=g)).to(BF16)
    return x, r, w


def test_both_ops_are_registered_for_both_archs(shipped):
    for name in OPS:
        assert shipped[f"tkreg.{name}"]["archs"] == ["sm_100a", "sm_90a"], name
        assert all(shipped[f"tkreg.{name}"]["variants"].values()), name


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("n, why", [(1000, "N % 128 == 0"), (16512, "N <= 16384")])
def test_unserved_widths_name_the_rule(name, n, why):
    args = [torch.empty(3, n, dtype=BF16)] * (2 if "fused" in name else 1) + [torch.empty(n, dtype=BF16)]
    e = tkreg.explain(name, *args, arch="sm_90a")
    assert e.chosen is None
    assert any(why in w for _, _, w in e.rows), str(e)


@pytest.mark.parametrize("make_call, err, msg", [
    (lambda: qops.rms_norm_quant_fp8(torch.randn(4, 256, dtype=FP16), torch.randn(256, dtype=FP16)), TypeError,
     "`x` has dtype torch.float16; expected torch.bfloat16"),
    (lambda: qops.rms_norm_quant_fp8(torch.randn(4, 256, dtype=BF16), torch.randn(128, dtype=BF16)), ValueError,
     r"`weight` has shape \(128,\); expected \(256,\)"),
    (lambda: qops.rms_norm_quant_fp8(torch.randn(4, 256, dtype=BF16), torch.randn(256, dtype=BF16),
                                     s=torch.empty(4, 3)), ValueError, r"`s` has shape \(4, 3\); expected \(4, 2\)"),
    (lambda: qops.fused_add_rms_norm_quant_fp8(torch.randn(4, 256, dtype=BF16), torch.randn(4, 128, dtype=BF16),
                                               torch.randn(256, dtype=BF16)), ValueError, "`residual` has shape"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_arguments_are_named(make_call, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        make_call()


@pytest.mark.parametrize("m, n", [(1, 128), (37, 256), (64, 2048), (5, 7168)])
@pytest.mark.parametrize("ue8m0", [False, True])
def test_reference_is_rms_norm_then_group_quant(m, n, ue8m0):
    x, r, w = make(m, n)
    y = rnorm.rms_norm(x, w, 1e-5)
    assert_same(ref.rms_norm_quant_fp8(x, w, 1e-5, ue8m0), ref.per_token_group_quant_fp8(y, ue8m0))
    xr, rr = x.clone(), r.clone()
    got = ref.fused_add_rms_norm_quant_fp8(xr, rr, w, 1e-5, ue8m0)
    x2, r2 = x.clone(), r.clone()
    rnorm.fused_add_rms_norm(x2, r2, w, 1e-5)          # x2 = rms_norm(r2), r2 = round(x + r)
    assert torch.equal(xr, x) and torch.equal(rr, r2)   # x unchanged, residual updated in place
    assert_same(got, ref.per_token_group_quant_fp8(x2, ue8m0))


def test_typed_functions_route_to_the_reference(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    x, r, w = make(9, 384)
    want = ref.per_token_group_quant_fp8(rnorm.rms_norm(x, w, 1e-6))
    assert_same(qops.rms_norm_quant_fp8(x, w), want)
    qb, sb = torch.empty(9, 384, dtype=FP8), torch.empty(9, 3)
    q, s = qops.rms_norm_quant_fp8(x, w, q=qb, s=sb)
    assert q is qb and s is sb
    assert_same((q, s), want)
    rr = r.clone()
    x2, r2 = x.clone(), r.clone()
    rnorm.fused_add_rms_norm(x2, r2, w, 1e-6)
    got = qops.fused_add_rms_norm_quant_fp8(x, rr, w)
    assert torch.equal(rr, r2)
    assert_same(got, ref.per_token_group_quant_fp8(x2))


@pytest.mark.parametrize("op, args", [
    ("rms_norm_quant_fp8", lambda: (make(5, 256)[0], make(5, 256)[2], 1e-6, False)),
    ("fused_add_rms_norm_quant_fp8", lambda: (*make(3, 384), 1e-5, True)),
])
def test_opcheck(op, args, monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    from tkreg.runtime import RUNTIME
    RUNTIME.torch_op(f"tkreg.{op}")
    torch.library.opcheck(getattr(torch.ops.tkreg, op).default, args(),
                          test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))


def test_compile_fullgraph_matches_eager(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")

    def f(x, r, w):
        q, s = qops.rms_norm_quant_fp8(x, w)
        q2, s2 = qops.fused_add_rms_norm_quant_fp8(x, r, w)
        return q.float() * s.repeat_interleave(128, 1), q2.float() * s2.repeat_interleave(128, 1), r

    c = torch.compile(f, fullgraph=True, backend="aot_eager")
    for m in (5, 9):
        x, r, w = make(m, 256, seed=m)
        got, want = c(x, r.clone(), w), f(x, r.clone(), w)
        for a, b in zip(got, want):
            assert torch.equal(a, b)
