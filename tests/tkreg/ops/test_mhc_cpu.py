"""The mHC family without a GPU: the installed variants against kernels_src/mhc's specs, explain's
picks and reasons, validation before launch, the references against expected values written here
in fp64 (and, for the backward references, against fp64 torch autograd of those formulas), and the
typed functions and their autograd through TKREG_FALLBACK=reference."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.ops import mhc as ops
from tkreg.reference import mhc as ref

BF16, F32, F64 = torch.bfloat16, torch.float32, torch.float64
M = 4
N = M * (M + 2)


def pre_inputs(t=5, h=64, m=M, gen=None, weight=False):
    """TileKernels' test distributions: residual randn (rows scaled 1 + 0.01 h), fn randn * 1e-4,
    scale and base randn * 0.1, norm_weight 1 + 0.1 randn."""
    rows = 1 + 0.01 * torch.arange(m, dtype=F32).view(1, m, 1)
    residual = (torch.randn(t, m, h, generator=gen) * rows).to(BF16)
    fn = torch.randn(m * (m + 2), m * h, generator=gen) * 1e-4
    scale = torch.randn(3, generator=gen) * 0.1
    base = torch.randn(m * (m + 2), generator=gen) * 0.1
    nw = 1 + 0.1 * torch.randn(m * h, generator=gen) if weight else None
    return residual, fn, scale, base, nw


# ---- fp64 formulas, written from the semantics ----------------------------------------------------
def sig(v):
    return 1 / (1 + torch.exp(-v))


def norm_fn_expected(residual, fn, nw, eps):
    x = residual.double().flatten(1)
    w = fn.double() * (1 if nw is None else nw.double())
    r = 1 / torch.sqrt((x * x).mean(-1) + eps)
    return torch.einsum("tk,nk->tn", x, w) * r[:, None], r


def split_expected(mixes, scale, base, m, post_mult, pre_eps):
    v = mixes.double().clone()
    v[:, :m] *= scale[0].double()
    v[:, m:2 * m] *= scale[1].double()
    v[:, 2 * m:] *= scale[2].double()
    v += base.double()
    return (sig(v[:, :m]) + pre_eps)[..., None], (sig(v[:, m:2 * m]) * post_mult)[..., None], v[:, 2 * m:].view(-1, m, m)


def sinkhorn_expected(c, repeat, eps):
    x = torch.exp(c.double() - c.double().amax(-1, keepdim=True))
    x = x / x.sum(-1, keepdim=True) + eps
    x = x / (x.sum(-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        x = x / (x.sum(-1, keepdim=True) + eps)
        x = x / (x.sum(-2, keepdim=True) + eps)
    return x


def post_expected(x, residual, post, comb):
    t, m, h = residual.shape
    out = torch.empty(t, m, h, dtype=F64)
    for n in range(m):                     # out[n] = post[n] x + sum over h of comb[h, n] residual[h]
        out[:, n] = post[:, n].double() * x.double()
        for i in range(m):
            out[:, n] += comb[:, i, n, None].double() * residual[:, i].double()
    return out


def close(got, want, rtol, atol):
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol)


# ---- what the wheel ships -------------------------------------------------------------------------
def test_wheel_ships_the_mhc_specs(ships_the_specs):
    assert set(ships_the_specs("mhc")) == {
        "tkreg.expand_to_mhc", "tkreg.mhc_pre_apply_mix", "tkreg.mhc_post", "tkreg.mhc_pre_split_mixes",
        "tkreg.sinkhorn_normalize", "tkreg.mhc_head_compute_mix", "tkreg.mhc_pre_norm_fn", "tkreg.mhc_pre_big_fuse",
        "tkreg.mhc_pre_apply_mix_backward", "tkreg.mhc_post_backward", "tkreg.sinkhorn_normalize_backward",
        "tkreg.mhc_pre_split_mixes_backward", "tkreg.mhc_pre_norm_fn_backward",
        "tkreg.mhc_head_compute_mix_backward", "tkreg.expand_to_mhc_backward"}


# ---- the references -------------------------------------------------------------------------------
def test_expand_and_apply_mix_references():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 64, generator=g).to(BF16)
    e = ref.expand_to_mhc(x, 4)
    assert e.shape == (3, 4, 64) and e.is_contiguous() and all(torch.equal(e[:, i], x) for i in range(4))
    r, pre = torch.randn(7, 3, 64, generator=g).to(BF16), torch.rand(7, 3, 1, generator=g)
    want = (r.double() * pre.double()).sum(1)
    got = ref.mhc_pre_apply_mix(r, pre)
    assert got.dtype == BF16 and got.shape == (7, 64)
    close(got, want, 2 ** -8, 1e-2)


def test_post_reference_index_convention():
    """out[n] = post[n] x + sum over h of comb[h, n] residual[h] (TileKernels' 'mn,mc->nc')."""
    x = torch.zeros(1, 2, dtype=BF16)
    residual = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=BF16)      # rows h = 0, 1
    comb = torch.tensor([[[0.0, 2.0], [0.0, 0.0]]])                    # comb[h=0, n=1] = 2
    out = ref.mhc_post(x, residual, torch.zeros(1, 2, 1), comb)
    assert out.tolist() == [[[0.0, 0.0], [2.0, 0.0]]]                  # row n = 1 gets 2 * residual[0]
    g = torch.Generator().manual_seed(2)
    x, r = torch.randn(5, 64, generator=g).to(BF16), torch.randn(5, 4, 64, generator=g).to(BF16)
    post, comb = torch.rand(5, 4, 1, generator=g), torch.rand(5, 4, 4, generator=g)
    close(ref.mhc_post(x, r, post, comb), post_expected(x, r, post, comb), 2 ** -8, 2e-2)


