"""silu_and_mul / swiglu without a GPU: dispatch, validation, and the reference's semantics."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

BF16, FP16 = torch.bfloat16, torch.float16
# Intermediate sizes of real models (Qwen-MoE expert, Llama-2 7B, Llama-3 8B, DeepSeek-V3, ...),
# whole and TP-sharded: all take the 16-byte path.
REAL_I = (1408, 2048, 2560, 2880, 5632, 11008, 12288, 13824, 14336, 18432, 28672, 176, 1376, 1792, 2304)


def ulps(a, b):
    """Largest distance in units of the last place between two same-dtype tensors (NaN == NaN)."""
    bits = {BF16: torch.int16, FP16: torch.int16}[a.dtype]
    ia, ib = a.view(bits).int(), b.view(bits).int()
    ia = torch.where(ia < 0, -32768 - ia, ia)  # sign-magnitude -> ordered integers
    ib = torch.where(ib < 0, -32768 - ib, ib)
    both_nan = a.isnan() & b.isnan()
    return int(torch.where(both_nan, 0, (ia - ib).abs()).max()) if a.numel() else 0


@pytest.mark.parametrize("op", ["silu_and_mul", "swiglu"])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_real_intermediate_sizes_take_the_vector_kernel(op, dt, arch):
    for i in REAL_I:
        e = tkreg.explain(op, torch.empty(3, 2 * i, dtype=dt), arch=arch)
        assert e.chosen == f"dtype={str(dt)[6:]},op={op},vec=8", (i, str(e))


@pytest.mark.parametrize("t, i, big", [(8192, 7168, True), (7022, 7168, True), (4096, 14336, True),
                                        (4096, 7168, False), (16384, 2048, False), (65536, 1408, False),
                                        (7021, 7168, False), (1 << 17, 2040, False)])
def test_big_silu_calls_take_three_tokens_a_thread(t, i, big):
    """T * N >= 3 * 2^25 with I >= 2048: the flat 3-token kernel (faster there, slower below)."""
    for arch in ("sm_90a", "sm_100a"):
        e = tkreg.explain("silu_and_mul", torch.empty(t, 2 * i, dtype=FP16, device="meta"), arch=arch)
        want = "dtype=float16,op=silu_and_mul,raster=flat,rows=3,vec=8" if big else "dtype=float16,op=silu_and_mul,vec=8"
        assert e.chosen == want, str(e)


@pytest.mark.parametrize("n, chosen", [(30, "vec=1"), (200, "vec=1"), (2, "vec=1"), (16, "vec=8"), (31, None)])
def test_other_widths(n, chosen):
    e = tkreg.explain("silu_and_mul", torch.empty(5, n, dtype=BF16), arch="sm_90a")
    if chosen is None:
        assert e.chosen is None and "needs N % 2 == 0" in str(e)
    else:
        assert e.chosen.endswith(chosen), str(e)


def test_variant_budget():
    """The installed packs hold a modest number of variants per op and arch (wheel size, build time)."""
    ops = {o["op"]: o for o in tkreg.list_ops()}
    for name in ("tkreg.silu_and_mul", "tkreg.swiglu", "tkreg.silu_and_mul_backward"):
        for arch, keys in ops[name]["variants"].items():
            assert 0 < len(keys) <= 16, (name, arch, len(keys))


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
