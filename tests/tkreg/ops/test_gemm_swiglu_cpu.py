"""gemm_swiglu and pack_gate_up without a GPU: the packed layout, the reference against the unfused
composition (gemm then silu_and_mul) and a float64 formula, validation, and the reference fallback."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference
from tkreg.reference.gemm import SWIGLU_GROUP, gemm_swiglu
from tkreg.spec import Variant

BF16, FP16 = torch.bfloat16, torch.float16
ops = tkreg.ops


def weights(i, k, dt=BF16):
    return (torch.randn(i, k) * 0.1).to(dt), (torch.randn(i, k) * 0.1).to(dt)


def test_packed_rows_alternate_in_groups_of_eight(seed):
    g, u = weights(24, 16)
    w = ops.pack_gate_up(g, u)
    assert w.shape == (48, 16) and SWIGLU_GROUP == 8
    for r in range(48):
        half, grp, row = (r // 8) % 2, r // 16, r % 8
        assert torch.equal(w[r], (u if half else g)[8 * grp + row]), r
    g2, u2 = ops.unpack_gate_up(w)
    assert torch.equal(g2, g) and torch.equal(u2, u)


@pytest.mark.parametrize("dt", [BF16, FP16])
def test_reference_is_gemm_then_silu_and_mul_bit_for_bit(dt, seed):
    a = torch.randn(7, 96).to(dt)
    g, u = weights(32, 96, dt)
    got = gemm_swiglu(a, ops.pack_gate_up(g, u))
    want = reference.silu_and_mul(reference.gemm(a, torch.cat([g, u])))
    assert got.dtype == dt and got.shape == (7, 32)
    assert torch.equal(got, want)


def test_reference_vs_float64_formula(seed):
    a = torch.randn(5, 256).to(BF16)
    g, u = weights(64, 256)
    x, y = a.double() @ g.double().t(), a.double() @ u.double().t()
    want = x * torch.sigmoid(x) * y
    got = gemm_swiglu(a, ops.pack_gate_up(g, u)).double()
    torch.testing.assert_close(got, want, rtol=2 ** -6, atol=1e-3 * want.abs().max().item())


def test_calls_route_to_the_reference_on_the_cpu(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    a = torch.randn(3, 64).to(BF16)
    w = ops.pack_gate_up(*weights(16, 64))
    torch.testing.assert_close(ops.gemm_swiglu(a, w), gemm_swiglu(a, w), rtol=0, atol=0)


@pytest.mark.parametrize("make, err, msg", [
    (lambda: ops.pack_gate_up(*weights(12, 64)), ValueError, r"tkreg.pack_gate_up: I = 12 rows; expected a multiple of 8"),
    (lambda: ops.pack_gate_up(weights(16, 64)[0], weights(16, 64, FP16)[1]), TypeError, "`up_w` has dtype torch.float16"),
    (lambda: ops.pack_gate_up(*weights(16, 64)[:1], weights(8, 64)[0]), ValueError, "must both be"),
    (lambda: ops.gemm_swiglu(torch.empty(3, 64, dtype=BF16), torch.empty(32, 64, dtype=FP16)), TypeError,
     "`w_packed` has dtype torch.float16; expected torch.bfloat16"),
    (lambda: ops.gemm_swiglu(torch.empty(3, 64), torch.empty(32, 64)), TypeError, "`a` has dtype torch.float32"),
    (lambda: ops.gemm_swiglu(torch.empty(3, 64, dtype=BF16), torch.empty(32, 60, dtype=BF16)), ValueError,
     r"`w_packed` has shape \(32, 60\); expected \(32, 64\)"),
    (lambda: ops.gemm_swiglu(torch.empty(3, 64, dtype=BF16), torch.empty(32, 64, dtype=BF16),
                             out=torch.empty(3, 32, dtype=BF16)), ValueError, r"`out` has shape \(3, 32\); expected \(3, 16\)"),
    (lambda: ops.gemm_swiglu(torch.empty(3, 64, dtype=BF16), torch.empty(32, 64, dtype=BF16)), ValueError,
     "TKREG_FALLBACK=reference"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_arguments_are_named(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        make()


@pytest.mark.parametrize("n, k, why", [(24, 64, "N % 16 == 0"), (32, 60, "K % 8 == 0")])
def test_widths_without_a_kernel_name_the_rule(n, k, why):
    """w_packed rows not whole gate / up groups (I = 12: odd groups), or K rows TMA cannot load."""
    e = tkreg.explain("gemm_swiglu", torch.empty(3, k, dtype=BF16), torch.empty(n, k, dtype=BF16),
                      arch="sm_90a", sm_count=132)
    assert e.chosen is None and any(why in r for _, _, r in e.rows), str(e)


def test_ships_sm90a_only(shipped, family_specs):
    have = shipped["tkreg.gemm_swiglu"]
    assert have["archs"] == ["sm_90a"], have["archs"]
    assert set(have["variants"]["sm_90a"]) == {v.key for v in family_specs("gemm")["tkreg.gemm_swiglu"].variants}


@pytest.mark.parametrize("m, i, cls", [(1, 12288, "decode-16"), (32, 12288, "decode-32"), (64, 14336, "decode-64"),
                                       (33, 768, "small"), (4096, 12288, "large"), (8192, 14336, "large"),
                                       (512, 14336, "mid-128")])
def test_llama_mlp_shapes_take_the_intended_class(m, i, cls):
    e = tkreg.explain("gemm_swiglu", torch.empty(m, 4096, dtype=BF16), torch.empty(2 * i, 4096, dtype=BF16),
                      arch="sm_90a", sm_count=132)
    assert Variant.parse_key(e.chosen)["shape_class"] == cls, str(e)