@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("t, h", [(0, 64), (1, 128), (37, 64), (3, 4096)])
def test_norm_fn_reference(t, h, weight):
    g = torch.Generator().manual_seed(t + h)
    residual, fn, _, _, nw = pre_inputs(t, h, gen=g, weight=weight)
    mixes, rstd = ref.mhc_pre_norm_fn(residual, fn, nw, 1e-6)
    want, wr = norm_fn_expected(residual, fn, nw, 1e-6)
    assert mixes.shape == (t, N) and rstd.shape == (t,) and mixes.dtype == rstd.dtype == F32
    close(mixes, want, 1e-5, 1e-6)
    close(rstd, wr, 1e-6, 0)


def test_split_sinkhorn_head_references():
    g = torch.Generator().manual_seed(3)
    mixes, scale, base = torch.randn(9, N, generator=g), torch.randn(3, generator=g), torch.randn(N, generator=g)
    got = ref.mhc_pre_split_mixes(mixes, scale, base, M, 2.0, 1e-6)
    for a, b, shape in zip(got, split_expected(mixes, scale, base, M, 2.0, 1e-6), ((9, 4, 1), (9, 4, 1), (9, 4, 4))):
        assert a.shape == shape and a.is_contiguous()
        close(a, b, 1e-6, 1e-6)
    comb = torch.randn(9, 4, 4, generator=g)
    s = ref.sinkhorn_normalize(comb, 10, 1e-6)
    close(s, sinkhorn_expected(comb, 10, 1e-6), 1e-5, 1e-6)
    close(s.sum(-2), torch.ones(9, 4), 0, 1e-5)                     # doubly stochastic, columns last
    close(s.sum(-1), torch.ones(9, 4), 0, 1e-3)
    close(ref.sinkhorn_normalize(comb, 1, 0.0), sinkhorn_expected(comb, 1, 0.0), 1e-5, 1e-6)
    mix, sc, b = torch.randn(9, 4, generator=g), torch.randn(1, generator=g), torch.randn(4, generator=g)
    close(ref.mhc_head_compute_mix(mix, sc, b, 1e-6), sig(mix.double() * sc.double() + b.double()) + 1e-6, 1e-6, 1e-7)


@pytest.mark.parametrize("weight", [False, True])
def test_big_fuse_reference_is_the_chain(weight):
    g = torch.Generator().manual_seed(4)
    residual, fn, scale, base, nw = pre_inputs(11, 64, gen=g, weight=weight)
    post, comb, x = ref.mhc_pre_big_fuse(residual, fn, scale, base, nw, 1e-6, 1e-6, 1e-6, 1.0, 10)
    mixes, _ = norm_fn_expected(residual, fn, nw, 1e-6)
    w_pre, w_post, w_comb = split_expected(mixes, scale, base, M, 1.0, 1e-6)
    close(post, w_post, 1e-5, 1e-6)
    close(comb, sinkhorn_expected(w_comb, 10, 1e-6), 1e-4, 1e-6)
    close(x, (residual.double() * w_pre).sum(1), 2 ** -8, 2e-2)


# ---- the backward references against fp64 autograd --------------------------------------------------
def grads(fn, leaves, grad_out):
    leaves = [a.detach().double().requires_grad_() for a in leaves]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(outs, [g.double() for g in grad_out])
    return [a.grad for a in leaves]


