"""gemm_swiglu on a real GPU (sm_90a), from the installed wheel.

Two oracles: the unfused tkreg path it replaces, silu_and_mul(gemm(a, [gate; up])), bit for bit
(the epilogue rounds each product to the output dtype first and then runs silu_and_mul's fp32
steps; every bf16/fp16 GEMM tile accumulates K in the same order); and the float64 formula,
relative Frobenius error <= 1e-2 (the two bf16 roundings of the products and one of the output).
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.spec import Variant

pytestmark = pytest.mark.gpu
BF16, FP16 = torch.bfloat16, torch.float16
ops = tkreg.ops
K = 4096


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def operands(m, i, k, dt):
    a = torch.randn(m, k, dtype=dt, device="cuda")
    g = torch.randn(i, k, dtype=dt, device="cuda") * k ** -0.5
    u = torch.randn(i, k, dtype=dt, device="cuda") * k ** -0.5
    return a, g, u


@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("i", [1536, 12288, 14336])
@pytest.mark.parametrize("m", [1, 16, 32, 33, 64, 512, 4096])
def test_matches_the_unfused_path_bit_for_bit(m, i, dt, seed):
    a, g, u = operands(m, i, K, dt)
    out = torch.full((m, i), float("nan"), dtype=dt, device="cuda")
    got = ops.gemm_swiglu(a, ops.pack_gate_up(g, u), out=out)
    assert got is out and not got.isnan().any(), "unwritten outputs"
    want = ops.silu_and_mul(ops.gemm(a, torch.cat([g, u])))
    bad = (got != want).sum().item()
    assert bad == 0, f"M={m} I={i} {dt}: {bad} of {got.numel()} differ, rel err {rel_err(got, want):.2e}"
    x, y = a.double() @ g.double().t(), a.double() @ u.double().t()
    assert rel_err(got, x * torch.sigmoid(x) * y) < 1e-2


@pytest.mark.parametrize("m, i, k", [(5, 40, 72), (77, 1000, 264), (200, 2056, 520), (700, 3000, 1032)])
def test_ragged_edges(m, i, k, seed):
    """M, I, K not multiples of any tile: partial tiles at every edge, a K tail."""
    a, g, u = operands(m, i, k, BF16)
    got = ops.gemm_swiglu(a, ops.pack_gate_up(g, u))
    want = ops.silu_and_mul(ops.gemm(a, torch.cat([g, u])))
    assert torch.equal(got, want), f"M={m} I={i} K={k}: {(got != want).sum().item()} differ"


def test_the_shapes_above_reach_every_shipped_class(shipped):
    """The bit-exact test's shapes run every sm_90a variant on a 132-SM GPU."""
    reached = set()
    for m in (1, 16, 32, 33, 64, 512, 4096):
        for i in (1536, 12288, 14336):
            for dt in (BF16, FP16):
                reached.add(tkreg.explain("gemm_swiglu", torch.empty(m, K, dtype=dt), torch.empty(2 * i, K, dtype=dt),
                                          arch="sm_90a", sm_count=132).chosen)
    assert reached == set(shipped["tkreg.gemm_swiglu"]["variants"]["sm_90a"]), \
        sorted({Variant.parse_key(k)["shape_class"] for k in reached})


def test_cuda_graph_capture(seed):
    a, g, u = operands(16, 1536, K, BF16)
    w = ops.pack_gate_up(g, u)
    out = torch.empty(16, 1536, dtype=BF16, device="cuda")
    ops.gemm_swiglu(a, w, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.gemm_swiglu(a, w, out=out)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, ops.gemm_swiglu(a, w))
