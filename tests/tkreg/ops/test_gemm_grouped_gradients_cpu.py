"""The grouped GEMM gradients and tkreg.grouped_gemm / grouped_gemm_masked's autograd without a GPU:
the references against float64 per-expert formulas (empty experts, Zipf-like counts, a partial last
segment, masked counts 0 and Mmax), the reference fallback, the autograd against torch autograd in
float64 (and bit for bit against the references it calls), the torch-loop fallback, main_grad,
torch.compile(fullgraph=True) forward + backward, a small MoE (moe_expand -> grouped GEMMs ->
moe_combine) forward + backward against float64 torch, and bad input named."""
from __future__ import annotations

import importlib

import pytest
import torch

import tkreg

ref = importlib.import_module("tkreg.reference.grouped_gradients")

BF16, FP16 = torch.bfloat16, torch.float16
ops = tkreg.ops


def rand(*shape, dt=BF16, scale=1.0):
    return (torch.randn(*shape) * scale).to(dt)


def offsets_of(sizes, align=128, tail=0):
    """Segments padded to `align` rows (the last one ragged: its true size), `tail` rows past them."""
    offs = [0]
    for i, s in enumerate(sizes):
        offs.append(offs[-1] + (s if i == len(sizes) - 1 else -(-s // align) * align))
    return torch.tensor(offs, dtype=torch.int32), offs[-1] + tail


# sizes per expert: uniform, an empty expert in the middle and at both ends, Zipf-like, a ragged last one
SIZES = [[128, 128, 128], [0, 200, 0, 77, 0], [300, 150, 100, 75, 60, 50], [5], [128, 0]]


def dgrad64(dy, w, offs):
    out = torch.zeros(dy.shape[0], w.shape[2], dtype=torch.float64)
    o = offs.tolist()
    for e in range(len(o) - 1):
        out[o[e]:o[e + 1]] = dy[o[e]:o[e + 1]].double() @ w[e].double()
    return out


def wgrad64(dy, x, offs):
    o = offs.tolist()
    return torch.stack([dy[o[e]:o[e + 1]].double().t() @ x[o[e]:o[e + 1]].double() for e in range(len(o) - 1)])


@pytest.mark.parametrize("sizes", SIZES, ids=str)
@pytest.mark.parametrize("dt", [BF16, FP16])
def test_contiguous_references_vs_float64(sizes, dt, seed):
    offs, m = offsets_of(sizes, tail=9)
    e, n, k = len(sizes), 24, 40
    dy, w, x = rand(m, n, dt=dt), rand(e, n, k, dt=dt), rand(m, k, dt=dt)
    dx, dw = ref.grouped_gemm_dgrad(dy, w, offs), ref.grouped_gemm_wgrad(dy, x, offs)
    assert dx.shape == (m, k) and dw.shape == (e, n, k) and dx.dtype == dw.dtype == dt
    torch.testing.assert_close(dx.double(), dgrad64(dy, w, offs), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(dw.double(), wgrad64(dy, x, offs), rtol=1e-2, atol=1e-2)
    assert not dx[offs[-1]:].any(), "rows past offsets[E] are zero"
    for i, s in enumerate(sizes):
        if s == 0:
            assert not dw[i].any(), f"empty expert {i}: dw zero"
    main = torch.randn(e, n, k)
    want = main.double() + wgrad64(dy, x, offs)
    assert ref.grouped_gemm_wgrad_accumulate(dy, x, offs, main) is None
    torch.testing.assert_close(main.double(), want, rtol=1e-4, atol=1e-4)   # fp32 sums of up to 300 terms


@pytest.mark.parametrize("dt", [BF16, FP16])
def test_masked_references_vs_float64(dt, seed):
    e, mmax, n, k = 4, 40, 16, 24
    counts = torch.tensor([0, 40, 17, 1], dtype=torch.int32)       # 0 and Mmax included
    dy, w, x = rand(e, mmax, n, dt=dt), rand(e, n, k, dt=dt), rand(e, mmax, k, dt=dt)
    dx, dw = ref.grouped_gemm_masked_dgrad(dy, w, counts), ref.grouped_gemm_masked_wgrad(dy, x, counts)
    assert dx.shape == (e, mmax, k) and dw.shape == (e, n, k)
    for i, c in enumerate(counts.tolist()):
        torch.testing.assert_close(dx[i, :c].double(), dy[i, :c].double() @ w[i].double(), rtol=1e-2, atol=1e-2)
        assert not dx[i, c:].any()
        torch.testing.assert_close(dw[i].double(), dy[i, :c].double().t() @ x[i, :c].double(), rtol=1e-2, atol=1e-2)


def test_typed_functions_route_to_the_references(fallback, seed):
    offs, m = offsets_of([128, 0, 50], tail=3)
    dy, w, x = rand(m, 16), rand(3, 16, 24), rand(m, 24)
    assert torch.equal(ops.grouped_gemm_dgrad(dy, w, offs), ref.grouped_gemm_dgrad(dy, w, offs))
    assert torch.equal(ops.grouped_gemm_wgrad(dy, x, offs), ref.grouped_gemm_wgrad(dy, x, offs))
    main = torch.zeros(3, 16, 24)
    assert ops.grouped_gemm_wgrad(dy, x, offs, main_grad=main) is main
    torch.testing.assert_close(main, ref.grouped_gemm_wgrad(dy, x, offs).float(), rtol=1e-2, atol=1e-2)
    counts = torch.tensor([3, 0, 8], dtype=torch.int32)
    dym, xm = rand(3, 8, 16), rand(3, 8, 24)
    assert torch.equal(ops.grouped_gemm_masked_dgrad(dym, w, counts), ref.grouped_gemm_masked_dgrad(dym, w, counts))
    assert torch.equal(ops.grouped_gemm_masked_wgrad(dym, xm, counts), ref.grouped_gemm_masked_wgrad(dym, xm, counts))
    out = torch.full((m, 24), float("nan"), dtype=BF16)
    assert ops.grouped_gemm_dgrad(dy, w, offs, out=out) is out and torch.equal(out, ref.grouped_gemm_dgrad(dy, w, offs))


def _torch_grouped64(a, b, offs):
    """The forward in float64 torch, differentiable: rows of expert e = a rows @ b[e]^T."""
    o = offs.tolist()
    rows = [a[o[i]:o[i + 1]] @ b[i].t() for i in range(len(o) - 1)]
    pad = a.new_zeros(a.shape[0] - o[-1], b.shape[1])
    return torch.cat([a.new_zeros(o[0], b.shape[1])] + rows + [pad])


@pytest.mark.parametrize("sizes", SIZES[:3], ids=str)
@pytest.mark.parametrize("dt", [BF16, FP16])
def test_grouped_gemm_autograd_vs_float64_torch(fallback, sizes, dt, seed):
    offs, m = offsets_of(sizes, tail=5)
    e, n, k = len(sizes), 24, 16
    a, b = rand(m, k, dt=dt).requires_grad_(), rand(e, n, k, dt=dt).requires_grad_()
    y = ops.grouped_gemm(a, b, offs)
    assert y.requires_grad
    dy = rand(m, n, dt=dt)
    y.backward(dy)
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    _torch_grouped64(a64, b64, offs).backward(dy.double())
    for got, want, name in ((a.grad, a64.grad, "da"), (b.grad, b64.grad, "db")):
        assert got.dtype == dt, name
        torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-2, msg=lambda s: f"{name}: {s}")
    # the backward is exactly the gradient ops (their references here)
    assert torch.equal(a.grad, ref.grouped_gemm_dgrad(dy, b.detach(), offs))
    assert torch.equal(b.grad, ref.grouped_gemm_wgrad(dy, a.detach(), offs))


def test_grouped_gemm_masked_autograd_vs_float64_torch(fallback, seed):
    e, mmax, n, k = 3, 20, 16, 8
    counts = torch.tensor([20, 0, 7], dtype=torch.int32)
    a, b = rand(e, mmax, k).requires_grad_(), rand(e, n, k).requires_grad_()
    dy = rand(e, mmax, n)
    ops.grouped_gemm_masked(a, b, counts).backward(dy)
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    mask = (torch.arange(mmax)[None, :] < counts[:, None]).double()[..., None]
    (torch.einsum("emk,enk->emn", a64, b64) * mask).backward(dy.double())
    torch.testing.assert_close(a.grad.double(), a64.grad, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(b.grad.double(), b64.grad, rtol=1e-2, atol=1e-2)
    assert torch.equal(a.grad, ref.grouped_gemm_masked_dgrad(dy, b.detach(), counts))


def test_autograd_only_what_is_needed_and_main_grad(fallback, seed):
    offs, m = offsets_of([128, 40])
    a, b = rand(m, 16).requires_grad_(), rand(2, 8, 16)
    ops.grouped_gemm(a, b, offs).float().sum().backward()
    assert a.grad is not None and b.grad is None
    a, b = rand(m, 16), rand(2, 8, 16).requires_grad_()
    b.main_grad = torch.ones(2, 8, 16)
    dy = rand(m, 8)
    ops.grouped_gemm(a, b, offs).backward(dy)
    assert b.grad is None
    torch.testing.assert_close(b.main_grad - 1, wgrad64(dy, a, offs).float(), rtol=1e-5, atol=1e-5)


class _Ctx:
    needs_input_grad = (True, True, False)

    def save_for_backward(self, *ts):
        self.saved_tensors = ts


@pytest.mark.parametrize("masked", [False, True])
def test_autograd_falls_back_to_torch_without_kernels(monkeypatch, masked, seed):
    """No kernel serves the CPU without TKREG_FALLBACK: a per-expert torch.matmul loop."""
    from tkreg.ops.grouped_gradients import GroupedGemmGrad, GroupedGemmMaskedGrad
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    ctx = _Ctx()
    if masked:
        groups = torch.tensor([5, 0, 8], dtype=torch.int32)
        a, b, dy = rand(3, 8, 16), rand(3, 24, 16), rand(3, 8, 24)
        GroupedGemmMaskedGrad.setup_context(ctx, (a, b, groups), None)
        da, db, dg = GroupedGemmMaskedGrad.backward(ctx, dy)
        for e, c in enumerate(groups.tolist()):
            assert torch.equal(da[e, :c], dy[e, :c] @ b[e]) and not da[e, c:].any()
            assert torch.equal(db[e], dy[e, :c].t() @ a[e, :c])
    else:
        groups, m = offsets_of([128, 0, 33], tail=4)
        a, b, dy = rand(m, 16), rand(3, 24, 16), rand(m, 24)
        GroupedGemmGrad.setup_context(ctx, (a, b, groups), None)
        da, db, dg = GroupedGemmGrad.backward(ctx, dy)
        o = groups.tolist()
        for e in range(3):
            assert torch.equal(da[o[e]:o[e + 1]], dy[o[e]:o[e + 1]] @ b[e])
            assert torch.equal(db[e], dy[o[e]:o[e + 1]].t() @ a[o[e]:o[e + 1]])
        assert not da[o[-1]:].any() and not db[1].any()
    assert dg is None


def test_grouped_autograd_compiles_fullgraph(fallback, seed, compile_matches_eager):
    offs, m = offsets_of([128, 0, 60])
    a, b1, b2 = rand(m, 16).requires_grad_(), rand(3, 32, 16).requires_grad_(), rand(3, 16, 16).requires_grad_()

    def f(a, b1, b2):
        return ops.grouped_gemm(ops.silu_and_mul(ops.grouped_gemm(a, b1, offs)), b2, offs).float().sum()
    compile_matches_eager(f, (a, b1, b2))


MOE_T, MOE_H, MOE_I, MOE_E, MOE_K = 37, 16, 8, 4, 2    # tokens, hidden, expert intermediate, experts, top-k


def small_moe_inputs():
    """x[T, H] and both expert weights (grad-tracking), router logits[T, E]."""
    x = rand(MOE_T, MOE_H).requires_grad_()
    w1 = rand(MOE_E, 2 * MOE_I, MOE_H, scale=0.5).requires_grad_()
    w2 = rand(MOE_E, MOE_H, MOE_I, scale=0.5).requires_grad_()
    return x, w1, w2, torch.randn(MOE_T, MOE_E)


def small_moe(x, w1, w2, logits, weights_grad=False):
    """(out, idx, topk weights): topk_gate -> moe_mapping (128-row segments) -> moe_expand ->
    grouped_gemm -> silu_and_mul -> grouped_gemm -> moe_combine; weights_grad: the top-k weights
    track gradients."""
    idx, wts = ops.topk_gate(logits, MOE_K)
    if weights_grad:
        wts = wts.requires_grad_()
    m = ops.moe_mapping(idx, MOE_E, alignment=128)
    h1 = ops.grouped_gemm(ops.moe_expand(x, m), w1, m.expert_offsets)
    ye = ops.grouped_gemm(ops.silu_and_mul(h1), w2, m.expert_offsets)
    return ops.moe_combine(ye, m, wts), idx, wts


def test_small_moe_forward_backward_vs_float64(fallback, seed):
    """small_moe's gradients of x, both expert weights and the router weights against the same
    layer in float64 torch (per-token loops)."""
    t, h, i, k = MOE_T, MOE_H, MOE_I, MOE_K
    x, w1, w2, logits = small_moe_inputs()
    out, idx, wts = small_moe(x, w1, w2, logits, weights_grad=True)
    dout = rand(t, h)
    out.backward(dout)

    x64, w164, w264 = (v.detach().double().requires_grad_() for v in (x, w1, w2))
    wts64 = wts.detach().double().requires_grad_()
    rows = []
    for tok in range(t):
        acc = 0
        for j in range(k):
            ex = int(idx[tok, j])
            g = x64[tok] @ w164[ex].t()
            acc = acc + wts64[tok, j] * (torch.nn.functional.silu(g[:i]) * g[i:]) @ w264[ex].t()
        rows.append(acc)
    out64 = torch.stack(rows)
    out64.backward(dout.double())
    torch.testing.assert_close(out.double(), out64.detach(), rtol=3e-2, atol=3e-2)
    for got, want, name in ((x.grad, x64.grad, "x"), (w1.grad, w164.grad, "w1"), (w2.grad, w264.grad, "w2"),
                            (wts.grad, wts64.grad, "topk_weights")):
        assert got is not None, name
        torch.testing.assert_close(got.double(), want, rtol=5e-2, atol=5e-2, msg=lambda s: f"{name}: {s}")


def test_small_moe_compiles_fullgraph(fallback, seed, compile_matches_eager):
    """small_moe under torch.compile(fullgraph=True): forward and backward traced, gradients
    bit for bit the eager ones.  Needs moe_expand's backward (tkreg.ops.moe.ExpandBackward) to call
    the moe_combine torch op while AOTAutograd traces it (there `compiling()` is False)."""
    x, w1, w2, logits = small_moe_inputs()

    def f(x, w1, w2):
        return small_moe(x, w1, w2, logits)[0].float().sum()
    compile_matches_eager(f, (x, w1, w2))


def _offs(*v):
    return torch.tensor(v, dtype=torch.int32)


@pytest.mark.parametrize("make, err, msg", [
    (lambda: ops.grouped_gemm_dgrad(rand(128, 16), rand(2, 16, 24, dt=FP16), _offs(0, 128, 128)), TypeError,
     "`w` has dtype torch.float16; expected torch.bfloat16"),
    (lambda: ops.grouped_gemm_dgrad(rand(128, 16), rand(2, 8, 24), _offs(0, 128, 128)), ValueError,
     r"tkreg.grouped_gemm_dgrad.*`w` has shape \(2, 8, 24\)"),
    (lambda: ops.grouped_gemm_dgrad(rand(128, 16), rand(2, 16, 24), _offs(0, 128)), ValueError,
     r"tkreg.grouped_gemm_dgrad.*`group_offsets`"),
    (lambda: ops.grouped_gemm_wgrad(rand(128, 16), rand(100, 24), _offs(0, 100)), ValueError,
     r"tkreg.grouped_gemm_wgrad.*`x` has shape \(100, 24\)"),
    (lambda: ops.grouped_gemm_wgrad(rand(128, 16, dt=torch.float32), rand(128, 24), _offs(0, 128)), TypeError,
     "tkreg.grouped_gemm_wgrad.*`dy` has dtype torch.float32"),
    (lambda: ops.grouped_gemm_wgrad(rand(128, 16), rand(128, 24), _offs(0, 128), main_grad=torch.zeros(1, 16, 24),
                                    out=rand(1, 16, 24)), ValueError, "give `main_grad`"),
    (lambda: ops.grouped_gemm_wgrad(rand(128, 16), rand(128, 24), _offs(0, 128), main_grad=torch.zeros(2, 16, 24)),
     ValueError, r"`main_grad` must be \[E, N, K\] with E = len\(group_offsets\) - 1 = 1"),
    (lambda: ops.grouped_gemm_wgrad(rand(128, 16), rand(128, 24), _offs(0, 128), main_grad=torch.zeros(1, 16, 24,
                                                                                                      dtype=BF16)),
     TypeError, "tkreg.grouped_gemm_wgrad_accumulate.*`main_grad` has dtype torch.bfloat16; expected torch.float32"),
    (lambda: ops.grouped_gemm_masked_dgrad(rand(2, 8, 16), rand(3, 16, 24), _offs(1, 2)), ValueError,
     r"tkreg.grouped_gemm_masked_dgrad.*`w` has shape \(3, 16, 24\)"),
    (lambda: ops.grouped_gemm_masked_wgrad(rand(2, 8, 16), rand(2, 8, 24), _offs(1, 2).long()), TypeError,
     r"tkreg.grouped_gemm_masked_wgrad.*`counts` has dtype torch.int64"),
    (lambda: ops.grouped_gemm_masked_wgrad(rand(2, 16, 8).transpose(1, 2), rand(2, 8, 24), _offs(1, 2)), ValueError,
     "tkreg.grouped_gemm_masked_wgrad.*`dy`.*contiguous"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_arguments_are_named(make, err, msg, fallback):
    with pytest.raises(err, match=msg):
        make()


@pytest.mark.parametrize("make, msg", [
    (lambda: ops.grouped_gemm_dgrad(rand(256, 16), rand(2, 16, 24), _offs(0, 100, 256)),
     "tkreg.grouped_gemm_dgrad: expert 1's segment starts at row 100"),
    (lambda: ops.grouped_gemm_wgrad(rand(256, 16), rand(256, 24), _offs(0, 200, 100)),
     r"tkreg.grouped_gemm_wgrad: `group_offsets` must be non-decreasing; offsets\[1\] = 200"),
    (lambda: ops.grouped_gemm_wgrad(rand(256, 16), rand(256, 24), _offs(0, 300)),
     r"tkreg.grouped_gemm_wgrad: `group_offsets` must lie in \[0, 256\]"),
    (lambda: ops.grouped_gemm_masked_wgrad(rand(2, 8, 16), rand(2, 8, 24), _offs(9, 0)),
     r"tkreg.grouped_gemm_masked_wgrad: `counts` must lie in \[0, Mmax = 8\]"),
])
def test_bad_indices_are_named_when_checked(make, msg, fallback, monkeypatch):
    monkeypatch.setenv("TKREG_CHECK_INDICES", "1")
    with pytest.raises(ValueError, match=msg):
        make()
