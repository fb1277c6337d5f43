"""engram_hash, engram_gate and engram_fused_weight without a GPU: the installed variants against
kernels_src/engram's specs, explain's picks and reasons, validation before launch, and the
references against expected values written here (integer arithmetic emulated in Python ints for
the hash; fp64 for the gate)."""
from __future__ import annotations

import math

import pytest
import torch

import tkreg
from tkreg.ops import engram as ops
from tkreg.reference import engram as ref

BF16, I32, I64 = torch.bfloat16, torch.int32, torch.int64
MASK64 = (1 << 64) - 1


def wrap(v: int, bits: int) -> int:
    """Two's-complement wrap of a Python int to `bits` bits."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def hash_inputs(t=5, n=3, layers=2, e=8, big=False, gen=None):
    """TileKernels' test ranges (ids, multipliers < 1e5; table sizes 1e5..1e6); `big`: multipliers
    over the whole int64 range, so products wrap and hashes go negative."""
    ids = torch.randint(0, 100000, (t, n), dtype=I32, generator=gen)
    hi = 1 << 62 if big else 100000
    mult = torch.randint(-hi if big else 0, hi, (layers, n), dtype=I64, generator=gen)
    vocab = torch.randint(100000, 1000000, (layers, n - 1, e), dtype=I32, generator=gen)
    flat = vocab.view(layers, -1)
    offsets = (flat.cumsum(1, dtype=I64) - flat).to(I32)              # each table's first row
    return ids, mult, vocab, offsets


def hash_expected(ids, mult, vocab, offsets):
    """Element by element in Python ints: 64-bit wrapping products and XOR, floor mod, 32-bit sum."""
    L, T, n, E = mult.shape[0], ids.shape[0], ids.shape[1], vocab.shape[2]
    out = torch.empty(L, T, (n - 1) * E, dtype=I32)
    for l in range(L):
        for t in range(T):
            h = 0
            for i in range(n):
                h = wrap((h ^ (int(ids[t, i]) * int(mult[l, i]))) & MASK64, 64)
                if i == 0:
                    continue
                for j in range(E):
                    c = (i - 1) * E + j
                    out[l, t, c] = wrap(h % int(vocab[l, i - 1, j]) + int(offsets[l, c]), 32)
    return out


# ---- what the wheel ships -------------------------------------------------------------------------
def test_wheel_ships_the_engram_specs(ships_the_specs):
    assert set(ships_the_specs("engram")) == {"tkreg.engram_hash", "tkreg.engram_gate", "tkreg.engram_fused_weight",
                                              "tkreg.engram_gate_backward"}


# ---- the hash reference ---------------------------------------------------------------------------
@pytest.mark.parametrize("t, n, layers, e, big", [(0, 3, 2, 8, False), (1, 3, 2, 8, False), (37, 3, 2, 8, False),
                                                  (37, 3, 2, 8, True), (9, 2, 1, 3, False), (9, 5, 3, 4, True)])
def test_hash_reference_is_the_integer_semantics(t, n, layers, e, big):
    g = torch.Generator().manual_seed(t * 100 + n * 10 + e)
    args = hash_inputs(t, n, layers, e, big, g)
    got = ref.engram_hash(*args)
    assert got.dtype == I32 and got.shape == (layers, t, (n - 1) * e)
    assert torch.equal(got, hash_expected(*args))


def test_hash_prefixes_and_floor_mod():
    """Block p hashes ids 0..p+1; a negative hash takes the table size's sign (floor mod)."""
    ids = torch.tensor([[3, 5, 7]], dtype=I32)
    mult = torch.tensor([[1, 1, 1]], dtype=I64)
    vocab = torch.tensor([[[100], [100]]], dtype=I32)
    offsets = torch.tensor([[0, 1000]], dtype=I32)
    assert ref.engram_hash(ids, mult, vocab, offsets).tolist() == [[[3 ^ 5, 1000 + (3 ^ 5 ^ 7)]]]
    neg = ref.engram_hash(ids, torch.tensor([[-1, 0, 0]], dtype=I64), vocab, offsets)
    assert neg.tolist() == [[[97, 1097]]]                   # -3 mod 100 = 97


# ---- the gate reference ---------------------------------------------------------------------------
def gate_inputs(t=3, m=4, h=256, gen=None, dtype=BF16):
    r = lambda *s: torch.randn(*s, generator=gen).to(dtype)  # noqa: E731
    return r(t, m, h), r(t, m, h), r(t, h), r(m, h), r(m, h)


