"""The grouped GEMM gradient kernels and the grouped GEMMs' autograd on the GPU, against fp32 torch
per expert: DeepSeek-V3 expert shapes and ragged N / K, empty experts, Zipf segments, a partial last
segment, masked counts 0 and Mmax; rows outside every segment filled with NaN in the inputs (they
must not reach dx or dw) and in a given `out=` (every dx row is written); main_grad accumulation;
autograd through tkreg.grouped_gemm(_masked) against torch autograd; torch.compile(fullgraph=True);
a small MoE layer (moe_expand -> grouped GEMMs -> moe_combine) forward + backward."""
from __future__ import annotations

import pytest
import torch

import tkreg

pytestmark = pytest.mark.gpu
BF16, FP16 = torch.bfloat16, torch.float16
ops = tkreg.ops
NAN = float("nan")


def sm90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


needs_sm90 = pytest.mark.skipif(not sm90(), reason="the grouped gradient GEMMs ship for sm_90a only")


def close(got, want, rel, what=""):
    """max |got - want| within rel of want's largest magnitude (NaN anywhere fails)."""
    got, want = got.float(), want.float()
    assert torch.isfinite(got).all(), f"{what}: {(~torch.isfinite(got)).sum().item()} non-finite values"
    err = (got - want).abs().max().item() if got.numel() else 0.0
    top = want.abs().max().item() if want.numel() else 0.0
    assert err <= rel * max(top, 1e-6), f"{what}: max err {err} vs max |want| {top} (rel {rel})"


