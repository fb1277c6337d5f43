"""The mHC family on a real GPU, from the installed wheel, against tkreg.reference.mhc (fp32 math)
run on the same GPU, with TileKernels' input distributions (residual randn, rows scaled by
1 + 0.01 h; fn randn * 1e-4; scale, base randn * 0.1) and m = 4.

Sizes: T in {0, 1, 37, 4097, 16384} x H in {4096, 7168}, plus other H (any H % 8 for the row ops,
H % 64 for norm_fn and big_fuse).  Tolerances are TileKernels' tests/mhc ones:
- expand: exact.  post: torch.testing defaults for bf16 (rtol 1.6e-2, atol 1e-5), as test_post.
- apply_mix: atol 1e-2 (test_pre_apply_mix) and rtol 2^-7, not its 1e-3: TileKernels' reference
  sums in its kernel's order, torch's sum here in another, and two fp32 sums rounded once to bf16
  may land one bf16 ulp apart (up to 2^-7 relative), which 1e-3 refuses above |x| ~ 1.3: at 37
  tokens no element was that unlucky, from 4097 up some always are.
- split_mixes: rtol 1e-5, atol 2e-5 (test_pre_split_mixes).  head_compute_mix (and its backward):
  rtol 1e-4, atol 1e-5 (test_head_compute_mix).
- sinkhorn: torch.testing defaults for fp32 (rtol 1.3e-6, atol 1e-5) (test_sinkhorn).
- norm_fn: atol 1e-3, rtol 1e-3 against fp32 (test_norm_fn; TileKernels' own kernel is TF32, tkreg's
  is fp32 FMA, so the bound holds with margin: the measured error is printed).
- big_fuse: against tkreg's own unfused chain on the GPU (TileKernels asserts bitwise equality
  there; tkreg's chain shares the split-K partial kernel and the finish arithmetic: asserted to one
  bf16 / fp32 rounding, for FMA contraction the compiler may choose differently) and against the
  fp32 reference within the norm_fn / sinkhorn bounds.
- backward: against torch autograd of the references (fp32 leaves where TileKernels' tests use
  fp32), TileKernels' bounds: post grads (x, residual: bf16 defaults; post, comb: 1e-4),
  apply_mix 1e-2 / 1e-3, split_mixes 1e-5 / 2e-5, sinkhorn fp32 defaults, norm_fn residual grad bf16
  defaults and fn grad atol 3e-2 rtol 1e-3.
"""
from __future__ import annotations

import pytest
import torch

import tkreg  # noqa: F401  (loads the wheel's packs)
from tkreg.ops import mhc as ops
from tkreg.reference import mhc as ref

pytestmark = pytest.mark.gpu
BF16, F32 = torch.bfloat16, torch.float32
TOKENS = (0, 1, 37, 4097, 16384)
HIDDEN = (4096, 7168)
M, N = 4, 24
APPLY_RTOL = 2 ** -7   # one bf16 ulp (module docstring)


def inputs(t, h, weight=False):
    rows = 1 + 0.01 * torch.arange(M, device="cuda", dtype=F32).view(1, M, 1)
    residual = (torch.randn(t, M, h, device="cuda") * rows).to(BF16)
    fn = torch.randn(N, M * h, device="cuda") * 1e-4
    scale, base = torch.randn(3, device="cuda") * 0.1, torch.randn(N, device="cuda") * 0.1
    nw = 1 + 0.1 * torch.randn(M * h, device="cuda") if weight else None
    return residual, fn, scale, base, nw


@pytest.mark.parametrize("h", HIDDEN + (1280, 2056))
@pytest.mark.parametrize("t", TOKENS)
def test_row_ops(t, h):
    torch.manual_seed(t + h)
    residual = torch.randn(t, M, h, device="cuda").to(BF16)
    x = torch.randn(t, h, device="cuda").to(BF16)
    pre, post = torch.rand(t, M, 1, device="cuda"), torch.rand(t, M, 1, device="cuda")
    comb = torch.rand(t, M, M, device="cuda")
    assert torch.equal(ops.expand_to_mhc(x, M), ref.expand_to_mhc(x, M))
    torch.testing.assert_close(ops.mhc_pre_apply_mix(residual, pre), ref.mhc_pre_apply_mix(residual, pre),
                               atol=1e-2, rtol=APPLY_RTOL)
    torch.testing.assert_close(ops.mhc_post(x, residual, post, comb), ref.mhc_post(x, residual, post, comb))


