"""The MoE routing family on a real GPU, from the installed wheel, against tkreg.reference.moe.

Indices are exact (ties included: the kernels and the reference order the same fp32 keys; sigmoid
and sqrtsoftplus use the same expf/log1pf/sqrtf and IEEE division as torch's CUDA kernels).
Softmax sums in a different order than torch, so its weights are compared at 1e-6 relative and
its indices on inputs without near-ties of the softmax key.  Mapping, expand and combine are
bit-exact; expand rows past expert_offsets[E] are not written, so only [:expert_offsets[E]] is
compared.
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.reference import moe as ref

pytestmark = pytest.mark.gpu
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
ops = tkreg.ops


def same(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    if got.dtype == FP8:
        got, want = got.view(torch.uint8), want.view(torch.uint8)
    bad = (got != want).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} mismatches, first at {bad[0].tolist()}: " \
                             f"{got[tuple(bad[0])]} vs {want[tuple(bad[0])]}"


def tied_scores(t, e, dt):
    """Random scores with exact ties (values from a small grid), an all-equal row, a one-hot row."""
    s = torch.randint(-8, 8, (t, e), device="cuda").float() / 4
    if t > 2:
        s[0] = 0.5
        s[1] = -1.0
        s[1, e // 2] = 3.0
    return s.to(dt)


# ---- gating -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [torch.float32, BF16])
@pytest.mark.parametrize("t", [1, 37, 4099])
@pytest.mark.parametrize("scoring", ["none", "sigmoid", "sqrtsoftplus", "softmax"])
@pytest.mark.parametrize("e, k", [(8, 2), (128, 8), (256, 8), (512, 16), (72, 6)])
def test_topk_gate_matches_reference(e, k, scoring, t, dt, seed):
    code = ref.SCORINGS[scoring]
    for s in (tied_scores(t, e, dt), torch.randn(t, e, device="cuda").to(dt)):
        bias = None if scoring == "softmax" else torch.randn(e, device="cuda") * 0.1
        for renorm in (False, True):
            idx, w = ops.topk_gate(s, k, scoring=scoring, bias=bias, renormalize=renorm, routed_scaling_factor=1.5)
            ri, rw = ref.topk_gate(s, bias, k, code, renorm, 1.5)
            same(idx, ri, f"topk_gate idx {scoring} E={e} k={k} T={t} {dt}")
            # softmax: torch sums exp() in another order (a few ulps of the sum)
            tol = 1e-5 if code == 1 and not renorm else 1e-6
            torch.testing.assert_close(w, rw, rtol=tol, atol=1e-12)


@pytest.mark.parametrize("dt", [torch.float32, BF16])
@pytest.mark.parametrize("t", [1, 64, 4096])
@pytest.mark.parametrize("e, g, tg, k", [(256, 8, 4, 8), (64, 8, 3, 6), (160, 32, 8, 16), (16, 4, 1, 2)])
def test_group_limited_matches_reference(e, g, tg, k, t, dt, seed):
    for s in (tied_scores(t, e, dt), torch.randn(t, e, device="cuda").to(dt)):
        bias = torch.randn(e, device="cuda") * 0.1
        idx, w = ops.group_limited_topk_gate(s, k, g, tg, bias=bias, routed_scaling_factor=2.5)
        ri, rw = ref.group_limited_topk_gate(s, bias, None, k, g, tg, 2, True, 2.5, k)
        same(idx, ri, f"group_limited idx E={e} groups {g}/{tg} k={k} T={t} {dt}")
        torch.testing.assert_close(w, rw, rtol=1e-6, atol=0)


def test_group_limited_extras(seed):
    t, e = 100, 256
    s = torch.randn(t, e, device="cuda")
    mask = torch.rand(t, device="cuda") > 0.3
    idx, w = ops.group_limited_topk_gate(s, 8, 8, 4, num_shared=2, mask=mask, scoring="softmax",
                                         renormalize=False)
    ri, rw = ref.group_limited_topk_gate(s, None, mask, 8, 8, 4, 1, False, 1.0, 10)
    same(idx, ri, "shared + mask idx")
    torch.testing.assert_close(w, rw, rtol=1e-5, atol=1e-12)


# ---- mapping ----------------------------------------------------------------------------------
def routed(t, k, e, skew=False):
    if skew:   # a hot expert and ids of -1
        idx = torch.where(torch.rand(t, k, device="cuda") < 0.5, 3, torch.randint(0, e, (t, k), device="cuda"))
        idx[::7, 0] = -1
        return idx.to(torch.int32)
    return torch.rand(t, e, device="cuda").topk(k, dim=-1).indices.to(torch.int32)


@pytest.mark.parametrize("t, k, e, a", [(0, 8, 256, 128), (1, 8, 256, 128), (1, 1, 8, 1), (64, 8, 256, 16),
                                        (4097, 8, 256, 128), (16384, 8, 256, 128), (3000, 6, 160, 1),
                                        (777, 16, 512, 64), (16384, 8, 128, 1)])
@pytest.mark.parametrize("skew", [False, True])
def test_mapping_matches_reference(t, k, e, a, skew, seed):
    idx = routed(t, k, e, skew) if t else torch.empty(0, k, dtype=torch.int32, device="cuda")
    m = ops.moe_mapping(idx, e, a)
    want = ref.moe_mapping(idx, e, a)
    for name, g, w in zip(m._fields, m, want):
        same(g, w, f"mapping {name} T={t} k={k} E={e} align={a}")
    same(ops.expert_counts(idx, e), want[1], "expert_counts")
    again = ops.moe_mapping(idx, e, a)            # identical across runs
    for g, w in zip(m, again):
        same(g, w, "mapping rerun")


def test_all_tokens_to_one_expert():
    idx = torch.full((5000, 1), 7, dtype=torch.int32, device="cuda")
    m = ops.moe_mapping(idx, 16, 128)
    for name, g, w in zip(m._fields, m, ref.moe_mapping(idx, 16, 128)):
        same(g, w, name)


# ---- expand / combine ---------------------------------------------------------------------------
@pytest.mark.parametrize("t, h, k, e, a", [(1, 7168, 8, 256, 128), (37, 4096, 8, 256, 16), (1000, 2048, 6, 64, 1),
                                           (513, 1032, 2, 8, 4), (0, 1024, 8, 256, 128), (300, 1024, 12, 64, 8),
                                           (200, 7168, 8, 256, 128)])
def test_expand_combine_round_trip(t, h, k, e, a, seed):
    idx = routed(t, k, e) if t else torch.empty(0, k, dtype=torch.int32, device="cuda")
    m = ops.moe_mapping(idx, e, a)
    x = torch.randn(t, h, device="cuda").to(BF16)
    xe = ops.moe_expand(x, m)
    used = int(m.expert_offsets[-1])
    want = ref.moe_expand(x, m.row_of_slot, m.slot_of_row, m.expert_offsets, m.counts)
    same(xe[:used], want[:used], f"expand T={t} H={h}")
    # identity experts, weights 1/k: the input back (exact: k is a power of two or the sums round once)
    w = torch.full((t, k), 1.0 / k, device="cuda")
    out = ops.moe_combine(xe, m, w)
    same(out, ref.moe_combine(xe, m.row_of_slot, w), "combine")
    if k & (k - 1) == 0:
        same(out, x, "round trip")
    shared = torch.randn(t, h, device="cuda").to(BF16)
    wr = torch.rand(t, k, device="cuda")
    same(ops.moe_combine(xe, m, wr, shared=shared), ref.moe_combine(xe, m.row_of_slot, wr, shared), "combine+shared")


@pytest.mark.parametrize("col", [False, True])
@pytest.mark.parametrize("t, h", [(1, 7168), (300, 2048), (4096, 7168), (37, 1152), (0, 1024)])
def test_fp8_expand(t, h, col, seed):
    # H = 1152: 9 scale groups, a partial chunk in the column-major scale pass
    k, e, a = 8, 256, 128
    m = ops.moe_mapping(routed(t, k, e) if t else torch.empty(0, k, dtype=torch.int32, device="cuda"), e, a)
    q, s = ops.per_token_group_quant_fp8(torch.randn(t, h, device="cuda").to(BF16), column_major_scales=col)
    xe, se = ops.moe_expand(q, m, scales=s)
    used = int(m.expert_offsets[-1])
    wq, ws = ref.moe_expand_fp8(q, s, m.row_of_slot, m.slot_of_row, m.expert_offsets, m.counts)
    same(xe[:used], wq[:used], "fp8 expand codes")
    same(se[:used], ws[:used], "fp8 expand scales")
    if col and t:      # (an empty buffer's strides say nothing)
        assert se.stride(0) == 1 and se.stride(1) == (xe.shape[0] + 3) // 4 * 4


def test_skipped_slots_and_masked_tokens(seed):
    t, e, h = 200, 64, 1024
    idx, w = ops.group_limited_topk_gate(torch.randn(t, e, device="cuda"), 4, 8, 2,
                                         mask=torch.rand(t, device="cuda") > 0.2)
    m = ops.moe_mapping(idx, e, 8)
    x = torch.randn(t, h, device="cuda").to(BF16)
    out = ops.moe_combine(ops.moe_expand(x, m), m, w)
    mp = ref.moe_mapping(idx, e, 8)
    same(out, ref.moe_combine(ref.moe_expand(x, mp[3], mp[2], mp[0], mp[1]), mp[3], w), "masked")


# ---- graphs, compile, autograd --------------------------------------------------------------------
def _route(scores, bias, x):
    idx, w = ops.group_limited_topk_gate(scores, 8, 8, 4, bias=bias, routed_scaling_factor=2.5)
    m = ops.moe_mapping(idx, scores.shape[1], 16)
    return ops.moe_combine(ops.moe_expand(x, m), m, w)


@pytest.mark.parametrize("t", [1, 16, 64])
def test_cuda_graph_decode(t, seed):
    scores, bias = torch.randn(t, 256, device="cuda"), torch.randn(256, device="cuda")
    x = torch.randn(t, 7168, device="cuda").to(BF16)
    want = _route(scores, bias, x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = _route(scores, bias, x)
    scores.copy_(torch.randn_like(scores))
    want = _route(scores, bias, x)
    g.replay()
    torch.cuda.synchronize()
    same(out, want, "graph replay")


def test_compile_fullgraph(seed):
    t = 33
    args = (torch.randn(t, 256, device="cuda"), torch.randn(256, device="cuda"),
            torch.randn(t, 2048, device="cuda").to(BF16))
    same(torch.compile(_route, fullgraph=True)(*args), _route(*args), "compiled")


def test_autograd(seed):
    t, e, h, k = 64, 32, 512, 4
    idx, w = ops.topk_gate(torch.randn(t, e, device="cuda"), k, renormalize=True)
    m = ops.moe_mapping(idx, e, 8)
    x = torch.randn(t, h, device="cuda").to(BF16).requires_grad_()
    wr = w.clone().requires_grad_()
    out = ops.moe_combine(ops.moe_expand(x, m), m, wr)
    g = torch.randn(t, h, device="cuda").to(BF16)
    out.backward(g)
    torch.testing.assert_close(x.grad, (g.float() * w.sum(-1, keepdim=True)).to(BF16), rtol=1e-2, atol=1e-2)
    want_w = (g.float() * x.detach().float()).sum(-1, keepdim=True).expand(t, k)
    torch.testing.assert_close(wr.grad, want_w, rtol=1e-4, atol=1e-4)
