"""engram_gate inside torch.compile and CUDA graphs, and its refusals, on a GPU (installed wheel).

- torch.compile(fullgraph=True) of a loss through tkreg.ops.engram_gate and through
  tkreg.blocks.engram_gate ([B, S, m, H] leading dims): one graph, the forward equal to eager's
  and the gradients (the spec's backward kernel, kept whole by the custom op) equal to eager's.
- CUDA graphs: engram_gate's forward, and forward + backward, captured once at T = 1, 64 and 256,
  replayed with new inputs copied in: each replay equals an eager call on those inputs and the
  reference within TileKernels' bound (calc_diff < 2e-10).
- Bad input refused before launch (nothing allocated on the device): mismatched dtypes, T of k
  not x's, an H no kernel serves (H % 8 != 0, H > 16384), for the forward and the backward.
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import blocks
from tkreg.ops import engram as ops
from tkreg.reference import engram as ref

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
CLAMP, EPS = 1e-6, 1e-20


def calc_diff(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    den = (a * a + b * b).sum()
    return 0.0 if den == 0 else float(1 - 2 * (a * b).sum() / den)


def gate_inputs(t, m=4, h=4096, lead=None):
    lead = lead or (t,)
    r = lambda *s: torch.randn(*s, dtype=BF16, device="cuda")  # noqa: E731
    return r(*lead, m, h), r(*lead, m, h), r(*lead, h), r(m, h), r(m, h)


@pytest.mark.parametrize("through", ["ops", "blocks"])
def test_compile_fullgraph_forward_and_backward(seed, through):
    gate = ops.engram_gate if through == "ops" else blocks.engram_gate
    lead = (37,) if through == "ops" else (2, 19)
    args = gate_inputs(0, lead=lead)
    weight = torch.randn(*lead, 4, 4096, device="cuda")

    def loss(x, k, v, wh, we):
        return (gate(x, k, v, wh, we, CLAMP, EPS).float() * weight).sum()

    runs = []
    for f in (loss, torch.compile(loss, fullgraph=True)):
        leaves = [a.clone().requires_grad_() for a in args]
        out = f(*leaves)
        out.backward()
        runs.append((out, [a.grad for a in leaves]))
    assert calc_diff(runs[1][0], runs[0][0]) < 1e-12
    for name, a, b in zip(("x", "k", "v", "wh", "we"), runs[1][1], runs[0][1]):
        assert a is not None and calc_diff(a, b) < 1e-10, name



@pytest.mark.parametrize("t", [1, 64, 256])
def test_cuda_graph_forward_replays_with_new_inputs(seed, t, captured):
    static = gate_inputs(t)
    g, (out, *saved) = captured(lambda: ops.engram_gate_fwd(*static, CLAMP, EPS))
    for _ in range(3):
        new = gate_inputs(t)
        for s, n in zip(static, new):
            s.copy_(n)
        g.replay()
        torch.cuda.synchronize()
        eager = ops.engram_gate_fwd(*new, CLAMP, EPS)
        assert all(torch.equal(a, b) for a, b in zip((out, *saved), eager))
        assert calc_diff(out, ref.engram_gate(*new, CLAMP, EPS)[0]) < 2e-10


@pytest.mark.parametrize("t", [1, 64, 256])
def test_cuda_graph_forward_and_backward_replay(seed, t, captured):
    static = gate_inputs(t)
    grad = torch.randn(t, 4, 4096, dtype=BF16, device="cuda")

    def step():
        _, *saved = ops.engram_gate_fwd(*static, CLAMP, EPS)
        return ops.engram_gate_backward(grad, *static, *saved, CLAMP)
    g, grads = captured(step)
    for _ in range(3):
        new = gate_inputs(t)
        for s, n in zip(static + (grad,), new + (torch.randn_like(grad),)):
            s.copy_(n)
        g.replay()
        torch.cuda.synchronize()
        _, *saved = ops.engram_gate_fwd(*static, CLAMP, EPS)
        eager = ops.engram_gate_backward(grad, *static, *saved, CLAMP)
        for name, a, b in zip(("grad_x", "grad_k", "grad_v", "grad_wh", "grad_we"), grads, eager):
            assert torch.equal(a, b), name


def _refused(fn, err, msg):
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with pytest.raises(err, match=msg):
        fn()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before, "outputs were allocated: the op got as far as a launch"


def _gate_with(i, a, t=3, h=4096):
    args = list(gate_inputs(t, h=h))
    args[i] = a
    return args


@pytest.mark.parametrize("make, err, msg", [
    (lambda: _gate_with(1, torch.zeros(3, 4, 4096, dtype=torch.float16, device="cuda")), TypeError,
     "engram_gate.*`k` has dtype torch.float16; expected torch.bfloat16"),
    (lambda: _gate_with(2, torch.zeros(3, 4096, dtype=torch.float32, device="cuda")), TypeError,
     "engram_gate.*`v` has dtype torch.float32; expected torch.bfloat16"),
    (lambda: _gate_with(1, torch.zeros(2, 4, 4096, dtype=BF16, device="cuda")), ValueError,
     r"engram_gate.*`k` has shape \(2, 4, 4096\); expected \(3, 4, 4096\)"),
    (lambda: gate_inputs(3, h=4100), tkreg.NoKernelError, r"engram_gate(.|\n)*H % 8 == 0"),
    (lambda: gate_inputs(3, h=16392), tkreg.NoKernelError, r"engram_gate(.|\n)*H <= 16384"),
], ids=["dtype k", "dtype v", "T of k", "H % 8", "H too wide"])
def test_forward_bad_input_is_refused_before_launch(make, err, msg):
    args = make()
    _refused(lambda: ops.engram_gate(*args, CLAMP, EPS), err, msg)


@pytest.mark.parametrize("h, msg", [(4100, "H % 8 == 0"), (16392, "H <= 16384")])
def test_backward_h_not_served_is_refused_before_launch(h, msg):
    x, k, v, wh, we = gate_inputs(3, h=h)
    s = torch.zeros(3, 4, device="cuda")
    _refused(lambda: ops.engram_gate_backward(x, x, k, v, wh, we, s, s, s, s, CLAMP), tkreg.NoKernelError,
             r"engram_gate_backward(.|\n)*" + msg)


def test_blocks_refuses_mismatched_token_dims_before_launch():
    x, k, v, wh, we = gate_inputs(0, lead=(2, 3))
    _refused(lambda: blocks.engram_gate(x, k[:1], v, wh, we, CLAMP, EPS), ValueError, "tkreg.blocks.engram_gate: `k`")