def gate_expected(x, k, v, wh, we, clamp, eps):
    """fp64, written from the formula."""
    X, K, V, WH, WE = (a.double() for a in (x, k, v, wh, we))
    H = X.shape[-1]
    rx = 1 / torch.sqrt((X * X).sum(-1) / H + eps)
    rk = 1 / torch.sqrt((K * K).sum(-1) / H + eps)
    dot = ((X * WH) * (K * WE)).sum(-1)
    s = dot * rx * rk / math.sqrt(H)
    mag = torch.sqrt(torch.maximum(s.abs(), torch.full_like(s, clamp)))
    g = 1 / (1 + torch.exp(-torch.where(s > 0, mag, torch.where(s < 0, -mag, torch.zeros_like(s)))))
    return X + g[..., None] * V[:, None, :], dot, g, rx, rk


@pytest.mark.parametrize("t, m, h", [(0, 4, 64), (1, 4, 256), (37, 4, 512), (5, 2, 4096), (3, 4, 7168)])
def test_gate_reference_matches_the_formula(t, m, h):
    g = torch.Generator().manual_seed(t + m + h)
    args = gate_inputs(t, m, h, g)
    clamp, eps = 1e-6, 1e-20
    out, dot, gate, rx, rk = ref.engram_gate(*args, clamp, eps)
    w_out, w_dot, w_gate, w_rx, w_rk = gate_expected(*args, clamp, eps)
    assert out.dtype == BF16 and out.shape == (t, m, h)
    assert all(a.dtype == torch.float32 and a.shape == (t, m) for a in (dot, gate, rx, rk))
    torch.testing.assert_close(out.double(), w_out, rtol=2 ** -8, atol=2 ** -8 * max(1.0, w_out.abs().max().item() if t else 1.0))
    for a, b in ((dot, w_dot), (gate, w_gate), (rx, w_rx), (rk, w_rk)):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5 * math.sqrt(h))


def test_gate_clamp_and_sign():
    """|s| below clamp gives sqrt(clamp) with s's sign; s == 0 (a zero row) gives gate 1/2."""
    h = 64
    x = torch.ones(3, 1, h, dtype=BF16)
    k = torch.ones(3, 1, h, dtype=BF16)
    k[1] = -1
    k[2] = 0
    v = torch.ones(3, h, dtype=BF16)
    w = torch.full((1, h), 1e-4, dtype=BF16)
    clamp = 0.25
    _, dot, gate, _, _ = ref.engram_gate(x, k, v, w, w, clamp, 1e-6)
    lo = 1 / (1 + math.exp(-0.5))
    assert gate[0, 0].item() == pytest.approx(lo, rel=1e-6)
    assert gate[1, 0].item() == pytest.approx(1 - lo, rel=1e-6)
    assert dot[2, 0].item() == 0 and gate[2, 0].item() == 0.5


def test_fused_weight_reference_is_exact():
    wh, we = torch.randn(4, 7168).to(BF16), torch.randn(4, 7168).to(BF16)
    got = ref.engram_fused_weight(wh, we)
    assert got.dtype == torch.float32 and torch.equal(got.double(), wh.double() * we.double())


# ---- dispatch -------------------------------------------------------------------------------------
def gate_empty(t, m, h):
    return (torch.empty(t, m, h, dtype=BF16), torch.empty(t, m, h, dtype=BF16), torch.empty(t, h, dtype=BF16),
            torch.empty(m, h, dtype=BF16), torch.empty(m, h, dtype=BF16), 1e-6, 1e-20)


@pytest.mark.parametrize("h, baked", [(4096, True), (7168, True), (2048, False), (7160, False), (16384, False), (64, False)])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_gate_picks_a_kernel_for_every_h_multiple_of_8(h, baked, arch):
    e = tkreg.explain("engram_gate", *gate_empty(37, 4, h), arch=arch)
    assert e.chosen is not None, str(e)
    assert e.chosen.startswith(f"H={h},") == baked, e.chosen


@pytest.mark.parametrize("h, why", [(4100, "H % 8 == 0"), (16392, "H <= 16384")])
def test_gate_without_a_kernel_says_why(h, why):
    e = tkreg.explain("engram_gate", *gate_empty(3, 4, h), arch="sm_90a")
    assert e.chosen is None and why in str(e), str(e)


