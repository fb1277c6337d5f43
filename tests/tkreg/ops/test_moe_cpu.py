"""The MoE routing family (gates, mapping, expand, combine) without a GPU: the installed variants
against kernels_src/moe's specs, explain's reasons, argument checks before launch, the reference
semantics (ties, all-equal rows, group limits, the canonical mapping, T = 0/1), and the typed
functions, torch.compile and autograd through the reference fallback."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.reference import moe as ref

ops = tkreg.ops
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
OPS = ("topk_gate", "group_limited_topk_gate", "moe_mapping", "moe_expand", "moe_expand_fp8",
       "moe_expand_fp8_colmajor", "moe_combine", "expert_counts")


def test_family_is_registered_for_both_archs(shipped):
    for name in OPS:
        assert shipped[f"tkreg.{name}"]["archs"] == ["sm_100a", "sm_90a"], name
        assert all(shipped[f"tkreg.{name}"]["variants"].values()), name


def test_wheel_ships_the_moe_specs(ships_the_specs):
    assert set(ships_the_specs("moe")) == {f"tkreg.{n}" for n in OPS}


# ---- what explain refuses, and why ---------------------------------------------------------------
def test_rules_refuse_what_the_kernels_cannot_do():
    e = tkreg.explain("topk_gate", torch.empty(3, 513), None, 8, arch="sm_90a")
    assert e.chosen is None and f"E <= {ref.MAX_EXPERTS}" in str(e)
    e = tkreg.explain("topk_gate", torch.empty(3, 8), None, 9, arch="sm_90a")
    assert e.chosen is None
    idx = torch.empty(5, 8, dtype=torch.int32)
    assert tkreg.explain("moe_mapping", idx, 256, 4, ref.padded_rows(5, 8, 256, 4), arch="sm_90a").chosen is not None
    e = tkreg.explain("moe_mapping", idx, 256, 4, 41, arch="sm_90a")     # R disagrees with the bound
    assert e.chosen is None and "R ==" in str(e)


def test_move_ops_name_the_width_rule():
    t, k, e = 9, 4, 16
    r = ref.padded_rows(t, k, e, 1)
    m = (torch.empty(t, k, dtype=torch.int32), torch.empty(r, dtype=torch.int32),
         torch.empty(e + 1, dtype=torch.int32), torch.empty(e, dtype=torch.int32))
    e1 = tkreg.explain("moe_expand", torch.empty(t, 100, dtype=BF16), *m, arch="sm_90a")
    assert e1.chosen is None and "H % 8 == 0" in str(e1)


# ---- argument checks before launch ------------------------------------------------------------
S = torch.randn(4, 256)


@pytest.mark.parametrize("make, msg", [
    (lambda: ops.topk_gate(torch.randn(4, 8), 9), r"tkreg.topk_gate: `k`=9 exceeds the number of experts E=8"),
    (lambda: ops.topk_gate(S, 0), r"tkreg.topk_gate: `k`=0; expected an int in 1..16"),
    (lambda: ops.topk_gate(S, 17), r"`k`=17"),
    (lambda: ops.topk_gate(S, 2, scoring="relu"), r"`scoring`='relu'"),
    (lambda: ops.topk_gate(torch.randn(4, 600), 2), r"E=600 experts"),
    (lambda: ops.group_limited_topk_gate(S, 8, 8, 9), r"`topk_groups`=9 exceeds `n_groups`=8"),
    (lambda: ops.group_limited_topk_gate(S, 8, 3, 2), r"E=256 experts are not divisible into `n_groups`=3"),
    (lambda: ops.group_limited_topk_gate(S, 8, 8, 0), r"`topk_groups`=0"),
    (lambda: ops.group_limited_topk_gate(torch.randn(4, 64), 9, 8, 1), r"`k`=9 exceeds the 8 experts"),
    (lambda: ops.group_limited_topk_gate(S, 8, 8, 4, num_shared=25), r"k \+ num_shared = 33"),
    (lambda: ops.moe_mapping(torch.zeros(4, 2, dtype=torch.int32), 0), r"tkreg.moe_mapping: `num_experts`=0"),
    (lambda: ops.moe_mapping(torch.zeros(4, 2, dtype=torch.int32), 8, 0), r"tkreg.moe_mapping: `alignment`=0"),
    (lambda: ops.moe_mapping(torch.zeros(8, dtype=torch.int32), 8), r"`topk_idx` must have 2 dims"),
    (lambda: ops.expert_counts(torch.zeros(4, 2, dtype=torch.int32), 513), r"tkreg.expert_counts: `num_experts`=513"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_arguments_are_named(make, msg):
    with pytest.raises(ValueError, match=msg):
        make()


def test_bad_ids_raise_with_the_debug_switch(monkeypatch):
    monkeypatch.setenv("TKREG_CHECK_INDICES", "1")
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    with pytest.raises(ValueError, match=r"tkreg.moe_mapping: `topk_idx` holds ids outside -1..7 \(max 8\)"):
        ops.moe_mapping(torch.tensor([[0, 8]], dtype=torch.int32), 8)
    ops.moe_mapping(torch.tensor([[0, -1]], dtype=torch.int32), 8)


def test_launcher_checks_name_the_tensor(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    t, k, e = 3, 2, 4
    mp = ref.moe_mapping(torch.zeros(t, k, dtype=torch.int32), e)
    m = ops.moe.MoeMapping(*mp)
    with pytest.raises(TypeError, match="`topk_weights` has dtype torch.bfloat16; expected torch.float32"):
        ops.moe_combine(torch.zeros(mp[2].shape[0], 64, dtype=BF16), m, torch.zeros(t, k, dtype=BF16))
    with pytest.raises(ValueError, match=r"`x` has shape|`row_of_slot` has shape"):
        ops.moe_expand(torch.zeros(t + 1, 64, dtype=BF16), m)


# ---- reference semantics ------------------------------------------------------------------------
def test_ties_go_to_the_lower_index():
    s = torch.zeros(3, 16)
    s[1, [3, 7, 9]] = 1.0
    idx, w = ref.topk_gate(s, None, 4, 0)
    assert idx[0].tolist() == [0, 1, 2, 3]                # all equal: ids in order
    assert idx[1].tolist() == [3, 7, 9, 0]
    idx, w = ref.topk_gate(s, None, 4, 1, True)            # softmax of an all-equal row
    assert idx[0].tolist() == [0, 1, 2, 3] and torch.allclose(w[0], torch.full((4,), 0.25))


def test_bias_shifts_selection_only():
    s = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    b = torch.tensor([10.0, 0.0, 0.0, 0.0])
    idx, w = ref.topk_gate(s, b, 2, 0)
    assert idx.tolist() == [[0, 3]] and w.tolist() == [[0.0, 3.0]]


def test_group_limited_matches_deepseek_v3():
    torch.manual_seed(0)
    t, e, g, tg, k = 64, 256, 8, 4, 8
    s = torch.randn(t, e)
    b = torch.randn(e) * 0.1
    idx, w = ref.group_limited_topk_gate(s, b, None, k, g, tg, 2, True, 2.5, k)
    # DeepSeek-V3's own formulation (modeling_deepseek.py MoEGate, noaux_tc)
    sc = s.sigmoid()
    key = sc + b
    gs = key.view(t, g, -1).topk(2, dim=-1).values.sum(-1)
    gi = gs.topk(tg, dim=-1, sorted=False).indices
    gm = torch.zeros_like(gs).scatter_(1, gi, 1).bool()
    masked = key.masked_fill(~gm.repeat_interleave(e // g, 1), float("-inf"))
    want = masked.topk(k, dim=-1).indices
    assert torch.equal(idx.long().sort(-1).values, want.sort(-1).values)
    ww = sc.gather(1, idx.long())
    torch.testing.assert_close(w, ww / ww.sum(-1, keepdim=True) * 2.5, rtol=1e-6, atol=0)
    for row in range(t):
        assert len({int(i) // (e // g) for i in idx[row]}) <= tg


def test_group_limited_extras():
    s = torch.randn(3, 16)
    mask = torch.tensor([True, False, True])
    idx, w = ref.group_limited_topk_gate(s, None, mask, 2, 4, 2, 1, True, 1.0, 4)
    assert idx.shape == (3, 4) and idx[0, 2:].tolist() == [16, 17] and w[0, 2:].tolist() == [1.0, 1.0]
    assert idx[1].tolist() == [-1] * 4 and w[1].tolist() == [0.0] * 4
    # group ties: all-equal rows keep the lowest groups
    idx, _ = ref.group_limited_topk_gate(torch.zeros(1, 16), None, None, 4, 4, 2, 0, False, 1.0, 4)
    assert idx.tolist() == [[0, 1, 2, 3]]


def test_mapping_is_canonical_and_padded():
    topk = torch.tensor([[2, 0], [0, 2], [-1, 0]], dtype=torch.int32)
    off, cnt, sor, ros = ref.moe_mapping(topk, 3, 4)
    assert cnt.tolist() == [3, 0, 2]
    assert off.tolist() == [0, 4, 4, 8]
    assert sor.shape[0] == ref.padded_rows(3, 2, 3, 4) == 6 + 3 * 3
    assert sor[:8].tolist() == [1, 2, 5, -1, 0, 3, -1, -1] and (sor[8:] == -1).all()
    assert ros.tolist() == [[4, 0], [1, 5], [-1, 2]]
    for n in range(6):                        # the two are inverse on real slots
        r = int(ros.view(-1)[n])
        assert r < 0 or int(sor[r]) == n


@pytest.mark.parametrize("t", [0, 1, 37])
def test_mapping_sizes_and_round_trip(t, seed):
    k, e, h = 4, 16, 256
    topk = torch.stack([torch.randperm(e)[:k] for _ in range(t)]).to(torch.int32) if t else \
        torch.empty(0, k, dtype=torch.int32)
    off, cnt, sor, ros = ref.moe_mapping(topk, e, 8)
    assert int(cnt.sum()) == t * k and int(off[-1]) <= sor.shape[0]
    assert torch.equal(cnt, ref.expert_counts(topk, e))
    x = torch.randn(t, h).to(BF16)
    xe = ref.moe_expand(x, ros, sor, off, cnt)
    out = ref.moe_combine(xe, ros, torch.full((t, k), 1 / k))
    assert torch.equal(out, x)


def test_every_token_to_one_expert():
    topk = torch.full((5, 1), 3, dtype=torch.int32)
    off, cnt, sor, ros = ref.moe_mapping(topk, 8, 4)
    assert cnt.tolist() == [0, 0, 0, 5, 0, 0, 0, 0] and off.tolist() == [0, 0, 0, 0, 8, 8, 8, 8, 8]
    assert sor[:8].tolist() == [0, 1, 2, 3, 4, -1, -1, -1]


def test_fp8_expand_layouts():
    t, h, k, e = 5, 256, 2, 4
    topk = torch.tensor([[0, 1], [1, 2], [3, 0], [2, 1], [0, 3]], dtype=torch.int32)
    mp = ref.moe_mapping(topk, e, 4)
    x = torch.randn(t, h).to(FP8)
    s = torch.rand(t, h // 128) + 0.5
    xe, se = ref.moe_expand_fp8(x, s, mp[3], mp[2], mp[0], mp[1])
    xc, sc = ref.moe_expand_fp8_colmajor(x, s, mp[3], mp[2], mp[0], mp[1])
    r = mp[2].shape[0]
    assert sc.shape == (h // 128, (r + 3) // 4 * 4) and torch.equal(sc[:, :r].t(), se)
    for row in range(r):
        slot = int(mp[2][row])
        if slot < 0:
            assert (xe[row].view(torch.uint8) == 0).all() and (se[row] == 0).all()
        else:
            assert torch.equal(xe[row].view(torch.uint8), x[slot // k].view(torch.uint8))
            assert torch.equal(se[row], s[slot // k])


# ---- typed functions, compile and autograd through the reference fallback ----------------------
def _pipeline(scores, bias, x, w_shared):
    idx, w = ops.group_limited_topk_gate(scores, 4, 4, 2, bias=bias, routed_scaling_factor=2.5)
    m = ops.moe_mapping(idx, scores.shape[1], 4)
    xe = ops.moe_expand(x, m)
    return ops.moe_combine(xe, m, w, shared=x * w_shared), ops.expert_counts(idx, scores.shape[1])


def test_typed_pipeline_matches_reference(fallback, seed):
    t, e, h = 6, 32, 128
    scores, bias, x = torch.randn(t, e), torch.randn(e), torch.randn(t, h).to(BF16)
    out, cnt = _pipeline(scores, bias, x, 0.5)
    idx, w = ref.group_limited_topk_gate(scores, bias, None, 4, 4, 2, 2, True, 2.5, 4)
    mp = ref.moe_mapping(idx, e, 4)
    want = ref.moe_combine(ref.moe_expand(x, mp[3], mp[2], mp[0], mp[1]), mp[3], w, x * 0.5)
    assert torch.equal(out, want) and torch.equal(cnt, ref.expert_counts(idx, e))
    i2, w2 = ops.topk_gate(scores, 3, scoring="sqrtsoftplus", renormalize=True)
    r2 = ref.topk_gate(scores, None, 3, 3, True)
    assert torch.equal(i2, r2[0]) and torch.equal(w2, r2[1])


def test_fp8_typed_layouts(fallback):
    t, h, e = 4, 256, 8
    m = ops.moe_mapping(torch.tensor([[0, 1], [1, 2], [3, 0], [2, 7]], dtype=torch.int32), e, 2)
    x = torch.randn(t, h).to(FP8)
    s = torch.rand(t, h // 128)
    xe, se = ops.moe_expand(x, m, scales=s)
    s_col = torch.zeros(h // 128, 4).copy_(s.t()).t()         # the quant ops' column-major view
    xc, sc = ops.moe_expand(x, m, scales=s_col)
    assert se.shape == sc.shape == (m.slot_of_row.shape[0], 2) and torch.equal(se, sc)
    assert sc.stride(0) == 1 and torch.equal(xe.view(torch.uint8), xc.view(torch.uint8))


def test_compile_fullgraph(fallback, seed):
    t, e, h = 6, 32, 128
    args = (torch.randn(t, e), torch.randn(e), torch.randn(t, h).to(BF16), 0.5)
    want = _pipeline(*args)
    got = torch.compile(_pipeline, fullgraph=True, backend="aot_eager")(*args)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_expand_combine_autograd(fallback, seed):
    t, e, h, k = 5, 8, 64, 2
    idx, w = ref.topk_gate(torch.randn(t, e), None, k, 1, True)
    m = ops.moe_mapping(idx, e, 4)
    x = torch.randn(t, h).to(BF16).requires_grad_()
    wr = w.clone().requires_grad_()
    out = ops.moe_combine(ops.moe_expand(x, m), m, wr)
    g = torch.randn(t, h).to(BF16)
    out.backward(g)
    # d out / d x = sum_j w_j (same token in every slot); d out / d w_j = <g, x>
    want_x = (g.float() * w.sum(-1, keepdim=True)).to(BF16)
    torch.testing.assert_close(x.grad, want_x, rtol=1e-2, atol=1e-2)
    want_w = (g.float() * x.detach().float()).sum(-1, keepdim=True).expand(t, k)
    torch.testing.assert_close(wr.grad, want_w, rtol=1e-5, atol=1e-5)
