"""rms_norm_heads (qk-norm on strided views) without a GPU: which calls get a kernel, validation,
the reference, and the typed rms_norm's routing of a strided [T, H, N] x."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

BF16, FP16 = torch.bfloat16, torch.float16


def qkv_slices(t=5, hq=4, hk=2, d=128, dt=BF16):
    """The q and k slices of a fused qkv output: [T, H, D] views with token stride (HQ + 2 HK) * D."""
    qkv = torch.randn(t, (hq + 2 * hk) * d).to(dt)
    q, k, _ = qkv.view(t, hq + 2 * hk, d).split([hq, hk, hk], 1)
    return q, k


def test_registered_for_both_archs(shipped):
    have = shipped["tkreg.rms_norm_heads"]
    assert have["archs"] == ["sm_100a", "sm_90a"] and all(have["variants"].values()), have["variants"]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("dt", [BF16, FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [8, 64, 96, 128, 256])
def test_head_dims_have_a_kernel(d, dt, arch):
    q, k = qkv_slices(d=d, dt=dt)
    for x in (q, k, q.transpose(0, 1).contiguous().transpose(0, 1)):     # fused slices, head-major
        e = tkreg.explain("rms_norm_heads", x, torch.empty(d, dtype=dt), arch=arch)
        assert e.chosen is not None, str(e)


@pytest.mark.parametrize("make, why", [
    (lambda: (qkv_slices(d=512)[0], torch.empty(512, dtype=BF16)), "N > 128 and N <= 256"),
    (lambda: (qkv_slices(d=100)[0], torch.empty(100, dtype=BF16)), "N % 8 == 0 and N > 64"),
    (lambda: (torch.empty(3 * 260, dtype=BF16).as_strided((3, 4, 64), (260, 64, 1)), torch.empty(64, dtype=BF16)),
     "st % 8 == 0"),
])
def test_no_variant_says_why(make, why):
    e = tkreg.explain("rms_norm_heads", *make(), arch="sm_90a")
    assert e.chosen is None and why in str(e), str(e)


@pytest.mark.parametrize("make, err, msg", [
    (lambda: (qkv_slices()[0], torch.empty(64, dtype=BF16)), ValueError, r"`weight` has shape \(64,\); expected \(128,\)"),
    (lambda: (qkv_slices()[0], torch.empty(128, dtype=FP16)), TypeError, "`weight` has dtype torch.float16"),
    (lambda: (qkv_slices()[0][..., ::2], torch.empty(64, dtype=BF16)), ValueError, "`x`"),
    (lambda: (qkv_slices()[0], torch.empty(128, dtype=BF16)), ValueError, "on the CPU.*TKREG_FALLBACK=reference"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_input(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        tkreg.ops.rms_norm_heads(*make())


def test_reference_is_rms_norm_per_head(seed):
    q, _ = qkv_slices(t=7, hq=3, d=64)
    w = torch.randn(64, dtype=BF16)
    got = reference.rms_norm_heads(q, w, 1e-5)
    assert got.is_contiguous() and got.shape == q.shape
    want = reference.rms_norm(q.contiguous().view(21, 64), w, 1e-5).view(7, 3, 64)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_typed_rms_norm_routes_strided_heads(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    q, k = qkv_slices(t=6, hq=4, hk=2, d=128)
    w = torch.randn(128, dtype=BF16)
    for x in (q, k):
        got = tkreg.ops.rms_norm(x, w, 1e-6)
        assert got.is_contiguous() and got.shape == x.shape
        torch.testing.assert_close(got, reference.rms_norm(x, w, 1e-6), rtol=0, atol=0)
    out = torch.empty(6, 4, 128, dtype=BF16)
    assert tkreg.ops.rms_norm(q, w, out=out) is out
    x2 = torch.randn(5, 256, dtype=BF16)                                 # contiguous 2-D: today's op
    torch.testing.assert_close(tkreg.ops.rms_norm(x2, w.repeat(2)), reference.rms_norm(x2, w.repeat(2)), rtol=0, atol=0)


def test_typed_rms_norm_of_strided_heads_is_differentiable(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    qkv = torch.randn(3, 4 * 64, dtype=BF16, requires_grad=True)
    q = qkv.view(3, 4, 64)[:, :2]
    w = torch.randn(64, dtype=BF16, requires_grad=True)
    tkreg.ops.rms_norm(q, w).float().sum().backward()
    assert qkv.grad is not None and w.grad is not None and qkv.grad[:, 128:].abs().sum() == 0


def test_torch_compile_traces_without_graph_break(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    q, _ = qkv_slices(t=5, d=64)
    w = torch.randn(64, dtype=BF16)
    got = torch.compile(lambda x, w: tkreg.ops.rms_norm(x, w) * 1, fullgraph=True, backend="eager")(q, w)
    torch.testing.assert_close(got, reference.rms_norm(q, w), rtol=0, atol=0)


def test_typed_rms_norm_of_a_contiguous_3d_x(monkeypatch, seed):
    """One token's slice is contiguous to torch (size-1 dims): it runs as [H, N] on today's kernel."""
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    q, _ = qkv_slices(t=1, hq=4, d=64)
    assert q.is_contiguous()
    w = torch.randn(64, dtype=BF16)
    got = tkreg.ops.rms_norm(q, w)
    assert got.shape == (1, 4, 64)
    torch.testing.assert_close(got, reference.rms_norm(q, w), rtol=0, atol=0)
    out = torch.empty(1, 4, 64, dtype=BF16)
    assert tkreg.ops.rms_norm(q, w, out=out) is out


def test_typed_rms_norm_of_heads_wider_than_served_copies(monkeypatch, seed):
    """Heads wider than rms_norm_heads serves (no variant there) run on the [T * H, N] kernels."""
    from tkreg.ops import norm
    from tkreg.reference.norm import HEAD_MAX_N
    monkeypatch.setenv("TKREG_FALLBACK", "reference")

    def refuse(*a, **k):
        raise AssertionError("rms_norm_heads has no variant for this head size")
    monkeypatch.setattr(norm, "rms_norm_heads", refuse)
    d = 2 * HEAD_MAX_N
    q, _ = qkv_slices(t=3, hq=2, d=d)
    w = torch.randn(d, dtype=BF16)
    torch.testing.assert_close(tkreg.ops.rms_norm(q, w), reference.rms_norm(q, w), rtol=0, atol=0)
