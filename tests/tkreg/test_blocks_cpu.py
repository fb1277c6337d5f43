"""tkreg.blocks without a GPU (TKREG_FALLBACK=reference: each op runs its torch reference): the
TileKernels `modeling` signatures, leading dimensions flattened and restored, the fused inference
path of mhc_pre equal to the differentiable chain, gradients through every block, and bad input
refused with an error naming the argument before any launch.  The expected values are plain
torch written here from TileKernels' semantics (fp32 math)."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import blocks

BF16, F32 = torch.bfloat16, torch.float32
M, H = 4, 64
ROWS = M * (M + 2)


@pytest.fixture(autouse=True)
def _reference(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")


def test_blocks_is_a_lazy_attribute():
    assert tkreg.blocks is blocks
    assert set(blocks.__all__) == {"expand_from_embedding", "mhc_pre", "mhc_post", "mhc_head", "engram_gate"}


# ---- expected values: TileKernels' semantics in plain torch ---------------------------------------
def pre_expected(residual, fn, scale, base, norm_weight=None, eps=1e-6, post_mult=1.0, pre_eps=1e-6,
                 sk_eps=1e-6, repeat=10):
    lead, (m, h) = residual.shape[:-2], residual.shape[-2:]
    r = residual.reshape(-1, m * h).float()
    w = fn if norm_weight is None else fn * norm_weight
    mixes = (r @ w.t()) * torch.rsqrt(r.square().mean(-1, keepdim=True) + eps)
    mixes = mixes * torch.cat([scale[0].expand(m), scale[1].expand(m), scale[2].expand(m * m)]) + base
    pre = torch.sigmoid(mixes[:, :m]) + pre_eps
    post = torch.sigmoid(mixes[:, m:2 * m]) * post_mult
    comb = mixes[:, 2 * m:].reshape(-1, m, m).softmax(-1) + sk_eps
    comb = comb / (comb.sum(-2, keepdim=True) + sk_eps)
    for _ in range(repeat - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + sk_eps)
        comb = comb / (comb.sum(-2, keepdim=True) + sk_eps)
    x = (residual.reshape(-1, m, h).float() * pre[..., None]).sum(1).to(BF16)
    return x.view(*lead, h), post.view(*lead, m, 1), comb.view(*lead, m, m)


def post_expected(x, residual, post, comb):
    return (x.float()[..., None, :] * post + torch.einsum("...mn,...mc->...nc", comb, residual.float())).to(BF16)


def head_expected(residual, fn, scale, base, eps=1e-6, pre_eps=1e-6):
    lead, (m, h) = residual.shape[:-2], residual.shape[-2:]
    r = residual.reshape(-1, m * h).float()
    mix = (r @ fn.t()) * torch.rsqrt(r.square().mean(-1, keepdim=True) + eps)
    mix = torch.sigmoid(mix * scale + base) + pre_eps
    return (residual.reshape(-1, m, h).float() * mix[..., None]).sum(1).to(BF16).view(*lead, h)


def mhc_params(gen, rows=ROWS):
    fn = torch.randn(rows, M * H, generator=gen) * (M * H) ** -0.5
    return fn, torch.tensor([0.5, 0.7, 1.0]), torch.randn(rows, generator=gen) * 0.1


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# ---- mHC ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lead", [(0,), (5,), (2, 3)])
def test_mhc_pre_fused_and_chain_match_the_semantics(lead):
    g = torch.Generator().manual_seed(len(lead) * 10 + lead[0])
    residual = torch.randn(*lead, M, H, generator=g).to(BF16)
    fn, scale, base = mhc_params(g)
    nw = 1 + 0.1 * torch.randn(M * H, generator=g)
    kw = dict(post_mult_value=2.0, sinkhorn_repeat=10)
    want = pre_expected(residual, fn, scale, base, nw, post_mult=2.0)
    with torch.no_grad():
        fused = blocks.mhc_pre(residual, fn, scale, base, norm_weight=nw, **kw)
    chain = blocks.mhc_pre(residual, fn.clone().requires_grad_(), scale, base, norm_weight=nw, **kw)
    for got in (fused, chain):
        x, (post, comb) = got
        assert x.shape == (*lead, H) and x.dtype == BF16
        assert post.shape == (*lead, M, 1) and comb.shape == (*lead, M, M)
        if residual.numel():
            assert rel(x, want[0]) < 1e-2 and rel(post, want[1]) < 1e-5 and rel(comb, want[2]) < 1e-5


def test_mhc_pre_gradients_match_autograd_of_the_semantics():
    g = torch.Generator().manual_seed(3)
    residual = torch.randn(7, M, H, generator=g).to(BF16)
    fn, scale, base = mhc_params(g)
    grads = []
    for f in (lambda *a: blocks.mhc_pre(*a), lambda *a: (pre_expected(*a)[0], pre_expected(*a)[1:])):
        leaves = [t.clone().requires_grad_() for t in (residual, fn, scale, base)]
        x, (post, comb) = f(*leaves)
        loss = (x.float() * torch.linspace(-1, 1, H)).sum() + (post.squeeze(-1) * 3).sum() + (comb * comb).sum()
        grads.append(torch.autograd.grad(loss, leaves))
    for name, a, b in zip(("residual", "fn", "scale", "base"), *grads):
        assert rel(a, b) < 1e-2, name


def test_mhc_post_and_expand():
    g = torch.Generator().manual_seed(4)
    residual = torch.randn(2, 3, M, H, generator=g).to(BF16)
    x = torch.randn(2, 3, H, generator=g).to(BF16)
    post = torch.rand(2, 3, M, 1, generator=g) * 2
    comb = torch.rand(2, 3, M, M, generator=g)
    got = blocks.mhc_post(x, residual, post, comb)
    assert got.shape == residual.shape and rel(got, post_expected(x, residual, post, comb)) < 1e-2
    out = torch.empty_like(residual)
    assert blocks.mhc_post(x, residual, post, comb, out=out) is out and torch.equal(out, got)
    e = blocks.expand_from_embedding(x, M)
    assert e.shape == (2, 3, M, H) and torch.equal(e, x[..., None, :].expand(2, 3, M, H))
    leaf = x.clone().requires_grad_()
    e = blocks.expand_from_embedding(leaf, M)
    assert torch.equal(e, x[..., None, :].expand(2, 3, M, H))
    e.backward(torch.ones_like(e))
    assert torch.equal(leaf.grad, torch.full_like(x, M))


@pytest.mark.parametrize("rows", [M, ROWS])
def test_mhc_head(rows):
    g = torch.Generator().manual_seed(rows)
    residual = torch.randn(2, 5, M, H, generator=g).to(BF16)
    fn = torch.randn(rows, M * H, generator=g) * (M * H) ** -0.5
    scale, base = torch.tensor([0.8]), torch.randn(M, generator=g) * 0.1
    got = blocks.mhc_head(residual, fn, scale, base)
    assert got.shape == (2, 5, H) and rel(got, head_expected(residual, fn[:M], scale, base)) < 1e-2


@pytest.mark.parametrize("make, msg", [
    (lambda: (torch.empty(3, 2, H, dtype=BF16), torch.empty(ROWS, M * H)), r"`residual` has shape \(3, 2, 64\); expected \[..., mhc_mult=4, hidden\]"),
    (lambda: (torch.empty(3, M, H, dtype=BF16), torch.empty(8, 3 * H)), r"`fn` has shape \(8, 192\); expected \(24, 256\)"),
    (lambda: (torch.empty(3, M, H, dtype=BF16), torch.empty(ROWS, M * H + 8)), r"`fn` has shape \(24, 264\)"),
], ids=["m", "fn rows", "fn cols"])
def test_mhc_pre_layout_errors(make, msg):
    residual, fn = make()
    with pytest.raises(ValueError, match=r"tkreg.blocks.mhc_pre: " + msg):
        blocks.mhc_pre(residual, fn, torch.ones(3), torch.zeros(fn.shape[0]))


def test_mhc_head_layout_error():
    with pytest.raises(ValueError, match=r"tkreg.blocks.mhc_head: `fn` has shape \(5, 256\); expected \(4, 256\) or \(24, 256\)"):
        blocks.mhc_head(torch.empty(3, M, H, dtype=BF16), torch.empty(5, M * H), torch.ones(1), torch.zeros(M))


# ---- engram ---------------------------------------------------------------------------------------
def engram_inputs(lead, gen):
    r = lambda *s: torch.randn(*s, generator=gen).to(BF16)  # noqa: E731
    return r(*lead, M, H), r(*lead, M, H), r(*lead, H), r(M, H), r(M, H)


def engram_expected(x, k, v, wh, we, clamp=1e-6, eps=1e-20):
    xf, kf = x.float(), k.float()
    rx = torch.rsqrt(xf.square().mean(-1) + eps)
    rk = torch.rsqrt(kf.square().mean(-1) + eps)
    s = (xf * wh.float() * kf * we.float()).sum(-1) * rx * rk * x.shape[-1] ** -0.5
    gate = torch.sigmoid(s.abs().clamp_min(clamp).sqrt() * s.sign())
    return (xf + gate[..., None] * v.float()[..., None, :]).to(BF16)


@pytest.mark.parametrize("lead", [(0,), (6,), (2, 3)])
def test_engram_gate_forward_and_backward(lead):
    g = torch.Generator().manual_seed(sum(lead) + len(lead))
    args = engram_inputs(lead, g)
    got = blocks.engram_gate(*args, 1e-6, 1e-20)
    assert got.shape == (*lead, M, H) and got.dtype == BF16
    if not got.numel():
        return
    assert rel(got, engram_expected(*args)) < 1e-2
    grad = torch.randn(*lead, M, H, generator=g).to(BF16)
    grads = []
    for f in (lambda *a: blocks.engram_gate(*a, 1e-6, 1e-20), engram_expected):
        leaves = [t.clone().requires_grad_() for t in args]
        grads.append(torch.autograd.grad(f(*leaves), leaves, grad))
    for name, a, b in zip(("x", "k", "v", "wh", "we"), *grads):
        assert a.shape == b.shape and rel(a, b) < 1e-2, name


def _with(i, t):
    args = list(engram_inputs((3,), torch.Generator().manual_seed(0)))
    args[i] = t
    return args


@pytest.mark.parametrize("make, err, msg", [
    (lambda: _with(1, torch.zeros(2, M, H, dtype=BF16)), ValueError, r"tkreg.blocks.engram_gate: `k` \(2, 4, 64\)"),
    (lambda: _with(1, torch.zeros(1, 3, M, H, dtype=BF16)), ValueError, r"tkreg.blocks.engram_gate: `k` \(1, 3, 4, 64\)"),
    (lambda: _with(2, torch.zeros(4, H, dtype=BF16)), ValueError, r"tkreg.blocks.engram_gate: .*`v` \(4, 64\)"),
    (lambda: _with(1, torch.zeros(3, M, H, dtype=F32)), TypeError, "`k` has dtype torch.float32; expected torch.bfloat16"),
    (lambda: _with(0, torch.zeros(3, M, H, dtype=torch.float16)), TypeError, "`x` has dtype torch.float16"),
    (lambda: _with(3, torch.zeros(M, H, dtype=F32)), TypeError, "`wh` has dtype torch.float32"),
], ids=["T", "lead k", "lead v", "dtype k", "dtype x", "dtype wh"])
def test_engram_gate_bad_input(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK")          # no reference to fall back on: the checks alone
    with pytest.raises(err, match=msg):
        blocks.engram_gate(*make(), 1e-6, 1e-20)


@pytest.mark.parametrize("lead", [(5,), (2, 3)])
def test_engram_gate_traces_whole_under_torch_compile(lead):
    """fullgraph=True: blocks' reshapes and checks trace, the op stays one custom op with its
    autograd (backend "eager": the graph runs the references on the CPU)."""
    g = torch.Generator().manual_seed(9)
    args = engram_inputs(lead, g)
    w = torch.randn(*lead, M, H, generator=g)
    f = lambda *a: (blocks.engram_gate(*a, 1e-6, 1e-20).float() * w).sum()  # noqa: E731
    runs = []
    for fn in (f, torch.compile(f, fullgraph=True, backend="eager")):
        leaves = [t.clone().requires_grad_() for t in args]
        runs.append((fn(*leaves), torch.autograd.grad(fn(*leaves), leaves)))
    assert torch.equal(runs[0][0], runs[1][0])
    for a, b in zip(runs[0][1], runs[1][1]):
        assert torch.equal(a, b)


def test_a_sublayer_traces_whole_under_torch_compile():
    """mhc_pre (chain under grad, fused under no_grad), mhc_post and engram_gate in one fullgraph
    compile (backend "eager"), forward and backward equal to eager."""
    g = torch.Generator().manual_seed(11)
    residual = torch.randn(6, M, H, generator=g).to(BF16)
    fn, scale, base = mhc_params(g)
    w = (torch.randn(H, H, generator=g) * H ** -0.5).to(BF16)
    k, v, wh, we = engram_inputs((6,), g)[1:]

    def sub(r, fn):
        x, (post, comb) = blocks.mhc_pre(r, fn, scale, base, post_mult_value=2.0)
        r = blocks.mhc_post(torch.nn.functional.linear(x, w), r, post, comb)
        return blocks.engram_gate(r, k, v, wh, we, 1e-6, 1e-20)
    compiled = torch.compile(sub, fullgraph=True, backend="eager")
    outs = []
    for f in (sub, compiled):
        leaves = [residual.clone().requires_grad_(), fn.clone().requires_grad_()]
        y = f(*leaves)
        outs.append((y, torch.autograd.grad(y, leaves, torch.ones_like(y))))
        with torch.no_grad():
            outs.append((f(residual, fn), ()))
    assert torch.equal(outs[0][0], outs[2][0]) and torch.equal(outs[1][0], outs[3][0])
    assert rel(outs[1][0], outs[0][0]) < 1e-2          # fused (no grad) against the chain
    for a, b in zip(outs[0][1], outs[2][1]):
        assert torch.equal(a, b)
