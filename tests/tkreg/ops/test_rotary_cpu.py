"""rotary_embedding without a GPU: the installed variants against kernels_src/rotary's specs,
explain's reasons, validation, and the reference's semantics."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

BF16, FP16 = torch.bfloat16, torch.float16
I64 = torch.int64


def cache(p, d, dtype=BF16, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    f = torch.outer(torch.arange(p, dtype=torch.float64), inv)
    return torch.cat((f.cos(), f.sin()), dim=-1).to(dtype)


def args(t=3, hq=32, hk=8, d=128, p=64, dt=BF16):
    return (torch.randint(0, p, (t,), dtype=I64), torch.randn(t, hq * d, dtype=dt),
            torch.randn(t, hk * d, dtype=dt), cache(p, d, dt))


def test_wheel_ships_the_rotary_specs(ships_the_specs):
    assert set(ships_the_specs("rotary")) == {"tkreg.rotary_embedding", "tkreg.qk_norm_rope_cache"}


def test_registered_for_both_archs(shipped):
    have = shipped["tkreg.rotary_embedding"]
    assert have["archs"] == ["sm_100a", "sm_90a"] and all(have["variants"].values()), have["variants"]


@pytest.mark.parametrize("make, why", [
    (lambda: args(d=96), "needs D == 128"),
    (lambda: (torch.zeros(3, dtype=I64), torch.randn(3, 200, dtype=BF16), torch.randn(3, 128, dtype=BF16), cache(8, 128)),
     "needs NQ % 128 == 0"),
    (lambda: (torch.zeros(3, dtype=I64), torch.randn(3, 128, dtype=BF16), torch.randn(3, 0, dtype=BF16), cache(8, 128)),
     "NK > 0"),
    (lambda: (torch.zeros(3, dtype=I64), torch.randn(3, 128, dtype=BF16), torch.randn(3, 128, dtype=BF16), cache(0, 128)),
     "P > 0"),
])
def test_no_variant_says_why(make, why):
    e = tkreg.explain("rotary_embedding", *make(), arch="sm_90a")
    assert e.chosen is None and why in str(e), str(e)


@pytest.mark.parametrize("make, err, msg", [
    (lambda: (torch.zeros(3, dtype=torch.int32),) + args()[1:], TypeError, "`positions` has dtype torch.int32; expected torch.int64"),
    (lambda: args()[:3] + (cache(64, 128, torch.float32),), TypeError, "`cos_sin_cache` has dtype torch.float32; expected torch.bfloat16"),
    (lambda: args()[:2] + (torch.randn(3, 1024, dtype=FP16), cache(64, 128)), TypeError, "`k` has dtype torch.float16"),
    (lambda: (torch.zeros(4, dtype=I64),) + args()[1:], ValueError, r"`q` has shape \(3, 4096\); expected \(4, 4096\)"),
    (lambda: args()[:3] + (cache(64, 128)[:, :64],), ValueError, "`cos_sin_cache` must be contiguous"),
    (lambda: args(), ValueError, "on the CPU.*TKREG_FALLBACK=reference"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_input(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        tkreg.ops.rotary_embedding(*make())


# ---- reference semantics -----------------------------------------------------------------
def rotate_complex(x, cs, pos, neox):
    """Independent formula: pairs as complex numbers times exp(i * theta), in float64."""
    t, d = x.shape[0], cs.shape[1]
    x = x.double().view(t, -1, d)
    c, s = cs.double()[pos].chunk(2, dim=-1)
    rot = torch.complex(c, s)[:, None]                       # [T, 1, D/2]
    if neox:
        z = torch.complex(x[..., : d // 2], x[..., d // 2:]) * rot
        return torch.cat((z.real, z.imag), dim=-1).view(t, -1)
    z = torch.complex(x[..., 0::2], x[..., 1::2]) * rot
    return torch.stack((z.real, z.imag), dim=-1).view(t, -1)


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("d", [64, 128])
def test_reference_vs_complex_rotation(neox, dt, d, seed):
    pos, q, k, cs = args(37, 4, 2, d, p=4096, dt=dt)
    q0, k0 = q.clone(), k.clone()
    qp, kp = q.data_ptr(), k.data_ptr()
    assert reference.rotary_embedding(pos, q, k, cs, neox) is None
    assert q.data_ptr() == qp and k.data_ptr() == kp                      # in place
    for got, x0 in ((q, q0), (k, k0)):
        want = rotate_complex(x0, cs, pos, neox)
        tol = dict(rtol=2 ** -7, atol=1e-2) if dt == BF16 else dict(rtol=2 ** -10, atol=2e-3)
        torch.testing.assert_close(got.double(), want, **tol)


def test_reference_rounds_once_from_fp32_products(seed):
    pos, q, k, cs = args(5, 2, 1, 64)
    q0 = q.clone()
    reference.rotary_embedding(pos, q, k, cs, True)
    x, c = q0.float().view(5, 2, 64), cs.float()[pos][:, None]
    x1, x2, co, si = x[..., :32], x[..., 32:], c[..., :32], c[..., 32:]
    want = torch.cat((x1 * co - x2 * si, x2 * co + x1 * si), dim=-1).to(BF16).view(5, -1)
    torch.testing.assert_close(q, want, rtol=0, atol=0)


def test_gptj_is_neox_on_interleaved_lanes(seed):
    """gptj on x == neox on x with its pairs de-interleaved into halves, then re-interleaved."""
    pos, q, k, cs = args(9, 3, 1, 128, p=512)
    perm = torch.cat((torch.arange(0, 128, 2), torch.arange(1, 128, 2)))
    qn, kn = (x.view(9, -1, 128)[..., perm].reshape(9, -1).clone() for x in (q, k))
    reference.rotary_embedding(pos, q, k, cs, False)
    reference.rotary_embedding(pos, qn, kn, cs, True)
    inv = torch.argsort(perm)
    torch.testing.assert_close(q, qn.view(9, -1, 128)[..., inv].reshape(9, -1), rtol=0, atol=0)
    torch.testing.assert_close(k, kn.view(9, -1, 128)[..., inv].reshape(9, -1), rtol=0, atol=0)


def test_positions_are_clamped_to_the_cache(seed):
    _, q, k, cs = args(4, 2, 2, 64, p=16)
    a = (q.clone(), k.clone())
    b = (q.clone(), k.clone())
    reference.rotary_embedding(torch.tensor([-5, 0, 15, 99]), *a, cs, True)
    reference.rotary_embedding(torch.tensor([0, 0, 15, 15]), *b, cs, True)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_position_zero_is_identity(seed):
    pos, q, k, cs = args(6, 4, 4, 128)
    q0, k0 = q.clone(), k.clone()
    reference.rotary_embedding(torch.zeros(6, dtype=I64), q, k, cs, False)
    torch.testing.assert_close((q, k), (q0, k0), rtol=0, atol=0)


# ---- the CPU fallback through the typed function -----------------------------------------------
def test_typed_calls_route_to_the_reference_in_place_in_any_layout(monkeypatch, seed):
    """Routing, not math: the reference writes the caller's q and k whatever their view."""
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    pos, q, k, cs = args(6, 4, 2, 64, p=100)
    want_q, want_k = q.clone(), k.clone()
    reference.rotary_embedding(pos, want_q, want_k, cs, False)
    q3, k3 = q.view(6, 4, 64), k.view(6, 2, 64)                         # [T, H, D]
    rq, rk = tkreg.ops.rotary_embedding(pos, q3, k3, cs, False)
    assert rq is q3 and rk is k3
    torch.testing.assert_close((q, k), (want_q, want_k), rtol=0, atol=0)
    pos2, q4, k4 = pos.view(2, 3), want_q.clone().view(2, 3, 256), want_k.clone().view(2, 3, 128)  # [B, S, ...]
    tkreg.ops.rotary_embedding(pos2, q4, k4, cs)
    reference.rotary_embedding(pos, want_q, want_k, cs, True)
    torch.testing.assert_close((q4.view(6, -1), k4.view(6, -1)), (want_q, want_k), rtol=0, atol=0)
    empty = torch.empty(0, 4, 64, dtype=BF16)
    tkreg.ops.rotary_embedding(torch.empty(0, dtype=I64), empty, empty.clone(), cs)


def test_torch_compile_traces_without_graph_break(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    pos, q, k, cs = args(5, 4, 2, 128)
    want_q, want_k = q.clone(), k.clone()
    reference.rotary_embedding(pos, want_q, want_k, cs, True)

    def f(pos, q, k, cs):
        tkreg.ops.rotary_embedding(pos, q.view(5, 4, 128), k, cs, True)
        return q * 1, k * 1
    got = torch.compile(f, fullgraph=True, backend="eager")(pos, q, k, cs)
    torch.testing.assert_close(got, (want_q, want_k), rtol=0, atol=0)