def test_row_backward_references():
    g = torch.Generator().manual_seed(5)
    x, r = torch.randn(6, 64, generator=g).to(BF16), torch.randn(6, 4, 64, generator=g).to(BF16)
    pre, post, comb = torch.rand(6, 4, 1, generator=g), torch.rand(6, 4, 1, generator=g), torch.rand(6, 4, 4, generator=g)
    go = torch.randn(6, 64, generator=g)
    want = grads(lambda r_, p_: (r_ * p_).sum(1), (r, pre), (go,))
    for a, b in zip(ref.mhc_pre_apply_mix_backward(go.to(BF16), r, pre), want):
        close(a, b, 1e-2, 2e-2)
    go = torch.randn(6, 4, 64, generator=g).to(BF16)
    close(ref.expand_to_mhc_backward(go), go.double().sum(1), 2 ** -8, 2e-2)
    want = grads(lambda *a: post_expected(*a), (x, r, post, comb), (go,))
    for a, b in zip(ref.mhc_post_backward(go, x, r, post, comb), want):
        close(a, b, 1e-2, 5e-2)


def test_small_backward_references():
    g = torch.Generator().manual_seed(6)
    comb, go = torch.randn(5, 4, 4, generator=g), torch.randn(5, 4, 4, generator=g)
    (want,) = grads(lambda c: sinkhorn_expected(c, 10, 1e-6), (comb,), (go,))
    close(ref.sinkhorn_normalize_backward(go, comb, 10, 1e-6), want, 1e-4, 1e-5)
    mixes, scale, base = torch.randn(7, N, generator=g), torch.randn(3, generator=g), torch.randn(N, generator=g)
    gp, gq, gc = torch.randn(7, 4, 1, generator=g), torch.randn(7, 4, 1, generator=g), torch.randn(7, 4, 4, generator=g)
    want = grads(lambda a, b, c: split_expected(a, b, c, M, 2.0, 1e-6), (mixes, scale, base), (gp, gq, gc))
    for a, b in zip(ref.mhc_pre_split_mixes_backward(gp, gq, gc, mixes, scale, base, M, 2.0), want):
        close(a, b, 1e-5, 1e-5)
    mix, sc, b, go = (torch.randn(7, 4, generator=g), torch.randn(1, generator=g), torch.randn(4, generator=g),
                      torch.randn(7, 4, generator=g))
    want = grads(lambda x, s_, b_: sig(x * s_ + b_) + 1e-6, (mix, sc, b), (go,))
    for a, w in zip(ref.mhc_head_compute_mix_backward(go, mix, sc, b), want):
        close(a, w, 1e-5, 1e-6)


@pytest.mark.parametrize("weight", [False, True])
def test_norm_fn_backward_reference(weight):
    g = torch.Generator().manual_seed(7)
    residual, fn, _, _, nw = pre_inputs(9, 64, gen=g, weight=weight)
    gm = torch.randn(9, N, generator=g)
    mixes, rstd = ref.mhc_pre_norm_fn(residual, fn, nw, 1e-6)
    got = ref.mhc_pre_norm_fn_backward(gm, residual, fn, nw, mixes, rstd)
    leaves = (residual, fn) + ((nw,) if weight else ())
    want = grads(lambda r, f, *w: norm_fn_expected(r, f, w[0] if w else None, 1e-6)[0], leaves, (gm,))
    close(got[0], want[0], 1e-2, 1e-4)
    close(got[1], want[1], 1e-5, 1e-5)
    if weight:
        close(got[2], want[2], 1e-5, 1e-7)
    else:
        assert got[2].shape == (4 * 64,) and not got[2].any()


# ---- dispatch -------------------------------------------------------------------------------------
def explain(op, *args):
    return tkreg.explain(op, *args, arch="sm_90a")


@pytest.mark.parametrize("t, splits", [(0, 32), (1, 32), (256, 32), (257, 4), (4096, 4), (4097, 1), (16384, 1)])
@pytest.mark.parametrize("h", [4096, 7168, 2048, 64])
def test_norm_fn_and_big_fuse_split_by_tokens(t, splits, h):
    residual, fn = torch.empty(t, 4, h, dtype=BF16), torch.empty(N, 4 * h)
    e = explain("mhc_pre_norm_fn", residual, fn, None, 1e-6)
    assert e.chosen == f"dtype=bfloat16,splits={splits}", str(e)
    e = explain("mhc_pre_big_fuse", residual, fn, torch.empty(3), torch.empty(N), None, 1e-6, 1e-6, 1e-6, 1.0, 10)
    assert e.chosen is not None and f"splits={splits}," in e.chosen, str(e)