def test_gate_takes_strided_k_and_v():
    """k and v as slices of wider buffers (a fused projection's output) need no copy."""
    t, m, h = 5, 4, 4096
    kbig, vbig = torch.empty(t, m, 2 * h, dtype=BF16), torch.empty(t, 2 * h, dtype=BF16)
    args = list(gate_empty(t, m, h))
    args[1], args[2] = kbig[..., h:], vbig[:, :h]
    assert tkreg.explain("engram_gate", *args, arch="sm_90a").chosen.startswith("H=4096,")
    args[1] = torch.empty(t, m, h + 4, dtype=BF16)[..., :h]          # token stride not a multiple of 8
    assert tkreg.explain("engram_gate", *args, arch="sm_90a").chosen is None


def test_hash_takes_any_sizes_and_refuses_unigrams():
    for t, n, layers, e in ((0, 3, 2, 8), (16384, 3, 2, 8), (7, 2, 1, 1), (7, 4, 3, 16)):
        args = hash_inputs(t, n, layers, e)
        assert tkreg.explain("engram_hash", *args, arch="sm_90a").chosen is not None
    e = tkreg.explain("engram_hash", *hash_inputs(4, 1, 2, 8), arch="sm_90a")
    assert e.chosen is None and "n >= 2" in str(e), str(e)


