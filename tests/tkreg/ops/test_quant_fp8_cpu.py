"""FP8 quantization by 1x128 token groups and 128x128 blocks (with the fused SwiGLU forms) and its
dequantization, without a GPU: registration, explain's reasons, argument validation, reference
semantics, and the typed functions and torch.compile through the reference fallback."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tkreg
from tkreg.reference import quant as ref

BF16, FP16, FP8 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
ops = tkreg.ops
GROUP_OPS = ("per_token_group_quant_fp8", "per_token_group_quant_fp8_colmajor",
             "silu_and_mul_quant_fp8", "silu_and_mul_quant_fp8_colmajor")
ALL_OPS = GROUP_OPS + ("per_block_quant_fp8", "per_token_group_dequant", "per_block_dequant")


def test_family_is_registered_for_both_archs(shipped):
    for name in ALL_OPS:
        assert shipped[f"tkreg.{name}"]["archs"] == ["sm_100a", "sm_90a"], name
        assert all(shipped[f"tkreg.{name}"]["variants"].values()), name


# ---- what explain says where no variant serves the width ---------------------------------------
@pytest.mark.parametrize("name, k, rule", [("per_token_group_quant_fp8", 1000, "K % 128 == 0"),
                                           ("per_token_group_quant_fp8_colmajor", 2112, "K % 128 == 0"),
                                           ("silu_and_mul_quant_fp8", 2 * 1000, "N % 256 == 0"),
                                           ("silu_and_mul_quant_fp8", 128, "N % 256 == 0"),
                                           ("per_block_quant_fp8", 1000, "K % 16 == 0")])
def test_unserved_widths_name_the_rule(name, k, rule):
    e = tkreg.explain(name, torch.empty(3, k, dtype=BF16), arch="sm_90a")
    assert e.chosen is None
    assert any(why == f"needs {rule}" for _, _, why in e.rows), str(e)
    assert any(why.startswith("`x` is" if "per_block" not in name else "`w` is") for _, _, why in e.rows)


# ---- validation (no GPU needed: every check runs before the device check) ---------------------
@pytest.mark.parametrize("make, err, msg", [
    (lambda: ops.per_token_group_quant_fp8(torch.randn(4, 256)), TypeError,
     r"`x` has dtype torch.float32; expected torch.float16 or torch.bfloat16"),
    (lambda: ops.per_token_group_quant_fp8(torch.randn(256, dtype=BF16)), ValueError, "`x` must have 2 dims"),
    (lambda: ops.per_token_group_quant_fp8(torch.randn(256, 4, dtype=BF16).t()), ValueError, "`x` must be contiguous"),
    (lambda: ops.per_token_group_quant_fp8(torch.randn(4, 256, dtype=BF16), q=torch.empty(4, 256, dtype=BF16)),
     TypeError, "`q` has dtype torch.bfloat16; expected torch.float8_e4m3fn"),
    (lambda: ops.per_token_group_quant_fp8(torch.randn(4, 256, dtype=BF16), s=torch.empty(4, 3)),
     ValueError, r"`s` has shape \(4, 3\); expected \(4, 2\)"),
    (lambda: ops.per_token_group_quant_fp8(torch.randn(5, 256, dtype=BF16), column_major_scales=True,
                                           s=torch.empty(2, 5)), ValueError, r"`s` has shape \(2, 5\); expected \(2, 8\)"),
    (lambda: ops.silu_and_mul_quant_fp8(torch.randn(4, 512, dtype=BF16), q=torch.empty(4, 512, dtype=FP8)),
     ValueError, r"`q` has shape \(4, 512\); expected \(4, 256\)"),
    (lambda: ops.per_block_quant_fp8(torch.randn(300, 256, dtype=FP16), s=torch.empty(2, 2)),
     ValueError, r"`s` has shape \(2, 2\); expected \(3, 2\)"),
    (lambda: ops.per_token_group_dequant(torch.empty(4, 256, dtype=BF16), torch.empty(4, 2)),
     TypeError, "`q` has dtype torch.bfloat16; expected torch.float8_e4m3fn"),
    (lambda: ops.per_token_group_dequant(torch.empty(4, 256, dtype=FP8), torch.empty(2, 4).t()),
     ValueError, "`s` must be contiguous"),
    (lambda: ops.per_token_group_dequant(torch.empty(4, 256, dtype=FP8), torch.empty(4, 2, dtype=BF16)),
     TypeError, "`s` has dtype torch.bfloat16; expected torch.float32"),
    (lambda: ops.per_block_dequant(torch.empty(129, 256, dtype=FP8), torch.empty(1, 2)),
     ValueError, r"`s` has shape \(1, 2\); expected \(2, 2\)"),
    (lambda: ops.per_token_group_quant_fp8(torch.randn(4, 256, dtype=BF16)), ValueError, "TKREG_FALLBACK=reference"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_arguments_are_named(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        make()


# ---- reference semantics ------------------------------------------------------------------------
def _x(m, k, dt=BF16, spread=12):
    g = torch.randn(m, k // 128, 128) * 2.0 ** torch.randint(-spread, spread + 1, (m, k // 128, 1)).float()
    return g.view(m, k).to(dt)


@pytest.mark.parametrize("dt", [BF16, FP16])
def test_scale_is_the_correctly_rounded_quotient(dt, seed):
    x = _x(64, 1024, dt, spread=6)
    q, s = ref.per_token_group_quant_fp8(x)
    amax = x.float().view(64, 8, 128).abs().amax(-1).clamp_min(1e-4)
    assert torch.equal(s, (amax.double() / 448).float())               # not amax * fl(1/448)
    inv = (448 / amax.double()).float()
    want = (x.float().view(64, 8, 128) * inv[..., None]).to(FP8).view(64, 1024)
    assert torch.equal(q.view(torch.uint8), want.view(torch.uint8))
    top = x.float().view(64, 8, 128).abs().argmax(-1, keepdim=True)    # each group's amax -> +-448
    hit = q.float().view(64, 8, 128).gather(-1, top).abs()
    assert (hit[amax > 1e-4] == 448).all()


def test_amax_floor_and_zero_groups():
    x = torch.zeros(2, 256, dtype=BF16)
    x[1, 128:] = 1e-6
    q, s = ref.per_token_group_quant_fp8(x)
    floor = (torch.tensor(1e-4, dtype=torch.float64) / 448).float()
    assert (s == floor).all()
    assert (q.float()[0] == 0).all()
    assert torch.allclose(q.float()[1, 128:], torch.full((128,), 1e-6 * 448 / 1e-4), rtol=2 ** -4)


@pytest.mark.parametrize("dt", [BF16, FP16])
def test_ue8m0_scales_are_powers_of_two_rounded_up(dt, seed):
    x = _x(33, 2048, dt, spread=8)
    _, s = ref.per_token_group_quant_fp8(x, ue8m0=True)
    mant, _ = torch.frexp(s)
    assert (mant == 0.5).all()
    exact = (x.float().view(33, 16, 128).abs().amax(-1).clamp_min(1e-4).double() / 448).float().double()
    assert (s.double() >= exact).all() and (s.double() < 2 * exact).all()
    q, _ = ref.per_token_group_quant_fp8(x, ue8m0=True)
    assert q.float().abs().max() <= 448
    p = torch.tensor([448.0, 896.0, 1000.0], dtype=BF16).repeat_interleave(128).view(3, 128)  # amax/448 = 1, 2, 2.23
    assert ref.per_token_group_quant_fp8(p, ue8m0=True)[1].flatten().tolist() == [1.0, 2.0, 4.0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 9), kg=st.integers(1, 6), dt=st.sampled_from([BF16, FP16]), ue8m0=st.booleans(),
       spread=st.integers(0, 12))
def test_round_trip_error_bound(m, kg, dt, ue8m0, spread):
    """|dequant(quant(x)) - x| <= half an e4m3 step (2^-4 relative, 2^-10 * s absolute in the
    subnormals), plus bf16 rounding of the result (2^-8 relative)."""
    x = _x(m, kg * 128, dt, spread)
    q, s = ref.per_token_group_quant_fp8(x, ue8m0)
    y = ref.per_token_group_dequant(q, s).float()
    bound = x.float().abs() * (2.0 ** -4 + 2.0 ** -8) + s.repeat_interleave(128, 1) * 2.0 ** -10
    assert ((y - x.float()).abs() <= bound * 1.0001).all()


def test_block_quant_partial_blocks(seed):
    w = torch.randn(300, 1040, dtype=BF16)
    q, s = ref.per_block_quant_fp8(w)
    assert q.shape == (300, 1040) and s.shape == (3, 9)
    blk = w.float()[256:300, 1024:1040]                                  # the corner block
    assert s[2, 8] == (blk.abs().max().double() / 448).float()
    y = ref.per_block_dequant(q, s).float()
    assert ((y - w.float()).abs() <= w.float().abs() * (2 ** -4 + 2 ** -8) + s.max() * 2 ** -10).all()


def test_silu_reference_is_fp32_swiglu(seed):
    x = torch.randn(7, 512, dtype=BF16) * 3
    y = ref.swiglu_fp32(x)
    want = torch.nn.functional.silu(x[:, :256].double()) * x[:, 256:].double()
    assert torch.allclose(y.double(), want, rtol=1e-6, atol=1e-6)


# ---- the typed functions through TKREG_FALLBACK=reference on the CPU -------------------------
def test_typed_calls_route_to_the_reference_with_their_layouts_and_out(monkeypatch, seed):
    """Routing, not math: scale layouts, q=/s= buffers and views survive the trip to the reference."""
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    x = _x(5, 512)
    rq, rs = ref.per_token_group_quant_fp8(x)
    q, s = ops.per_token_group_quant_fp8(x)
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs)
    buf = torch.empty(5, 512, dtype=FP8)
    q, s = ops.per_token_group_quant_fp8(x, column_major_scales=True, q=buf)
    assert q is buf and s.shape == (5, 4) and s.stride() == (1, 8) and torch.equal(s, rs)
    q, s = ops.silu_and_mul_quant_fp8(x, ue8m0=True, column_major_scales=True)
    assert q.shape == (5, 256) and s.shape == (5, 2) and s.stride() == (1, 8)
    q, s = ops.per_block_quant_fp8(x)
    assert s.shape == (1, 4)
    assert ops.per_block_dequant(q, s).dtype == BF16
    q, s = ops.per_token_group_quant_fp8(x)
    assert torch.equal(ops.per_token_group_dequant(q, s), ref.per_token_group_dequant(q, s))


# ---- torch.compile: the custom ops' schemas and fake shapes, on the CPU through the reference --
@pytest.mark.parametrize("op, args", [
    ("per_token_group_quant_fp8", lambda: (_x(5, 512), True)),
    ("per_token_group_quant_fp8_colmajor", lambda: (_x(5, 512, FP16), False)),
    ("silu_and_mul_quant_fp8", lambda: (_x(3, 512), False)),
    ("silu_and_mul_quant_fp8_colmajor", lambda: (_x(6, 512), True)),
    ("per_block_quant_fp8", lambda: (torch.randn(130, 272, dtype=BF16), False)),
    ("per_token_group_dequant", lambda: ref.per_token_group_quant_fp8(_x(5, 256))),
    ("per_block_dequant", lambda: ref.per_block_quant_fp8(torch.randn(130, 272, dtype=BF16))),
])
def test_opcheck(op, args, monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    from tkreg.runtime import RUNTIME
    RUNTIME.torch_op(f"tkreg.{op}")
    utils = ("test_faketensor", "test_aot_dispatch_dynamic")
    if "dequant" not in op:  # test_schema multiplies the inputs, which CPU torch cannot do in e4m3
        utils = ("test_schema",) + utils
    torch.library.opcheck(getattr(torch.ops.tkreg, op).default, args(), test_utils=utils)


def test_compile_fullgraph_matches_eager(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")

    def f(x, h):
        q, s = ops.per_token_group_quant_fp8(x, ue8m0=True, column_major_scales=True)
        q2, s2 = ops.silu_and_mul_quant_fp8(h)
        return q.float() * s.repeat_interleave(128, 1), ops.per_token_group_dequant(q2, s2)

    c = torch.compile(f, fullgraph=True, backend="aot_eager")
    for m in (5, 9):
        x, h = _x(m, 512), _x(m, 512, FP16)
        for a, b in zip(c(x, h), f(x, h)):
            assert torch.equal(a, b)