@pytest.mark.parametrize("h, why", [(4100, "H % 64 == 0"), (16448, "H <= 16384")])
def test_big_fuse_without_a_kernel_says_why(h, why):
    e = explain("mhc_pre_big_fuse", torch.empty(3, 4, h, dtype=BF16), torch.empty(N, 4 * h), torch.empty(3),
                torch.empty(N), None, 1e-6, 1e-6, 1e-6, 1.0, 10)
    assert e.chosen is None and why in str(e), str(e)


@pytest.mark.parametrize("m, h", [(4, 4096), (4, 7168), (2, 4096), (8, 1000)])
def test_row_ops_pick_a_kernel(m, h):
    r = torch.empty(37, m, h, dtype=BF16)
    assert explain("expand_to_mhc", torch.empty(37, h, dtype=BF16), m).chosen is not None
    chosen = explain("mhc_pre_apply_mix", r, torch.empty(37, m, 1)).chosen
    assert chosen == f"dtype=bfloat16,mult={4 if m == 4 else 0}"
    post = explain("mhc_post", torch.empty(37, h, dtype=BF16), r, torch.empty(37, m, 1), torch.empty(37, m, m))
    assert (post.chosen is not None) == (m == 4), str(post)


# ---- validation before launch ---------------------------------------------------------------------
def _norm_fn_with(i, a, t=3, h=4096):
    args = [torch.empty(t, 4, h, dtype=BF16), torch.empty(N, 4 * h), None, 1e-6]
    args[i] = a
    return args


