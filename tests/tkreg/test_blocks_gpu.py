"""tkreg.blocks on a GPU (installed wheel) against tkreg's torch references on the same GPU.

- Forward at T in {0, 1, 37, 4097} (and [B, S] leading dims), H in {4096, 7168}, m = 4:
  mhc_pre (the fused inference kernel and the differentiable chain), mhc_post, mhc_head,
  expand_from_embedding, engram_gate.  Bounds (relative Frobenius error): bf16 outputs 1e-2
  (bf16 rounding), fp32 mixes (post, comb) 1e-3.
- Backward of every block against torch autograd of the reference composite: 1e-2.
- torch.compile(fullgraph=True) of a V4-style sublayer built from the blocks, forward + backward,
  and of the inference path (no grad): equal to eager within 1e-3.
- CUDA graphs: the inference sublayer captured at T = 1, 64, 256, replayed with new inputs; a
  training step (forward + backward) captured the same way.
- Bad input: fn not of m's layout, a residual dtype other than bf16, an H no kernel serves
  (the fused kernel takes H % 64 == 0 up to 16384).
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import blocks
from tkreg.reference import engram as RE
from tkreg.reference import mhc as RM

pytestmark = pytest.mark.gpu
BF16, M = torch.bfloat16, 4
ROWS = M * (M + 2)
KW = dict(norm_eps=1e-6, mhc_mult=M, post_mult_value=2.0, pre_eps=1e-6, sinkhorn_eps=1e-6, sinkhorn_repeat=10)


def rel(a, b) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def params(h, rows=ROWS, norm=False):
    fn = torch.randn(rows, M * h, device="cuda") * (M * h) ** -0.5
    nw = 1 + 0.1 * torch.randn(M * h, device="cuda") if norm else None
    return fn, torch.tensor([0.5, 0.7, 1.0], device="cuda"), torch.randn(rows, device="cuda") * 0.1, nw


def pre_ref(residual, fn, scale, base, nw=None):
    """The reference composite over [..., m, H]: (layer_input, post, comb)."""
    lead, h = residual.shape[:-2], residual.shape[-1]
    r = residual.reshape(-1, M, h)
    mixes, _ = RM.mhc_pre_norm_fn(r, fn, nw, KW["norm_eps"])
    pre, post, comb = RM.mhc_pre_split_mixes(mixes, scale, base, M, KW["post_mult_value"], KW["pre_eps"])
    comb = RM.sinkhorn_normalize(comb, KW["sinkhorn_repeat"], KW["sinkhorn_eps"])
    return RM.mhc_pre_apply_mix(r, pre).view(*lead, h), post.view(*lead, M, 1), comb.view(*lead, M, M)


def post_ref(x, residual, post, comb):
    lead, h = residual.shape[:-2], residual.shape[-1]
    return RM.mhc_post(x.reshape(-1, h), residual.reshape(-1, M, h), post.reshape(-1, M, 1),
                       comb.reshape(-1, M, M)).view(*lead, M, h)


SHAPES = [(0,), (1,), (37,), (4097,), (3, 29)]


@pytest.mark.parametrize("h", [4096, 7168])
@pytest.mark.parametrize("lead", SHAPES, ids=str)
def test_mhc_pre_fused_and_chain(seed, lead, h):
    residual = torch.randn(*lead, M, h, device="cuda").to(BF16)
    fn, scale, base, nw = params(h, norm=True)
    want = pre_ref(residual, fn, scale, base, nw)
    with torch.no_grad():
        fused = blocks.mhc_pre(residual, fn, scale, base, norm_weight=nw, **KW)
    chain = blocks.mhc_pre(residual, fn.requires_grad_(), scale, base, norm_weight=nw, **KW)
    for path, (x, (post, comb)) in (("fused", fused), ("chain", chain)):
        for name, a, b, tol in (("layer_input", x, want[0], 1e-2), ("post", post, want[1], 1e-3),
                                ("comb", comb, want[2], 1e-3)):
            assert a.shape == b.shape and a.dtype == b.dtype, (path, name)
            if b.numel():
                assert rel(a, b) < tol, (path, name, rel(a, b))


@pytest.mark.parametrize("h", [4096, 7168])
@pytest.mark.parametrize("lead", SHAPES, ids=str)
def test_mhc_post_head_expand_engram(seed, lead, h):
    residual = torch.randn(*lead, M, h, device="cuda").to(BF16)
    x = torch.randn(*lead, h, device="cuda").to(BF16)
    post, comb = torch.rand(*lead, M, 1, device="cuda") * 2, torch.rand(*lead, M, M, device="cuda")
    got = blocks.mhc_post(x, residual, post, comb)
    assert got.shape == residual.shape and (not got.numel() or rel(got, post_ref(x, residual, post, comb)) < 1e-2)
    e = blocks.expand_from_embedding(x, M)
    assert torch.equal(e, x[..., None, :].expand(*lead, M, h))
    fn, scale, base, _ = params(h, rows=M)
    head = blocks.mhc_head(residual, fn, torch.tensor([0.8], device="cuda"), base[:M])
    r = residual.reshape(-1, M, h)
    mixes, _ = RM.mhc_pre_norm_fn(r, torch.nn.functional.pad(fn, (0, 0, 0, ROWS - M)), None, KW["norm_eps"])
    mix = RM.mhc_head_compute_mix(mixes[:, :M], torch.tensor([0.8], device="cuda"), base[:M], 1e-6)
    want = RM.mhc_pre_apply_mix(r, mix.unsqueeze(-1)).view(*lead, h)
    assert head.shape == want.shape and (not want.numel() or rel(head, want) < 1e-2)
    k, v = torch.randn_like(residual), torch.randn_like(x)
    wh, we = (torch.randn(M, h, device="cuda").to(BF16) for _ in range(2))
    g = blocks.engram_gate(residual, k, v, wh, we, 1e-6, 1e-20)
    w = RE.engram_gate(r, k.reshape(-1, M, h), v.reshape(-1, h), wh, we, 1e-6, 1e-20)[0].view(*lead, M, h)
    assert g.shape == w.shape and (not w.numel() or rel(g, w) < 1e-2)


def sublayer(residual, k, v, p, pre=blocks.mhc_pre, post=blocks.mhc_post, gate=blocks.engram_gate):
    """A V4-style sublayer from the blocks: mHC around a linear map, then the engram gate."""
    x, (post_mix, comb) = pre(residual, p["fn"], p["scale"], p["base"], **KW)
    y = torch.nn.functional.linear(x, p["w"])
    residual = post(y, residual, post_mix, comb)
    return gate(residual, k, v, p["wh"], p["we"], 1e-6, 1e-20)


def ref_sublayer(residual, k, v, p):
    def pre(r, fn, scale, base, **_):
        x, post_mix, comb = pre_ref(r, fn, scale, base)
        return x, (post_mix, comb)

    def gate(x, k, v, wh, we, clamp, eps):
        return RE.engram_gate(x, k, v, wh, we, clamp, eps)[0]
    return sublayer(residual, k, v, p, pre, post_ref, gate)


def sublayer_inputs(t, h=4096):
    fn, scale, base, _ = params(h)
    p = dict(fn=fn, scale=scale, base=base, w=(torch.randn(h, h, device="cuda") * h ** -0.5).to(BF16),
             wh=(1 + 0.1 * torch.randn(M, h, device="cuda")).to(BF16), we=(1 + 0.1 * torch.randn(M, h, device="cuda")).to(BF16))
    x = dict(residual=torch.randn(t, M, h, device="cuda").to(BF16), k=torch.randn(t, M, h, device="cuda").to(BF16),
             v=torch.randn(t, h, device="cuda").to(BF16))
    return x, p


def grads_of(f, x, p, grad):
    xs = {n: a.clone().requires_grad_() for n, a in x.items()}
    ps = {n: a.clone().requires_grad_() for n, a in p.items()}
    out = f(xs["residual"], xs["k"], xs["v"], ps)
    names = list(xs) + list(ps)
    return out, dict(zip(names, torch.autograd.grad(out, list(xs.values()) + list(ps.values()), grad)))


@pytest.mark.parametrize("t", [1, 37, 4097])
def test_backward_matches_autograd_of_the_reference(seed, t):
    x, p = sublayer_inputs(t)
    grad = torch.randn(t, M, 4096, device="cuda").to(BF16)
    out, got = grads_of(sublayer, x, p, grad)
    want_out, want = grads_of(ref_sublayer, x, p, grad)
    assert rel(out, want_out) < 1e-2
    for n in want:
        assert rel(got[n], want[n]) < 1e-2, (n, rel(got[n], want[n]))


def test_compile_fullgraph_forward_backward_and_inference(seed):
    x, p = sublayer_inputs(256)
    grad = torch.randn(256, M, 4096, device="cuda").to(BF16)
    compiled = torch.compile(sublayer, fullgraph=True)
    out, got = grads_of(compiled, x, p, grad)
    want_out, want = grads_of(sublayer, x, p, grad)
    assert rel(out, want_out) < 1e-3
    for n in want:
        assert rel(got[n], want[n]) < 1e-3, n
    with torch.no_grad():
        args = (x["residual"], x["k"], x["v"], p)
        assert rel(torch.compile(sublayer, fullgraph=True)(*args), sublayer(*args)) < 1e-3



@pytest.mark.parametrize("t", [1, 64, 256])
def test_cuda_graph_inference_replays_with_new_inputs(seed, t, captured):
    x, p = sublayer_inputs(t)

    def step():
        with torch.no_grad():
            return sublayer(x["residual"], x["k"], x["v"], p)
    g, out = captured(step)
    for _ in range(3):
        new, _ = sublayer_inputs(t)
        for n in x:
            x[n].copy_(new[n])
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, step())
        assert rel(out, ref_sublayer(new["residual"], new["k"], new["v"], p)) < 1e-2


@pytest.mark.parametrize("t", [1, 64, 256])
def test_cuda_graph_training_step_replays(seed, t, captured):
    x, p = sublayer_inputs(t)
    leaves = {n: a.clone().requires_grad_() for n, a in x.items()}
    grad = torch.randn(t, M, 4096, device="cuda").to(BF16)

    def step():
        out = sublayer(leaves["residual"], leaves["k"], leaves["v"], p)
        return torch.autograd.grad(out, list(leaves.values()), grad)
    g, grads = captured(step)
    for _ in range(2):
        new, _ = sublayer_inputs(t)
        with torch.no_grad():
            for n in x:
                leaves[n].copy_(new[n])
        g.replay()
        torch.cuda.synchronize()
        for a, b in zip(grads, step()):
            assert torch.equal(a, b)


def test_bad_input_is_refused_before_launch():
    residual = torch.randn(3, M, 4096, device="cuda").to(BF16)
    fn, scale, base, _ = params(4096)
    with pytest.raises(ValueError, match=r"tkreg.blocks.mhc_pre: `fn` has shape \(15, 16384\); expected \(24, 16384\)"):
        blocks.mhc_pre(residual, fn[:15], scale, base[:15], **KW)        # m = 3's layout for m = 4
    with pytest.raises(ValueError, match=r"mhc_mult=4"):
        blocks.mhc_pre(residual[:, :3], fn, scale, base, **KW)
    with pytest.raises(TypeError, match=r"`residual` has dtype torch.float16"):
        with torch.no_grad():
            blocks.mhc_pre(residual.half(), fn, scale, base, **KW)
    odd = torch.randn(3, M, 4100, device="cuda").to(BF16)
    fn_odd, *_ = params(4100)
    with pytest.raises(tkreg.NoKernelError, match=r"mhc_pre_big_fuse(.|\n)*H % 64 == 0"):
        with torch.no_grad():
            blocks.mhc_pre(odd, fn_odd, scale, base, **KW)
