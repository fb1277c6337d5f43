"""silu_and_mul, swiglu and silu_and_mul_backward without a GPU: the installed variants against
kernels_src/activation's specs, explain's reasons, validation, the reference's semantics, and the
typed functions and torch.compile through the reference fallback."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

BF16, FP16 = torch.bfloat16, torch.float16
OPS = ("silu_and_mul", "swiglu", "silu_and_mul_backward")


def ulps(a, b):
    """Largest distance in units of the last place between two same-dtype tensors (NaN == NaN)."""
    bits = {BF16: torch.int16, FP16: torch.int16}[a.dtype]
    ia, ib = a.view(bits).int(), b.view(bits).int()
    ia = torch.where(ia < 0, -32768 - ia, ia)  # sign-magnitude -> ordered integers
    ib = torch.where(ib < 0, -32768 - ib, ib)
    both_nan = a.isnan() & b.isnan()
    return int(torch.where(both_nan, 0, (ia - ib).abs()).max()) if a.numel() else 0


def test_family_is_registered_for_both_archs(shipped):
    for name in OPS:
        assert shipped[f"tkreg.{name}"]["archs"] == ["sm_100a", "sm_90a"], name
        assert all(shipped[f"tkreg.{name}"]["variants"].values()), name


def test_wheel_ships_the_activation_specs(ships_the_specs):
    assert set(ships_the_specs("activation")) == {f"tkreg.{n}" for n in OPS}


@pytest.mark.parametrize("op", OPS)
def test_odd_widths_name_the_rule(op):
    args = (torch.empty(5, 31, dtype=BF16),)
    if op == "silu_and_mul_backward":   # dy[T, I], x[T, 2I]: no I makes 2I = 31
        args = (torch.empty(5, 15, dtype=BF16), torch.empty(5, 31, dtype=BF16))
    e = tkreg.explain(op, *args, arch="sm_90a")
    assert e.chosen is None and any(why == "needs N % 2 == 0" for _, _, why in e.rows), str(e)


@pytest.mark.parametrize("make, err, msg", [
    (lambda: tkreg.ops.silu_and_mul(torch.randn(2, 64)), TypeError, "`x` has dtype torch.float32; expected torch.float16 or torch.bfloat16"),
    (lambda: tkreg.ops.silu_and_mul(torch.randn(64, 2, dtype=BF16).t()), ValueError, "`x` must be contiguous"),
    (lambda: tkreg.ops.silu_and_mul(torch.randn(2 * 64 + 1, dtype=BF16)[1:].view(2, 64)), ValueError, "not 16-byte aligned"),
    (lambda: tkreg.ops.silu_and_mul(torch.randn(2, 64, dtype=BF16), out=torch.empty(2, 64, dtype=BF16)), ValueError, r"`out` has shape \(2, 64\); expected \(2, 32\)"),
    (lambda: tkreg.ops.silu_and_mul(torch.randn(2, 64, dtype=BF16), out=torch.empty(2, 32, dtype=FP16)), TypeError, "`out` has dtype torch.float16; expected torch.bfloat16"),
    (lambda: tkreg.ops.silu_and_mul(torch.randn(2, 64, dtype=BF16)), ValueError, "on the CPU.*TKREG_FALLBACK=reference"),
    (lambda: tkreg.ops.silu_and_mul(torch.randn(2, 4, 64, dtype=BF16).transpose(0, 1)), ValueError, "cannot view `x`"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_input(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        make()


def test_odd_width_has_no_kernel_and_names_the_rule(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    e = tkreg.explain("swiglu", torch.empty(2, 33, dtype=FP16), arch="sm_100a")
    assert e.chosen is None and all(why.startswith(("needs N %", "`x` is")) for _, _, why in e.rows)


# ---- reference semantics -----------------------------------------------------------------
@pytest.mark.parametrize("dt", [BF16, FP16])
def test_silu_and_mul_reference_vs_independent_formula(dt, seed):
    x = (torch.randn(64, 2 * 1408) * 4).to(dt)
    g, u = x[:, :1408].double(), x[:, 1408:].double()
    want = (torch.nn.functional.silu(g) * u).to(dt)  # float64 silu, one rounding
    got = reference.silu_and_mul(x)
    assert got.shape == (64, 1408) and got.dtype == dt
    assert ulps(got, want) <= 1


def test_silu_and_mul_reference_special_values():
    g = torch.tensor([0.0, -0.0, 1.0, -1.0, 100.0, -100.0, float("inf"), float("-inf"), float("nan"), 3.0])
    u = torch.tensor([1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, float("inf")])
    out = reference.silu_and_mul(torch.cat([g, u])[None].to(BF16)).float()[0]
    assert out[0] == 0 and out[2] == pytest.approx(1.4609375, abs=1e-2)        # 2 * silu(1) = 1.462
    assert out[4] == 100 and out[5] == 0                                          # exp overflow -> -0
    assert out[6] == float("inf") and out[7].isnan() and out[8].isnan()          # -inf/(1+inf) = nan
    assert out[9] == float("inf")


@pytest.mark.parametrize("dt", [BF16, FP16])
def test_swiglu_reference_vs_independent_formula(dt, seed):
    x = (torch.randn(33, 2 * 2880) * 6).to(dt)
    limit, alpha, beta = 7.0, 1.702, 1.0
    g, u = x[:, :2880].double(), x[:, 2880:].double()
    g, u = torch.minimum(g, torch.tensor(limit, dtype=torch.float64)), u.clamp(-limit, limit)
    want = (g * torch.sigmoid(torch.tensor(alpha, dtype=torch.float32).double() * g) * (u + beta)).to(dt)
    assert ulps(reference.swiglu(x, limit, alpha, beta), want) <= 1


def test_swiglu_clamps_only_with_a_positive_limit():
    x = torch.tensor([[10.0, -10.0, 3.0, 10.0, -10.0, 3.0]], dtype=BF16)   # g = (10, -10, 3), u = (10, -10, 3)
    clamped = reference.swiglu(x, 7.0).float()[0]
    g, u = torch.tensor([7.0, -10.0, 3.0]), torch.tensor([7.0, -7.0, 3.0])
    torch.testing.assert_close(clamped, (g * torch.sigmoid(g) * u).to(BF16).float())
    for off in (0.0, -1.0):
        torch.testing.assert_close(reference.swiglu(x, off), reference.silu_and_mul(x), rtol=0, atol=0)
    nan = torch.tensor([[float("nan"), 1.0, 1.0, float("nan")]], dtype=BF16)   # g = (nan, 1), u = (1, nan)
    assert reference.swiglu(nan, 7.0).isnan().tolist() == [[True, True]]      # clamp keeps NaN


def test_swiglu_defaults_are_silu_and_mul(seed):
    x = torch.randn(17, 96, dtype=BF16)
    torch.testing.assert_close(reference.swiglu(x), reference.silu_and_mul(x), rtol=0, atol=0)


# ---- the CPU fallback through the typed functions ----------------------------------------------
def test_typed_calls_route_to_the_reference_with_their_shapes_and_out(monkeypatch, seed):
    """Routing, not math: the fallback runs the reference itself, through the typed functions."""
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    x = torch.randn(2, 3, 64, dtype=BF16)
    y = tkreg.ops.silu_and_mul(x)
    assert y.shape == (2, 3, 32)
    torch.testing.assert_close(y, reference.silu_and_mul(x), rtol=0, atol=0)
    out = torch.empty(2, 3, 32, dtype=BF16)
    assert tkreg.ops.swiglu(x, 7.0, 1.702, 1.0, out=out) is out
    torch.testing.assert_close(out, reference.swiglu(x, 7.0, 1.702, 1.0), rtol=0, atol=0)
    assert tkreg.ops.silu_and_mul(torch.empty(0, 64, dtype=FP16)).shape == (0, 32)
    torch.testing.assert_close(tkreg.call("tkreg.swiglu", x[0], limit=7.0), reference.swiglu(x[0], 7.0))


def test_torch_compile_traces_without_graph_break(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    f = torch.compile(lambda x: tkreg.ops.swiglu(tkreg.ops.silu_and_mul(x), 7.0), fullgraph=True, backend="eager")
    x = torch.randn(4, 5, 128, dtype=BF16)
    torch.testing.assert_close(f(x), reference.swiglu(reference.silu_and_mul(x), 7.0), rtol=0, atol=0)
