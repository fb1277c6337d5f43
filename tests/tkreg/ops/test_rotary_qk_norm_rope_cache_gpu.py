"""qk_norm_rope_cache on a real GPU against the torch reference (run on the same GPU).

Without the norm the kernel and the reference make the same fp32 products and sums and round once:
bit for bit.  With the norm the sum of squares runs in another order and the kernel's rsqrt is
the GPU's, so a normed element may land one ulp away; the rotation then carries that ulp, so each
output element is within one ulp of its head's largest value (2^-7 * max|head| for bf16, 2^-10 for
fp16) and nearly all elements are exact.  q, k and v are views of one fused qkv buffer (never
written); the caches are checked whole (rows of padding tokens and unused slots untouched).
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

pytestmark = pytest.mark.gpu
DEV = "cuda"
BF16, FP16 = torch.bfloat16, torch.float16
I64 = torch.int64
ULP = {BF16: 2 ** -7, FP16: 2 ** -10}


def make_cache(p, d, dt, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32, device=DEV) / d))
    f = torch.outer(torch.arange(p, dtype=torch.float32, device=DEV), inv)
    return torch.cat((f.cos(), f.sin()), dim=-1).to(dt)


def problem(t, hq, hk, d, dt, norm, ps, pad=True, p=8192):
    """(qkv, args, kwargs) with q/k/v views of qkv and (ps > 0) caches with 3 spare pages."""
    qkv = (torch.randn(t, (hq + 2 * hk) * d, device=DEV) * 3).to(dt)
    q, k, v = qkv.view(t, hq + 2 * hk, d).split([hq, hk, hk], 1)
    kw = {}
    if norm:
        kw["q_weight"] = (torch.rand(d, device=DEV) + 0.5).to(dt)
        kw["k_weight"] = (torch.rand(d, device=DEV) + 0.5).to(dt)
    if ps:
        pages = -(-t // ps) + 3
        kw["k_cache"] = torch.randn(pages, ps, hk, d, device=DEV).to(dt)
        kw["v_cache"] = torch.randn(pages, ps, hk, d, device=DEV).to(dt)
        slots = torch.randperm(pages * ps, device=DEV)[:t].to(I64)
        if pad:
            slots[::3] = -1                                   # padding tokens
        kw["slot_mapping"] = slots
    pos = torch.randint(0, p, (t,), dtype=I64, device=DEV)
    return qkv, (q, k, v, pos, make_cache(p, d, dt)), kw


def close(got, want, dt, exact, what):
    assert got.shape == want.shape and got.dtype == want.dtype, what
    if exact:
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m: f"{what}: {m}")
        return
    g, w = got.float(), want.float()
    bound = ULP[dt] * w.abs().amax(-1, keepdim=True)          # one ulp of the head's largest value
    bad = (g - w).abs() > bound
    assert not bad.any(), f"{what}: {int(bad.sum())} elements beyond one ulp of their head's max"
    assert (g != w).float().mean() < 0.02, f"{what}: {(g != w).float().mean():.3%} of elements differ"


def run_both(args, kw, neox):
    want_kw = {n: (x.clone() if n in ("k_cache", "v_cache") else x) for n, x in kw.items()}
    want = reference.qk_norm_rope_cache(*args, **want_kw, is_neox=neox)
    got = tkreg.ops.qk_norm_rope_cache(*args, **kw, is_neox=neox)
    return got, want, want_kw


@pytest.mark.parametrize("ps", [16, 64])
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("hq, hk", [(32, 8), (16, 16), (64, 4)])
@pytest.mark.parametrize("t", [1, 7, 4096])
def test_matches_reference(t, hq, hk, d, neox, norm, ps, seed):
    dt = BF16
    qkv, args, kw = problem(t, hq, hk, d, dt, norm, ps)
    qkv0 = qkv.clone()
    (qo, ko), (wq, wk), want_kw = run_both(args, kw, neox)
    what = f"T={t} HQ={hq} HK={hk} D={d} {'neox' if neox else 'gptj'} norm={norm} PS={ps}"
    assert qo.is_contiguous() and ko.is_contiguous()
    close(qo, wq, dt, not norm, what + " q_out")
    close(ko, wk, dt, not norm, what + " k_out")
    close(kw["k_cache"], want_kw["k_cache"], dt, not norm, what + " k_cache")
    torch.testing.assert_close(kw["v_cache"], want_kw["v_cache"], rtol=0, atol=0)   # v is copied
    assert torch.equal(qkv, qkv0), what + ": wrote into qkv"


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("d", [64, 128])
def test_fp16_without_cache(d, norm, seed):
    _, args, kw = problem(37, 8, 2, d, FP16, norm, 0)
    (qo, ko), (wq, wk), _ = run_both(args, kw, True)
    close(qo, wq, FP16, not norm, "q_out")
    close(ko, wk, FP16, not norm, "k_out")


def test_other_strides_and_head_counts(seed):
    """Head-major k/v (token stride D), odd head counts, q from a wider buffer."""
    t, d = 19, 128
    q = torch.randn(t, 9, 2 * d, device=DEV).to(BF16)[..., d:]        # head stride 2D
    k = torch.randn(3, t, d, device=DEV).to(BF16).transpose(0, 1)      # [t, 3, d], token stride d
    v = torch.randn(3, t, d, device=DEV).to(BF16).transpose(0, 1)
    pos = torch.randint(0, 512, (t,), dtype=I64, device=DEV)
    kw = dict(q_weight=torch.rand(d, device=DEV).to(BF16), k_weight=torch.rand(d, device=DEV).to(BF16),
              k_cache=torch.zeros(4, 8, 3, d, device=DEV, dtype=BF16), v_cache=torch.zeros(4, 8, 3, d, device=DEV, dtype=BF16),
              slot_mapping=torch.arange(t, device=DEV, dtype=I64) * 31 % 32)
    (qo, ko), (wq, wk), want_kw = run_both((q, k, v, pos, make_cache(512, d, BF16)), kw, False)
    close(qo, wq, BF16, False, "q_out")
    close(ko, wk, BF16, False, "k_out")
    close(kw["k_cache"], want_kw["k_cache"], BF16, False, "k_cache")
    torch.testing.assert_close(kw["v_cache"], want_kw["v_cache"], rtol=0, atol=0)


def test_positions_are_clamped_and_zero_tokens(seed):
    _, (q, k, v, _, cs), kw = problem(7, 4, 2, 64, BF16, False, 16, p=100)
    pos = torch.tensor([-1, 0, 99, 100, 2 ** 40, -(2 ** 40), 57], dtype=I64, device=DEV)
    (qo, ko), (wq, wk), _ = run_both((q, k, v, pos, cs), kw, True)
    close(qo, wq, BF16, True, "q_out")
    close(ko, wk, BF16, True, "k_out")
    _, args, kw = problem(0, 4, 2, 64, BF16, True, 16)
    kc = kw["k_cache"].clone()
    qo, ko = tkreg.ops.qk_norm_rope_cache(*args, **kw)
    assert qo.shape == (0, 4, 64) and ko.shape == (0, 2, 64) and torch.equal(kw["k_cache"], kc)


def test_cuda_graph_replay(seed):
    qkv, args, kw = problem(37, 32, 8, 128, BF16, True, 16, pad=False)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        tkreg.ops.qk_norm_rope_cache(*args, **kw)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        qo, ko = tkreg.ops.qk_norm_rope_cache(*args, **kw)
    for _ in range(2):
        qkv.copy_(torch.randn_like(qkv, dtype=torch.float32).to(BF16))
        args[3].copy_(torch.randint(0, 8192, (37,), dtype=I64, device=DEV))
        want_kw = {n: (x.clone() if n in ("k_cache", "v_cache") else x) for n, x in kw.items()}
        wq, wk = reference.qk_norm_rope_cache(*args, **want_kw)
        g.replay()
        torch.cuda.synchronize()
        close(qo, wq, BF16, False, "graph q_out")
        close(ko, wk, BF16, False, "graph k_out")
        close(kw["k_cache"], want_kw["k_cache"], BF16, False, "graph k_cache")
