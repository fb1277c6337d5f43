"""qk_norm_rope_cache without a GPU: the installed variants, explain's reasons, validation, and the
reference against an independent composition (rms_norm + rotary_embedding references + index writes)."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

BF16, FP16 = torch.bfloat16, torch.float16
I64 = torch.int64
OP = "tkreg.qk_norm_rope_cache"


def cache(p, d, dtype=BF16, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    f = torch.outer(torch.arange(p, dtype=torch.float64), inv)
    return torch.cat((f.cos(), f.sin()), dim=-1).to(dtype)


def fused(t=7, hq=4, hk=2, d=64, p=64, dt=BF16, norm=True, pages=None, ps=16, seed=0):
    """q, k, v as views of one [T, (HQ + 2 HK) * D] qkv; positions, cos/sin; weights; caches."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(t, (hq + 2 * hk) * d, generator=g).to(dt)
    q, k, v = qkv.view(t, hq + 2 * hk, d).split([hq, hk, hk], 1)
    kw = {}
    if norm:
        kw["q_weight"] = (torch.rand(d, generator=g) + 0.5).to(dt)
        kw["k_weight"] = (torch.rand(d, generator=g) + 0.5).to(dt)
    if pages:
        kw["k_cache"] = torch.randn(pages, ps, hk, d, generator=g).to(dt)
        kw["v_cache"] = torch.randn(pages, ps, hk, d, generator=g).to(dt)
        kw["slot_mapping"] = torch.randperm(pages * ps, generator=g)[:t].to(I64)
    return (q, k, v, torch.randint(0, p, (t,), generator=g, dtype=I64), cache(p, d, dt)), kw


