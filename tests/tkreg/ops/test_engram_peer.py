"""The engram ops against DeepSeek TileKernels' own tests (`tests/engram/*`), ported: the same
inputs (randn bf16 activations and weights, ids < 1e5, multipliers < 1e5, table sizes 1e5..1e6,
offsets the exclusive running sum of each layer's table sizes), the same sizes (m = 4, H in
TileKernels' generate_hidden_sizes(128) = 2048, 2560, 3072, 4096, 6144, 7168; T in 0, 4001, 8001;
hash n = 3, L = 2, E = 8) and the same bounds on calc_diff(a, b) = 1 - 2 sum(ab) / sum(a^2 + b^2):

  engram_hash             bit-exact                    (test_engram_hash)
  engram_fused_weight     bit-exact                    (test_engram_fused_weight)
  engram_gate forward     < 2e-10 for out, dot, gate, rstd_x, rstd_k; out without the saved
                          values equals out with them (test_engram_gate_fwd)
  engram_gate_backward    < 1e-8 for every gradient, fed the oracle's saved values, as
                          TileKernels feeds its reference's (test_engram_gate_bwd)
  weight-gradient sum     < 1e-10, accumulated into a Megatron-style main_grad that starts
                          random, expected from the op's own saved values (test_engram_grad_w_reduce;
                          tkreg's partial rows are the backward's scratch, so the reduction is
                          checked through the op's output)

The expected values are written here from the formulas, in fp64 (outputs TileKernels returns in
bf16 rounded to bf16 once, as its reference does).  On the CPU (TKREG_FALLBACK=reference: the
check is of tkreg's torch reference) T is 37; on a GPU (the wheel's kernels) TileKernels' T.
"""
from __future__ import annotations

import pytest
import torch

from tkreg.ops import engram as ops

BF16, F64, I32, I64 = torch.bfloat16, torch.float64, torch.int32, torch.int64
HIDDEN = (2048, 2560, 3072, 4096, 6144, 7168)   # TileKernels' generate_hidden_sizes(128)
GPU_TOKENS = (0, 4001, 8001)                     # generate_num_tokens() with TK_FULL_TEST
CPU_TOKENS = (0, 37)
M, CLAMP, EPS = 4, 1e-6, 1e-20                   # TileKernels' hc, clamp_value, eps
CHUNK = 1024                                     # tokens an fp64 oracle step holds


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request, monkeypatch):
    if request.param == "cpu":
        monkeypatch.setenv("TKREG_FALLBACK", "reference")
    else:
        monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    return request.param


def tokens(device):
    return GPU_TOKENS if device == "cuda" else CPU_TOKENS