def rand(*shape, dt=BF16, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(dt)


def zipf(total, experts):
    w = [1.0 / (i + 1) for i in range(experts)]
    sizes = [int(total * x / sum(w)) for x in w]
    sizes[0] += total - sum(sizes)
    return sizes


def layout(sizes, tail=0, align=128):
    """(offsets tensor, host offsets, M): segments padded to `align` except the last (its true size),
    then `tail` rows no segment covers."""
    offs = [0]
    for i, s in enumerate(sizes):
        offs.append(offs[-1] + (s if i == len(sizes) - 1 else -(-s // align) * align))
    return torch.tensor(offs, dtype=torch.int32, device="cuda"), offs, offs[-1] + tail


def poison(t, offs):
    """NaN into the rows outside [offs[0], offs[-1])."""
    t[offs[-1]:] = NAN
    t[:offs[0]] = NAN
    return t


CONTIGUOUS = [  # (sizes, tail rows, N, K)
    ([512] * 8, 0, 4096, 7168),                       # DeepSeek-V3 gate_up, uniform
    (zipf(4096, 8), 64, 7168, 2048),                  # down, Zipf, ragged last segment and a tail
    ([0, 300, 0, 0, 129, 1], 200, 256, 512),          # empty experts, ragged last segment
    ([128, 0], 5, 136, 264),                          # empty last expert, ragged N / K
    ([77], 0, 64, 8),                                 # one ragged segment, smallest K
]


@needs_sm90
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("sizes, tail, n, k", CONTIGUOUS, ids=lambda v: str(v)[:40])
def test_contiguous_dgrad_wgrad_vs_fp32(sizes, tail, n, k, dt, seed):
    g, o, m = layout(sizes, tail)
    e = len(sizes)
    dy, x, w = poison(rand(m, n, dt=dt), o), poison(rand(m, k, dt=dt), o), rand(e, n, k, dt=dt, scale=0.05)
    out = torch.full((m, k), NAN, dtype=dt, device="cuda")
    dx = ops.grouped_gemm_dgrad(dy, w, g, out=out)
    assert dx is out and dx.shape == (m, k) and dx.dtype == dt
    dw = ops.grouped_gemm_wgrad(dy, x, g)
    assert dw.shape == (e, n, k) and dw.dtype == dt
    main = torch.randn(e, n, k, device="cuda")
    start = main.clone()
    assert ops.grouped_gemm_wgrad(dy, x, g, main_grad=main) is main
    assert (dx[o[-1]:] == 0).all() and (dx[:o[0]] == 0).all(), "rows outside every segment: zeros"
    for i in range(e):
        lo, hi = o[i], o[i + 1]
        want_x = dy[lo:hi].float() @ w[i].float()
        close(dx[lo:hi], want_x, 1e-2, f"dx expert {i} rows {lo}:{hi}")
        want_w = dy[lo:hi].float().t() @ x[lo:hi].float()
        close(dw[i], want_w, 1e-2, f"dw expert {i} ({hi - lo} rows)")
        close(main[i] - start[i], want_w, 1e-4, f"main_grad expert {i}")   # fp32 throughout
        if hi == lo:
            assert (dw[i] == 0).all() and (main[i] == start[i]).all(), f"empty expert {i}"


@needs_sm90
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("e, mmax, n, k", [(4, 256, 4096, 7168), (8, 1024, 7168, 2048), (3, 40, 136, 264)])
def test_masked_dgrad_wgrad_vs_fp32(e, mmax, n, k, dt, seed):
    counts_l = [0, mmax, 1] + [int(v) for v in torch.randint(0, mmax + 1, (e - 3,))]
    counts = torch.tensor(counts_l[:e], dtype=torch.int32, device="cuda")
    dy, x, w = rand(e, mmax, n, dt=dt), rand(e, mmax, k, dt=dt), rand(e, n, k, dt=dt, scale=0.05)
    for i, c in enumerate(counts_l[:e]):
        dy[i, c:] = NAN
        x[i, c:] = NAN
    out = torch.full((e, mmax, k), NAN, dtype=dt, device="cuda")
    dx = ops.grouped_gemm_masked_dgrad(dy, w, counts, out=out)
    dw = ops.grouped_gemm_masked_wgrad(dy, x, counts)
    assert dw.shape == (e, n, k)
    for i, c in enumerate(counts_l[:e]):
        close(dx[i, :c], dy[i, :c].float() @ w[i].float(), 1e-2, f"dx expert {i} count {c}")
        assert (dx[i, c:] == 0).all(), f"dx expert {i}: rows >= count {c} zero"
        close(dw[i], dy[i, :c].float().t() @ x[i, :c].float(), 1e-2, f"dw expert {i} count {c}")


@needs_sm90
def test_wgrad_accumulates_over_micro_batches(seed):
    e, n, k = 4, 1024, 2048
    g, o, m = layout(zipf(2048, e))
    main = torch.zeros(e, n, k, device="cuda")
    want = torch.zeros(e, n, k, device="cuda")
    for _ in range(3):
        dy, x = rand(m, n), rand(m, k)
        ops.grouped_gemm_wgrad(dy, x, g, main_grad=main)
        for i in range(e):
            want[i] += dy[o[i]:o[i + 1]].float().t() @ x[o[i]:o[i + 1]].float()
    close(main, want, 1e-4, "main_grad")


def _torch_grouped(a, b, o):
    rows = [a[o[i]:o[i + 1]] @ b[i].t() for i in range(len(o) - 1)]
    return torch.cat([a.new_zeros(o[0], b.shape[1])] + rows + [a.new_zeros(a.shape[0] - o[-1], b.shape[1])])


@pytest.mark.parametrize("sizes, tail, n, k", [(zipf(2048, 4), 50, 1024, 512), ([0, 200, 3], 0, 136, 72)],
                         ids=str)
def test_grouped_gemm_autograd_vs_torch(sizes, tail, n, k, seed):
    """On sm_90a the gradient kernels; elsewhere the per-expert torch.matmul fallback."""
    g, o, m = layout(sizes, tail)
    a, b = rand(m, k).requires_grad_(), rand(len(sizes), n, k, scale=0.05).requires_grad_()
    y = ops.grouped_gemm(a, b, g)
    dy = rand(m, n)
    y.backward(dy)
    a32, b32 = a.detach().float().requires_grad_(), b.detach().float().requires_grad_()
    _torch_grouped(a32, b32, o).backward(dy.float())
    close(a.grad, a32.grad, 1e-2, "da")
    close(b.grad, b32.grad, 1e-2, "db")


def test_grouped_gemm_masked_autograd_vs_torch(seed):
    e, mmax, n, k = 4, 192, 512, 256
    counts = torch.tensor([0, 192, 77, 128], dtype=torch.int32, device="cuda")
    a, b = rand(e, mmax, k).requires_grad_(), rand(e, n, k, scale=0.05).requires_grad_()
    dy = rand(e, mmax, n)
    ops.grouped_gemm_masked(a, b, counts).backward(dy)
    mask = (torch.arange(mmax, device="cuda")[None, :] < counts[:, None]).float()[..., None]
    a32, b32 = a.detach().float().requires_grad_(), b.detach().float().requires_grad_()
    (torch.einsum("emk,enk->emn", a32, b32) * mask).backward(dy.float())
    close(a.grad, a32.grad, 1e-2, "da")
    close(b.grad, b32.grad, 1e-2, "db")


@needs_sm90
def test_grouped_gemm_autograd_main_grad(seed):
    g, o, m = layout([300, 0, 500])
    a, b = rand(m, 512).requires_grad_(), rand(3, 256, 512).requires_grad_()
    b.main_grad = torch.ones(3, 256, 512, device="cuda")
    dy = rand(m, 256)
    ops.grouped_gemm(a, b, g).backward(dy)
    assert b.grad is None
    for i in range(3):
        want = dy[o[i]:o[i + 1]].float().t() @ a.detach()[o[i]:o[i + 1]].float()
        close(b.main_grad[i] - 1, want, 1e-4, f"main_grad expert {i}")


def test_grouped_autograd_compiles_fullgraph(seed):
    g, o, m = layout([256, 0, 100])
    a = rand(m, 256).requires_grad_()
    b1, b2 = rand(3, 512, 256, scale=0.05).requires_grad_(), rand(3, 256, 256, scale=0.05).requires_grad_()

    def f(a, b1, b2):
        return ops.grouped_gemm(ops.silu_and_mul(ops.grouped_gemm(a, b1, g)), b2, g)[: o[-1]].float().sum()
    torch.compile(f, fullgraph=True)(a, b1, b2).backward()
    got = [t.grad.clone() for t in (a, b1, b2)]
    for t in (a, b1, b2):
        t.grad = None
    f(a, b1, b2).backward()
    for gr, t, name in zip(got, (a, b1, b2), ("a", "b1", "b2")):
        close(gr, t.grad, 1e-3, name)


def test_small_moe_forward_backward_vs_fp32(seed):
    """topk_gate -> moe_mapping (128-row segments) -> moe_expand -> grouped GEMMs -> moe_combine,
    gradients of x, the expert weights and the router weights against fp32 torch (dense per-expert)."""
    t, h, i, e, k = 512, 256, 128, 8, 2
    x = rand(t, h).requires_grad_()
    w1 = rand(e, 2 * i, h, scale=0.06).requires_grad_()
    w2 = rand(e, h, i, scale=0.09).requires_grad_()
    idx, wts = ops.topk_gate(torch.randn(t, e, device="cuda"), k)
    wts = wts.requires_grad_()
    m = ops.moe_mapping(idx, e, alignment=128)
    ye = ops.grouped_gemm(ops.silu_and_mul(ops.grouped_gemm(ops.moe_expand(x, m), w1, m.expert_offsets)), w2,
                          m.expert_offsets)
    out = ops.moe_combine(ye, m, wts)
    dout = rand(t, h)
    out.backward(dout)
    x32, w132, w232, wts32 = (v.detach().float().requires_grad_() for v in (x, w1, w2, wts))
    ref = torch.zeros(t, h, device="cuda")
    for j in range(k):
        g1 = torch.einsum("th,tnh->tn", x32, w132[idx[:, j].long()])
        act = torch.nn.functional.silu(g1[:, :i]) * g1[:, i:]
        ref = ref + wts32[:, j:j + 1] * torch.einsum("ti,thi->th", act, w232[idx[:, j].long()])
    ref.backward(dout.float())
    close(out, ref, 2e-2, "out")
    for got, want, name in ((x.grad, x32.grad, "x"), (w1.grad, w132.grad, "w1"), (w2.grad, w232.grad, "w2"),
                            (wts.grad, wts32.grad, "topk_weights")):
        close(got, want, 3e-2, name)


def test_small_moe_compiles_fullgraph(seed):
    """The MoE chain under torch.compile(fullgraph=True) (inductor): gradients match eager's.  Needs
    moe_expand's backward to call the moe_combine torch op while AOTAutograd traces it."""
    t, h, i, e, k = 512, 256, 128, 8, 2
    x = rand(t, h).requires_grad_()
    w1, w2 = rand(e, 2 * i, h, scale=0.06).requires_grad_(), rand(e, h, i, scale=0.09).requires_grad_()
    logits = torch.randn(t, e, device="cuda")

    def f(x, w1, w2):
        idx, wts = ops.topk_gate(logits, k)
        m = ops.moe_mapping(idx, e, alignment=128)
        h1 = ops.grouped_gemm(ops.moe_expand(x, m), w1, m.expert_offsets)
        ye = ops.grouped_gemm(ops.silu_and_mul(h1), w2, m.expert_offsets)
        return ops.moe_combine(ye, m, wts).float().sum()
    torch.compile(f, fullgraph=True)(x, w1, w2).backward()
    got = [v.grad.clone() for v in (x, w1, w2)]
    for v in (x, w1, w2):
        v.grad = None
    f(x, w1, w2).backward()
    for g, v, name in zip(got, (x, w1, w2), ("x", "w1", "w2")):
        close(g, v.grad, 1e-3, name)