@pytest.mark.parametrize("m", [1, 2, 3, 8])
def test_any_m_row_ops(m):
    torch.manual_seed(m)
    r, pre = torch.randn(37, m, 4096, device="cuda").to(BF16), torch.rand(37, m, 1, device="cuda")
    torch.testing.assert_close(ops.mhc_pre_apply_mix(r, pre), ref.mhc_pre_apply_mix(r, pre), atol=1e-2, rtol=APPLY_RTOL)
    x = r[:, 0].contiguous()                                          # expand takes contiguous rows, as TileKernels
    assert torch.equal(ops.expand_to_mhc(x, m), ref.expand_to_mhc(x, m))


@pytest.mark.parametrize("t", TOKENS)
def test_split_sinkhorn_head(t):
    torch.manual_seed(t)
    mixes = torch.randn(t, N, device="cuda")
    scale, base = torch.randn(3, device="cuda") * 0.1, torch.randn(N, device="cuda") * 0.1
    got = ops.mhc_pre_split_mixes(mixes, scale, base, M, 2.0, 1e-6)
    for a, b in zip(got, ref.mhc_pre_split_mixes(mixes, scale, base, M, 2.0, 1e-6)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-5)
    comb = torch.randn(t, M, M, device="cuda")
    torch.testing.assert_close(ops.sinkhorn_normalize(comb, 10, 1e-6), ref.sinkhorn_normalize(comb, 10, 1e-6))
    torch.testing.assert_close(ops.sinkhorn_normalize(comb, 3, 1e-4), ref.sinkhorn_normalize(comb, 3, 1e-4))
    sl = mixes[:, :M]                                                 # a strided slice, as mhc_head passes
    torch.testing.assert_close(ops.mhc_head_compute_mix(sl, scale[:1], base[:M], 1e-6),
                               ref.mhc_head_compute_mix(sl, scale[:1], base[:M], 1e-6), rtol=1e-4, atol=1e-5)


def norm_fn_error(got, want) -> float:
    return ((got - want).abs() / (want.abs() + 1e-3)).max().item() if got.numel() else 0.0