def composed(q, k, v, positions, cs, q_weight=None, k_weight=None, k_cache=None, v_cache=None, slot_mapping=None,
             eps=1e-6, is_neox=True):
    """The op written from the family references: norm, rotate in place, then page/row writes."""
    t, hq, d = q.shape
    hk = k.shape[1]
    qn = reference.rms_norm(q, q_weight, eps) if q_weight is not None else q.clone()
    kn = reference.rms_norm(k, k_weight, eps) if k_weight is not None else k.clone()
    qn, kn = qn.reshape(t, hq * d).contiguous(), kn.reshape(t, hk * d).contiguous()
    reference.rotary_embedding(positions, qn, kn, cs, is_neox)
    qn, kn = qn.view(t, hq, d), kn.view(t, hk, d)
    if k_cache is not None:
        ps = k_cache.shape[1]
        for i in range(t):
            s = int(slot_mapping[i])
            if s >= 0:
                k_cache[s // ps, s % ps] = kn[i]
                v_cache[s // ps, s % ps] = v[i]
    return qn, kn


def test_wheel_ships_the_op(shipped):
    have = shipped[OP]
    assert have["archs"] == ["sm_100a", "sm_90a"] and all(len(v) == 4 for v in have["variants"].values())


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("d, dt", [(64, BF16), (128, FP16)])
@pytest.mark.parametrize("ps", [16, 5])
def test_reference_is_the_composition(norm, neox, d, dt, ps):
    args, kw = fused(t=9, hq=6, hk=2, d=d, dt=dt, norm=norm, pages=4, ps=ps)
    kw["slot_mapping"][[1, 4]] = -1                              # padding tokens: not written
    kc0, vc0 = kw["k_cache"].clone(), kw["v_cache"].clone()
    want_kw = dict(kw, k_cache=kc0.clone(), v_cache=vc0.clone())
    want = composed(*args, **want_kw, eps=1e-5, is_neox=neox)
    got = reference.qk_norm_rope_cache(*args, **kw, eps=1e-5, is_neox=neox)
    for g, w in zip(got, want):
        assert g.is_contiguous() and g.dtype == dt
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    torch.testing.assert_close(kw["k_cache"], want_kw["k_cache"], rtol=0, atol=0)
    torch.testing.assert_close(kw["v_cache"], want_kw["v_cache"], rtol=0, atol=0)
    written = torch.zeros(4 * ps, dtype=torch.bool)
    written[kw["slot_mapping"][kw["slot_mapping"] >= 0]] = True
    untouched = ~written.view(4, ps)
    assert torch.equal(kw["k_cache"][untouched], kc0[untouched]) and torch.equal(kw["v_cache"][untouched], vc0[untouched])
    assert not torch.equal(kw["k_cache"], kc0)


def test_reference_without_norm_or_cache_is_rotary_of_a_copy():
    (q, k, v, pos, cs), _ = fused(t=5, norm=False)
    q0, k0 = q.clone(), k.clone()
    qo, ko = reference.qk_norm_rope_cache(q, k, v, pos, cs)
    assert torch.equal(q, q0) and torch.equal(k, k0)                # inputs untouched
    wq, wk = q0.reshape(5, -1).clone(), k0.reshape(5, -1).clone()
    reference.rotary_embedding(pos, wq, wk, cs, True)
    assert torch.equal(qo.view(5, -1), wq) and torch.equal(ko.view(5, -1), wk)


def test_norm_matches_transformers_qk_norm_up_to_its_second_rounding():
    """Qwen3RMSNorm rounds x * r to the dtype, then multiplies by w (a second rounding); tkreg rounds
    once: the two agree within one bf16 ulp of the result."""
    (q, k, v, pos, cs), kw = fused(t=6, hq=4, hk=2, d=128)
    qo, _ = reference.qk_norm_rope_cache(q, k, v, torch.zeros_like(pos), cs, **kw)   # position 0: no rotation
    xf = q.float()
    hf = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(BF16)
    stock = kw["q_weight"] * hf
    torch.testing.assert_close(qo, stock, rtol=2 ** -7, atol=0)


def test_typed_function_routes_to_the_reference(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    args, kw = fused(t=7, hq=4, hk=2, d=64, pages=3, ps=16)
    kw["slot_mapping"][0] = -1
    want_kw = dict(kw, k_cache=kw["k_cache"].clone(), v_cache=kw["v_cache"].clone())
    want = reference.qk_norm_rope_cache(*args, **want_kw, is_neox=False)
    got = tkreg.ops.qk_norm_rope_cache(*args, **kw, is_neox=False)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close((kw["k_cache"], kw["v_cache"]), (want_kw["k_cache"], want_kw["v_cache"]), rtol=0, atol=0)


def test_zero_tokens(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    args, kw = fused(t=0, pages=2)
    kc = kw["k_cache"].clone()
    qo, ko = tkreg.ops.qk_norm_rope_cache(*args, **kw)
    assert qo.shape == (0, 4, 64) and ko.shape == (0, 2, 64) and torch.equal(kw["k_cache"], kc)


def test_torch_compile_traces_without_graph_break(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    args, kw = fused(t=5, hq=4, hk=2, d=64, pages=2)
    want_kw = dict(kw, k_cache=kw["k_cache"].clone(), v_cache=kw["v_cache"].clone())
    want = reference.qk_norm_rope_cache(*args, **want_kw)

    def f(q, k, v, pos, cs, q_weight, k_weight, k_cache, v_cache, slot_mapping):
        qo, ko = tkreg.ops.qk_norm_rope_cache(q, k, v, pos, cs, q_weight=q_weight, k_weight=k_weight,
                                              k_cache=k_cache, v_cache=v_cache, slot_mapping=slot_mapping)
        return qo * 1, ko * 1
    got = torch.compile(f, fullgraph=True, backend="eager")(*args, **kw)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close((kw["k_cache"], kw["v_cache"]), (want_kw["k_cache"], want_kw["v_cache"]), rtol=0, atol=0)


def _explain(args, kw):
    names = ("q_weight", "k_weight", "k_cache", "v_cache", "slot_mapping")
    return tkreg.explain("qk_norm_rope_cache", *args, *(kw.get(n) for n in names), arch="sm_90a")


@pytest.mark.parametrize("d, hq, hk", [(64, 32, 8), (128, 16, 16), (128, 64, 4)])
@pytest.mark.parametrize("norm, pages", [(True, 4), (False, None), (True, None), (False, 4)])
def test_served_on_fused_qkv_views(d, hq, hk, norm, pages):
    args, kw = fused(t=3, hq=hq, hk=hk, d=d, norm=norm, pages=pages)
    e = _explain(args, kw)
    assert e.chosen == f"D={d},dtype=bfloat16", str(e)


@pytest.mark.parametrize("make, why", [
    (lambda: fused(d=96), "needs D == 128"),
    (lambda: (lambda a, kw: (a, dict(kw, k_weight=None)))(*fused()), "has_q_weight == has_k_weight"),
    (lambda: (lambda a, kw: (a, dict(kw, slot_mapping=None)))(*fused(pages=2)), "has_k_cache == has_slot_mapping"),
    (lambda: (lambda a, kw: ((a[0], a[1], a[2], a[3], a[4][:0]), kw))(*fused()), "P > 0"),
])
def test_no_variant_says_why(make, why):
    e = _explain(*make())
    assert e.chosen is None and why in str(e), str(e)


def test_a_stride_off_the_16_byte_grid_has_no_variant():
    buf = torch.randn(3 * 520, dtype=BF16)
    q, k, v = buf.as_strided((3, 8, 64), (516, 64, 1)).split([4, 2, 2], 1)     # token stride 516 = 4 (mod 8)
    e = tkreg.explain("qk_norm_rope_cache", q, k, v, torch.zeros(3, dtype=I64), cache(8, 64), arch="sm_90a")
    assert e.chosen is None and "sqt % 8 == 0" in str(e), str(e)


@pytest.mark.parametrize("change, err, msg", [
    (lambda a, kw: ((a[0].float(),) + a[1:], kw), TypeError, "`q` has dtype torch.float32"),
    (lambda a, kw: (a[:3] + (a[3].int(),) + a[4:], kw), TypeError, "`positions` has dtype torch.int32; expected torch.int64"),
    (lambda a, kw: (a, dict(kw, q_weight=kw["q_weight"].half())), TypeError, "`q_weight` has dtype torch.float16"),
    (lambda a, kw: (a, dict(kw, q_weight=kw["q_weight"][:32])), ValueError, r"`q_weight` has shape \(32,\); expected \(64,\)"),
    (lambda a, kw: ((a[0], a[1][:2]) + a[2:], kw), ValueError, r"`k` has shape \(2, 2, 64\); expected \(7, 2, 64\)"),
    (lambda a, kw: (a, dict(kw, v_cache=kw["v_cache"][:, :, :1])), ValueError, "`v_cache` has shape"),
    (lambda a, kw: (a, dict(kw, k_cache=kw["k_cache"].transpose(0, 1))), ValueError, "`k_cache`"),
    (lambda a, kw: (a, dict(kw, slot_mapping=kw["slot_mapping"].int())), TypeError, "`slot_mapping` has dtype torch.int32"),
    (lambda a, kw: (a[:2] + (a[2].transpose(0, 1).contiguous().transpose(0, 1),) + a[3:], kw), None, None),
    (lambda a, kw: (a, dict(kw, k_weight=None)), ValueError, "give both `q_weight` and `k_weight`"),
    (lambda a, kw: (a, dict(kw, v_cache=None)), ValueError, "`k_cache`, `v_cache` and `slot_mapping` together"),
    (lambda a, kw: (a, kw), ValueError, "on the CPU.*TKREG_FALLBACK=reference"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_input(change, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    a, kw = change(*fused(t=7, hq=4, hk=2, d=64, pages=2))
    if err is None:                                            # a head-major v: strided, served (then no GPU)
        err, msg = ValueError, "on the CPU"
    with pytest.raises(err, match=msg):
        tkreg.ops.qk_norm_rope_cache(*a, **kw)