# ---- validation before launch ---------------------------------------------------------------------
@pytest.mark.parametrize("make, err, msg", [
    (lambda: (hash_inputs()[0].long(),) + hash_inputs()[1:], TypeError, "`ngram_ids` has dtype torch.int64; expected torch.int32"),
    (lambda: hash_inputs()[:1] + (hash_inputs()[1].int(),) + hash_inputs()[2:], TypeError, "`multipliers` has dtype torch.int32; expected torch.int64"),
    (lambda: hash_inputs()[:3] + (torch.zeros(2, 15, dtype=I32),), ValueError, r"`offsets` has shape \(2, 15\); expected \(2, 16\)"),
    (lambda: hash_inputs()[:2] + (torch.ones(2, 3, 8, dtype=I32),) + hash_inputs()[3:], ValueError, r"`vocab_sizes` has shape \(2, 3, 8\); expected \(2, 2, 8\)"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_hash_bad_input(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        ops.engram_hash(*make())


def _gate_with(i, a):
    args = list(gate_empty(3, 4, 4096))
    args[i] = a
    return tuple(args)


@pytest.mark.parametrize("make, err, msg", [
    (lambda: _gate_with(1, torch.empty(2, 4, 4096, dtype=BF16)), ValueError, r"`k` has shape \(2, 4, 4096\); expected \(3, 4, 4096\)"),
    (lambda: _gate_with(0, torch.empty(3, 4, 4096, dtype=torch.float16)), TypeError, "`x` has dtype torch.float16"),
    (lambda: _gate_with(2, torch.empty(3, 4096, dtype=torch.float32)), TypeError, "`v` has dtype torch.float32; expected torch.bfloat16"),
    (lambda: _gate_with(3, torch.empty(2, 4096, dtype=BF16)), ValueError, r"`wh` has shape \(2, 4096\); expected \(4, 4096\)"),
    (lambda: _gate_with(4, torch.empty(4, 7168, dtype=BF16)), ValueError, r"`we` has shape \(4, 7168\); expected \(4, 4096\)"),
    (lambda: gate_empty(3, 4, 4096), ValueError, "on the CPU.*TKREG_FALLBACK=reference"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_gate_bad_input(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        ops.engram_gate(*make())


# ---- the typed functions through TKREG_FALLBACK=reference -----------------------------------------
def test_typed_functions_route_to_the_reference(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    g = torch.Generator().manual_seed(7)
    args = hash_inputs(11, 3, 2, 8, True, g)
    assert torch.equal(ops.engram_hash(*args), hash_expected(*args))
    x, k, v, wh, we = gate_inputs(4, 4, 512, g)
    got = ops.engram_gate_fwd(x, k, v, wh, we, 1e-6, 1e-20)
    want = ref.engram_gate(x, k, v, wh, we, 1e-6, 1e-20)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert torch.equal(ops.engram_gate(x, k, v, wh, we, 1e-6, 1e-20), want[0])
    assert torch.equal(ops.engram_fused_weight(wh, we), wh.float() * we.float())


# ---- the backward ---------------------------------------------------------------------------------
def autograd_of_the_formula(x, k, v, wh, we, grad_out, clamp, eps):
    """fp64 torch autograd through the forward's formula (gate_expected): the backward's oracle."""
    leaves = [a.double().requires_grad_() for a in (x, k, v, wh, we)]
    out = gate_expected(*leaves, clamp, eps)[0]
    out.backward(grad_out.double())
    return [a.grad for a in leaves]


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("t, m, h, clamp", [(1, 4, 256, 1e-6), (37, 4, 512, 1e-6), (9, 2, 4096, 1e-6), (37, 4, 128, 0.3)])
def test_backward_reference_is_autograd_of_the_forward(t, m, h, clamp):
    g = torch.Generator().manual_seed(t * m + h)
    x, k, v, wh, we = gate_inputs(t, m, h, g)
    grad_out = torch.randn(t, m, h, generator=g).to(BF16)
    eps = 1e-20
    _, dot, gate, rx, rk = ref.engram_gate(x, k, v, wh, we, clamp, eps)
    got = ref.engram_gate_backward(grad_out, x, k, v, wh, we, dot, gate, rx, rk, clamp)
    want = autograd_of_the_formula(x, k, v, wh, we, grad_out, clamp, eps)
    assert [a.dtype for a in got] == [BF16, BF16, BF16, torch.float32, torch.float32]
    for name, a, b in zip(("grad_x", "grad_k", "grad_v", "grad_wh", "grad_we"), got, want):
        assert a.shape == b.shape, name
        assert rel_err(a, b) < 1e-2, (name, rel_err(a, b))


def test_backward_reference_at_zero_tokens_and_zero_rows():
    x, k, v, wh, we = gate_inputs(0, 4, 64)
    e = torch.empty(0, 4)
    got = ref.engram_gate_backward(x, x, k, v, wh, we, e, e, e, e, 1e-6)
    assert got[3].shape == (4, 64) and not got[3].any() and got[2].shape == (0, 64)
    x, k, v, wh, we = gate_inputs(2, 1, 64)
    k.zero_()                                                # dot 0: the clamp's flat part, D = 0
    _, dot, gate, rx, rk = ref.engram_gate(x, k, v, wh, we, 1e-6, 1e-6)
    go = torch.randn(2, 1, 64).to(BF16)
    gx, gk, _, gwh, _ = ref.engram_gate_backward(go, x, k, v, wh, we, dot, gate, rx, rk, 1e-6)
    assert torch.equal(gx, go) and not gk.any() and not gwh.any()


@pytest.mark.parametrize("h, baked", [(4096, True), (7168, True), (64, False), (7160, False), (16384, False)])
def test_backward_picks_a_kernel(h, baked):
    t, m = 37, 4
    a = torch.empty(t, m, h, dtype=BF16)
    s = torch.empty(t, m)
    e = tkreg.explain("engram_gate_backward", a, a, a, torch.empty(t, h, dtype=BF16), torch.empty(m, h, dtype=BF16),
                      torch.empty(m, h, dtype=BF16), s, s, s, s, 1e-6, arch="sm_90a")
    assert e.chosen is not None and e.chosen.startswith(f"H={h},") == baked, str(e)


def test_autograd_routes_to_the_backward(monkeypatch):
    """tkreg.ops.engram_gate under autograd: the gradients are engram_gate_backward's (here its
    reference, TKREG_FALLBACK=reference), and a weight's main_grad receives its fp32 gradient."""
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    g = torch.Generator().manual_seed(3)
    x, k, v, wh, we = gate_inputs(5, 4, 256, g)
    grad_out = torch.randn(5, 4, 256, generator=g).to(BF16)
    leaves = [a.clone().requires_grad_() for a in (x, k, v, wh, we)]
    ops.engram_gate(*leaves, 1e-6, 1e-20).backward(grad_out)
    _, dot, gate, rx, rk = ref.engram_gate(x, k, v, wh, we, 1e-6, 1e-20)
    want = ref.engram_gate_backward(grad_out, x, k, v, wh, we, dot, gate, rx, rk, 1e-6)
    for a, b in zip(leaves, want):
        assert torch.equal(a.grad, b.to(a.dtype))
    wh2 = wh.clone().requires_grad_()
    wh2.main_grad = torch.ones(4, 256)
    ops.engram_gate(x, k, v, wh2, we, 1e-6, 1e-20).backward(grad_out)
    assert wh2.grad is None and torch.equal(wh2.main_grad, 1 + want[3])