@pytest.mark.parametrize("call, err, msg", [
    (lambda: ops.mhc_pre_norm_fn_fwd(*_norm_fn_with(1, torch.empty(8, 4 * 4096))), ValueError,
     r"tkreg.mhc_pre_norm_fn.*`fn` has shape \(8, 16384\); expected \(24, 16384\)"),
    (lambda: ops.mhc_pre_norm_fn_fwd(*_norm_fn_with(0, torch.empty(3, 2, 8192, dtype=BF16))), ValueError,
     r"`fn` has shape \(24, 16384\); expected \(8, 16384\)"),
    (lambda: ops.mhc_pre_norm_fn_fwd(*_norm_fn_with(0, torch.empty(3, 4, 4096, dtype=torch.float16))), TypeError,
     r"`residual` has dtype torch.float16"),
    (lambda: ops.mhc_pre_norm_fn_fwd(*_norm_fn_with(2, torch.empty(4096))), ValueError,
     r"`norm_weight` has shape \(4096,\); expected \(16384,\)"),
    (lambda: ops.mhc_pre_split_mixes(torch.empty(3, 24), torch.empty(3), torch.empty(24), 2, 1.0, 1e-6), ValueError,
     r"tkreg.mhc_pre_split_mixes.*`mixes` has shape \(3, 24\); expected \(3, 8\)"),
    (lambda: ops.mhc_pre_apply_mix(torch.empty(3, 4, 64, dtype=BF16), torch.empty(3, 4, 1, dtype=F64)), TypeError,
     r"`pre` has dtype torch.float64; expected torch.float32"),
    (lambda: ops.mhc_post(torch.empty(2, 64, dtype=BF16), torch.empty(3, 4, 64, dtype=BF16), torch.empty(3, 4, 1),
                          torch.empty(3, 4, 4)), ValueError, r"`residual` has shape \(3, 4, 64\); expected \(2, 4, 64\)"),
    (lambda: ops.mhc_post(torch.empty(3, 64, dtype=torch.float16), torch.empty(3, 4, 64, dtype=BF16),
                          torch.empty(3, 4, 1), torch.empty(3, 4, 4)), TypeError, r"`x` has dtype torch.float16"),
    (lambda: ops.mhc_pre_big_fuse(torch.empty(3, 4, 4096, dtype=BF16), torch.empty(24, 4096), torch.empty(3),
                                  torch.empty(24), 1e-6, 1e-6, 1e-6, 1.0, 10), ValueError,
     r"tkreg.mhc_pre_big_fuse.*`fn` has shape \(24, 4096\); expected \(24, 16384\)"),
    (lambda: ops.mhc_pre_norm_fn_fwd(*_norm_fn_with(0, torch.empty(3, 4, 4096, dtype=BF16))), ValueError,
     "on the CPU.*TKREG_FALLBACK=reference"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_input_is_refused_before_launch(call, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        call()


def test_h_not_served_names_the_rule(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    e = explain("mhc_pre_norm_fn", torch.empty(3, 4, 100, dtype=BF16), torch.empty(N, 400), None, 1e-6)
    assert e.chosen is None and "H % 64 == 0" in str(e), str(e)


# ---- the typed functions through TKREG_FALLBACK=reference -----------------------------------------
def test_typed_functions_route_to_the_reference(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    g = torch.Generator().manual_seed(8)
    residual, fn, scale, base, nw = pre_inputs(6, 64, gen=g, weight=True)
    lead = residual.view(2, 3, 4, 64)                                   # leading dims are tokens
    assert torch.equal(ops.expand_to_mhc(lead[:, :, 0].contiguous(), 4), ref.expand_to_mhc(residual[:, 0], 4).view(2, 3, 4, 64))
    mixes = ops.mhc_pre_norm_fn(lead, fn, nw, 1e-6)
    assert mixes.shape == (2, 3, N) and torch.equal(mixes.view(6, N), ref.mhc_pre_norm_fn(residual, fn, nw, 1e-6)[0])
    pre, post, comb = ops.mhc_pre_split_mixes(mixes, scale, base, 4, 1.0, 1e-6)
    assert pre.shape == (2, 3, 4, 1) and comb.shape == (2, 3, 4, 4)
    s = ops.sinkhorn_normalize(comb, 10, 1e-6)
    assert torch.equal(s.view(6, 4, 4), ref.sinkhorn_normalize(comb.reshape(6, 4, 4), 10, 1e-6))
    x = ops.mhc_pre_apply_mix(lead, pre)
    assert x.shape == (2, 3, 64) and torch.equal(x.view(6, 64), ref.mhc_pre_apply_mix(residual, pre.view(6, 4, 1)))
    y = ops.mhc_post(x, lead, post, s)
    assert y.shape == (2, 3, 4, 64)
    fused = ops.mhc_pre_big_fuse(lead, fn, scale, base, 1e-6, 1e-6, 1e-6, 1.0, 10, norm_weight=nw)
    assert torch.equal(fused[2].view(6, 64), x.view(6, 64)) and torch.equal(fused[1], s)
    hm = ops.mhc_head_compute_mix(mixes.view(6, N)[:, :4], scale[:1], base[:4], 1e-6)
    assert torch.equal(hm, ref.mhc_head_compute_mix(mixes.view(6, N)[:, :4], scale[:1], base[:4], 1e-6))
    leaves = [a.detach().clone().requires_grad_() for a in (mixes.view(6, N), scale[:1], base[:4])]
    ops.mhc_head_compute_mix(leaves[0][:, :4], leaves[1], leaves[2], 1e-6).sum().backward()
    want = ref.mhc_head_compute_mix_backward(torch.ones(6, 4), mixes.view(6, N)[:, :4], scale[:1], base[:4])
    assert torch.equal(leaves[0].grad[:, :4], want[0]) and not leaves[0].grad[:, 4:].any()
    assert torch.equal(leaves[1].grad, want[1]) and torch.equal(leaves[2].grad, want[2])


def test_autograd_routes_to_the_backward(monkeypatch):
    """The differentiable chain (norm_fn -> split -> sinkhorn -> apply_mix, then post) through
    the ops' autograd (here their backward references) matches torch autograd of the references."""
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    g = torch.Generator().manual_seed(9)
    residual, fn, scale, base, nw = pre_inputs(5, 64, gen=g, weight=True)
    x_in = torch.randn(5, 64, generator=g).to(BF16)
    go = torch.randn(5, 4, 64, generator=g).to(BF16)

    xe = x_in.clone().requires_grad_()
    ops.expand_to_mhc(xe, 4).backward(go)
    assert torch.equal(xe.grad, ref.expand_to_mhc_backward(go))

    def chain(mod, r, f, s, b, w, xi, m_):
        mixes = mod.mhc_pre_norm_fn(r, f, w, 1e-6)
        mixes = mixes[0] if isinstance(mixes, tuple) else mixes
        pre, post, comb = mod.mhc_pre_split_mixes(mixes, s, b, 4, 1.0, 1e-6)
        comb = mod.sinkhorn_normalize(comb, 10, 1e-6)
        layer = mod.mhc_pre_apply_mix(r, pre)
        return mod.mhc_post(xi + layer, r, post, comb)

    leaves = [a.clone().requires_grad_() for a in (residual, fn, scale, base, nw, x_in)]
    chain(ops, *leaves, None).backward(go)
    want = [a.clone().requires_grad_() for a in (residual, fn, scale, base, nw, x_in)]
    chain(ref, *want, None).backward(go)
    for name, a, b in zip(("residual", "fn", "scale", "base", "norm_weight", "x"), leaves, want):
        torch.testing.assert_close(a.grad.double(), b.grad.double(), rtol=2e-2, atol=2e-3, msg=name)