@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("h", HIDDEN + (1280, 2560))
@pytest.mark.parametrize("t", TOKENS)
def test_norm_fn(t, h, weight):
    torch.manual_seed(t + h + weight)
    residual, fn, _, _, nw = inputs(t, h, weight)
    mixes, rstd = ops.mhc_pre_norm_fn_fwd(residual, fn, nw, 1e-6)
    w_mixes, w_rstd = ref.mhc_pre_norm_fn(residual, fn, nw, 1e-6)
    print(f"norm_fn T={t} H={h}: fp32 FMA vs fp32 reference, max rel err {norm_fn_error(mixes, w_mixes):.2e}")
    torch.testing.assert_close(mixes, w_mixes, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(rstd, w_rstd, atol=1e-5, rtol=1e-5)
    again = ops.mhc_pre_norm_fn_fwd(residual, fn, nw, 1e-6)[0]
    assert torch.equal(mixes, again)                                  # deterministic split-K


@pytest.mark.parametrize("h", HIDDEN + (1280, 2560, 16384))
@pytest.mark.parametrize("t", TOKENS)
def test_big_fuse(t, h):
    torch.manual_seed(t + h)
    residual, fn, scale, base, _ = inputs(t, h)
    post, comb, x = ops.mhc_pre_big_fuse(residual, fn, scale, base, 1e-6, 1e-6, 1e-6, 1.0, 10)
    mixes = ops.mhc_pre_norm_fn(residual, fn, None, 1e-6)
    pre, w_post, w_comb = ops.mhc_pre_split_mixes(mixes, scale, base, M, 1.0, 1e-6)
    torch.testing.assert_close(post, w_post, rtol=1e-6, atol=0)      # the same arithmetic, maybe other FMAs
    torch.testing.assert_close(comb, ops.sinkhorn_normalize(w_comb, 10, 1e-6), rtol=0, atol=1e-6)
    torch.testing.assert_close(x, ops.mhc_pre_apply_mix(residual, pre), rtol=2 ** -7, atol=0)
    r_post, r_comb, r_x = ref.mhc_pre_big_fuse(residual, fn, scale, base, None, 1e-6, 1e-6, 1e-6, 1.0, 10)
    torch.testing.assert_close(post, r_post, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(comb, r_comb, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(x, r_x, atol=1e-2, rtol=APPLY_RTOL)


def test_big_fuse_with_norm_weight():
    torch.manual_seed(3)
    residual, fn, scale, base, nw = inputs(4097, 7168, weight=True)
    got = ops.mhc_pre_big_fuse(residual, fn, scale, base, 1e-6, 1e-6, 1e-6, 2.0, 20, norm_weight=nw)
    want = ref.mhc_pre_big_fuse(residual, fn, scale, base, nw, 1e-6, 1e-6, 1e-6, 2.0, 20)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[2], want[2], atol=1e-2, rtol=APPLY_RTOL)


# ---- backward against torch autograd of the references ----------------------------------------------
def autograd(fn, leaves, grad_outs):
    leaves = [a.detach().clone().requires_grad_() for a in leaves]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(outs, grad_outs)
    return [a.grad for a in leaves]


@pytest.mark.parametrize("h", HIDDEN)
@pytest.mark.parametrize("t", TOKENS)
def test_row_backward(t, h):
    torch.manual_seed(t + h + 1)
    residual, x = torch.randn(t, M, h, device="cuda").to(BF16), torch.randn(t, h, device="cuda").to(BF16)
    pre, post = torch.rand(t, M, 1, device="cuda"), torch.rand(t, M, 1, device="cuda")
    comb = torch.rand(t, M, M, device="cuda")
    go = torch.randn(t, h, device="cuda").to(BF16)
    got = autograd(ops.mhc_pre_apply_mix, (residual, pre), (go,))
    want = autograd(ref.mhc_pre_apply_mix, (residual, pre), (go,))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-2, rtol=1e-3)
    go = torch.randn(t, M, h, device="cuda").to(BF16)
    got = autograd(lambda a: ops.expand_to_mhc(a, M), (x,), (go,))
    torch.testing.assert_close(got[0], autograd(lambda a: ref.expand_to_mhc(a, M), (x,), (go,))[0])
    got = autograd(ops.mhc_post, (x, residual, post, comb), (go,))
    want = autograd(ref.mhc_post, (x, residual, post, comb), (go,))
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    torch.testing.assert_close(got[2], want[2], atol=1e-4 * h ** 0.5, rtol=1e-4)
    torch.testing.assert_close(got[3], want[3], atol=1e-4 * h ** 0.5, rtol=1e-4)


@pytest.mark.parametrize("t", TOKENS)
def test_small_backward(t):
    torch.manual_seed(t + 2)
    comb, go = torch.randn(t, M, M, device="cuda"), torch.randn(t, M, M, device="cuda")
    got = autograd(lambda c: ops.sinkhorn_normalize(c, 10, 1e-6), (comb,), (go,))
    want = autograd(lambda c: ref.sinkhorn_normalize(c, 10, 1e-6), (comb,), (go,))
    torch.testing.assert_close(got[0], want[0])
    mixes, scale, base = torch.randn(t, N, device="cuda"), torch.randn(3, device="cuda"), torch.randn(N, device="cuda")
    gos = (torch.randn(t, M, 1, device="cuda"), torch.randn(t, M, 1, device="cuda"), torch.randn(t, M, M, device="cuda"))
    got = autograd(lambda *a: ops.mhc_pre_split_mixes(*a, M, 2.0, 1e-6), (mixes, scale, base), gos)
    want = autograd(lambda *a: ref.mhc_pre_split_mixes(*a, M, 2.0, 1e-6), (mixes, scale, base), gos)
    for a, b in zip(got, want):                       # scale and base: sums over T of fp32 terms
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-5 * max(1, t) ** 0.5)
    mix, sc, b, go = (torch.randn(t, N, device="cuda"), torch.randn(1, device="cuda"), torch.randn(M, device="cuda"),
                      torch.randn(t, M, device="cuda"))
    got = autograd(lambda x, s_, b_: ops.mhc_head_compute_mix(x[:, :M], s_, b_, 1e-6), (mix, sc, b), (go,))
    want = autograd(lambda x, s_, b_: ref.mhc_head_compute_mix(x[:, :M], s_, b_, 1e-6), (mix, sc, b), (go,))
    for a, w in zip(got, want):                       # TileKernels' test_head_compute_mix bounds
        torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-5 * max(1, t) ** 0.5)


@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("h", HIDDEN)
@pytest.mark.parametrize("t", TOKENS)
def test_norm_fn_backward(t, h, weight):
    torch.manual_seed(t + h + 3)
    residual, fn, _, _, nw = inputs(t, h, weight)
    go = torch.randn(t, N, device="cuda")
    leaves = (residual, fn) + ((nw,) if weight else ())
    got = autograd(lambda r, f, *w: ops.mhc_pre_norm_fn(r, f, w[0] if w else None, 1e-6), leaves, (go,))
    want = autograd(lambda r, f, *w: ref.mhc_pre_norm_fn(r, f, w[0] if w else None, 1e-6)[0], leaves, (go,))
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1], atol=3e-2, rtol=1e-3)
    if weight:
        torch.testing.assert_close(got[2], want[2], atol=3e-2, rtol=1e-3)
    saved = ops.mhc_pre_norm_fn_fwd(residual, fn, nw, 1e-6)
    a = ops.mhc_pre_norm_fn_backward(go, residual, fn, nw, *saved)
    b = ops.mhc_pre_norm_fn_backward(go, residual, fn, nw, *saved)
    assert all(torch.equal(p, q) for p, q in zip(a, b))               # deterministic weight grads