def calc_diff(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    den = (a * a + b * b).sum()
    return 0.0 if den == 0 else float(1 - 2 * (a * b).sum() / den)


# ---- engram_hash ----------------------------------------------------------------------------------
def hash_inputs(t, device, n=3, layers=2, tables=8):
    ids = torch.randint(0, 100000, (t, n), dtype=I32, device=device)
    mult = torch.randint(0, 100000, (layers, n), dtype=I64, device=device)
    vocab = torch.randint(100000, 1000000, (layers, n - 1, tables), dtype=I32, device=device)
    sizes = vocab.view(layers, -1).tolist()
    offsets = torch.tensor([[sum(row[:j]) for j in range(len(row))] for row in sizes], dtype=I32, device=device)
    return ids, mult, vocab, offsets


def hash_expected(ids, mult, vocab, offsets):
    """Python ints: the running XOR of id * multiplier (64-bit two's complement) over ids 0..p+1,
    floor mod table j's size, plus its offset (32-bit)."""
    ids, mult, vocab, offsets = ids.tolist(), mult.tolist(), vocab.tolist(), offsets.tolist()
    w64 = lambda v: ((v + (1 << 63)) % (1 << 64)) - (1 << 63)  # noqa: E731
    w32 = lambda v: ((v + (1 << 31)) % (1 << 32)) - (1 << 31)  # noqa: E731
    out = []
    for l, ml in enumerate(mult):
        rows = []
        for row in ids:
            h, cols = w64(row[0] * ml[0]), []
            for p in range(1, len(row)):
                h = w64(h ^ w64(row[p] * ml[p]))
                for size in vocab[l][p - 1]:
                    cols.append(w32(h % size + offsets[l][len(cols)]))
            rows.append(cols)
        out.append(rows)
    width = len(vocab[0]) * len(vocab[0][0])
    return torch.tensor(out, dtype=I32).view(len(mult), len(ids), width)


def test_hash(device):
    for t in tokens(device):
        torch.manual_seed(t)
        args = hash_inputs(t, device)
        got = ops.engram_hash(*args)
        assert got.dtype == I32 and got.shape == (2, t, 16)
        assert torch.equal(got.cpu(), hash_expected(*args)), t


# ---- engram_fused_weight --------------------------------------------------------------------------
@pytest.mark.parametrize("h", HIDDEN)
def test_fused_weight(device, h):
    torch.manual_seed(h)
    wh, we = (torch.randn(M, h, dtype=BF16, device=device) for _ in range(2))
    got = ops.engram_fused_weight(wh, we)
    assert got.dtype == torch.float32 and torch.equal(got.double(), wh.double() * we.double())


# ---- engram_gate ----------------------------------------------------------------------------------
def gate_inputs(t, h, device):
    r = lambda *s: torch.randn(*s, dtype=BF16, device=device)  # noqa: E731
    return r(t, M, h), r(t, M, h), r(t, h), r(M, h), r(M, h)


def gate_formula(x, k, v, wh, we, clamp=CLAMP, eps=EPS):
    """fp64 (differentiable): (out unrounded, raw dot, gate, rstd_x, rstd_k)."""
    h = x.shape[-1]
    rx = (x.square().sum(-1) / h + eps).rsqrt()
    rk = (k.square().sum(-1) / h + eps).rsqrt()
    dot = (x * wh * (k * we)).sum(-1)
    s = dot * rx * rk * h ** -0.5
    gate = torch.sigmoid(s.sign() * s.abs().clamp_min(clamp).sqrt())
    return x + gate[..., None] * v[:, None, :], dot, gate, rx, rk


def chunks(t):
    return [slice(i, min(i + CHUNK, t)) for i in range(0, t, CHUNK)] or [slice(0, 0)]


def gate_expected(x, k, v, wh, we):
    """The forward in fp64 token chunk by token chunk; out rounded once to bf16."""
    parts = []
    for c in chunks(x.shape[0]):
        o, *saved = gate_formula(x[c].double(), k[c].double(), v[c].double(), wh.double(), we.double())
        parts.append((o.to(BF16), *saved))
    return [torch.cat(p) for p in zip(*parts)]


@pytest.mark.parametrize("h", HIDDEN)
def test_gate_forward(device, h):
    for t in tokens(device):
        torch.manual_seed(t + h)
        args = gate_inputs(t, h, device)
        want = gate_expected(*args)
        got = ops.engram_gate_fwd(*args, CLAMP, EPS)
        for name, a, b in zip(("out", "dot", "gate", "rstd_x", "rstd_k"), got, want):
            assert a.shape == b.shape and a.dtype == (BF16 if name == "out" else torch.float32), name
            d = calc_diff(a, b)
            assert d < 2e-10, f"T={t} {name}: calc_diff {d:.3e}"
        assert torch.equal(ops.engram_gate(*args, CLAMP, EPS), got[0])


def backward_expected(x, k, v, wh, we, grad_out):
    """fp64 autograd of gate_formula, chunk by chunk: grad_x, grad_k, grad_v rounded once to bf16
    (TileKernels' bf16 leaves), grad_wh and grad_we fp64 sums over every token; and the fp32
    saved values of the same forward, which the backward under test is fed."""
    whd, wed = (w.double().requires_grad_() for w in (wh, we))
    gx, gk, gv, saved = [], [], [], []
    for c in chunks(x.shape[0]):
        leaves = [a[c].double().requires_grad_() for a in (x, k, v)]
        out, *s = gate_formula(*leaves, whd, wed)
        out.backward(grad_out[c].double())
        for acc, leaf in zip((gx, gk, gv), leaves):
            acc.append(leaf.grad.to(BF16))
        saved.append([a.detach().float() for a in s])
    grad_w = [w.grad if w.grad is not None else torch.zeros_like(w) for w in (whd, wed)]
    return [torch.cat(g) for g in (gx, gk, gv)] + grad_w, [torch.cat(p) for p in zip(*saved)]


@pytest.mark.parametrize("h", HIDDEN)
def test_gate_backward(device, h):
    for t in tokens(device):
        torch.manual_seed(t + h + 1)
        args = gate_inputs(t, h, device)
        grad_out = torch.randn(t, M, h, dtype=BF16, device=device)
        want, saved = backward_expected(*args, grad_out)
        got = ops.engram_gate_backward(grad_out, *args, *saved, CLAMP)
        for name, a, b in zip(("grad_x", "grad_k", "grad_v", "grad_wh", "grad_we"), got, want):
            assert a.shape == b.shape, name
            d = calc_diff(a, b)
            assert d < 1e-8, f"T={t} {name}: calc_diff {d:.3e}"


def weight_sum_expected(grad_out, x, k, v, dot, gate, rx, rk, clamp=CLAMP):
    """sum over tokens of D * x * k in fp64 from the op's own saved values (the backward's weight
    reduction alone: its inputs' rounding near s = 0, where D ~ 1 / sqrt|s|, left out)."""
    g, xd, kd, vd = (a.double() for a in (grad_out, x, k, v))
    crr = rx.double() * rk.double() / x.shape[-1] ** 0.5
    sa = (dot.double() * crr).abs()
    gd = gate.double()
    dg = (g * vd[:, None, :]).sum(-1)
    d = torch.where((sa < clamp) | (sa == 0), 0.0, dg * gd * (1 - gd) * crr / (2 * sa.clamp_min(1e-300).sqrt()))
    return (d[..., None] * xd * kd).sum(0)


@pytest.mark.parametrize("h", HIDDEN)
def test_weight_gradient_sum_into_main_grad(device, h):
    """grad_wh = we * sum_t D x k and grad_we = wh * the same sum, added into an fp32 main_grad
    that already holds a gradient (TileKernels' grad_w_reduce accumulates in place): bound 1e-10."""
    t = tokens(device)[-1]
    torch.manual_seed(h + 2)
    x, k, v, wh, we = gate_inputs(t, h, device)
    grad_out = torch.randn(t, M, h, dtype=BF16, device=device)
    _, *saved = ops.engram_gate_fwd(x, k, v, wh, we, CLAMP, EPS)
    gw = weight_sum_expected(grad_out, x, k, v, *saved)
    wh, we = wh.clone().requires_grad_(), we.clone().requires_grad_()
    start = [torch.randn(M, h, device=device) for _ in range(2)]
    wh.main_grad, we.main_grad = start[0].clone(), start[1].clone()
    ops.engram_gate(x, k, v, wh, we, CLAMP, EPS).backward(grad_out)
    assert wh.grad is None and we.grad is None
    for name, w, s, other in (("wh", wh, start[0], we), ("we", we, start[1], wh)):
        d = calc_diff(w.main_grad, s.double() + gw * other.double())
        assert d < 1e-10, f"{name}: calc_diff {d:.3e}"
