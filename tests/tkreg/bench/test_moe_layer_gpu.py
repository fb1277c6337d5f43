"""The MoE layer composed of tkreg ops (tkreg/bench/moe_layer.py) against the expert-by-expert
torch loop: a small layer and DeepSeek-V3's shapes, bf16 and FP8, through torch.compile
(fullgraph) and CUDA-graph replay at decode sizes.  Relative Frobenius error <= 1e-2."""
from __future__ import annotations

import pytest
import torch

from tkreg.bench.moe_layer import V3, loop_layer, make_weights, tkreg_layer

pytestmark = pytest.mark.gpu
SMALL = dict(hidden=1024, experts=32, inter=256, k=4, groups=4, topk_groups=2, scaling=2.5)


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm()).item()


def x_of(t, hidden, seed):
    return torch.randn(t, hidden, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed)).to(torch.bfloat16)


@pytest.fixture(scope="module", params=[False, True], ids=["bf16", "fp8"])
def v3(request):
    w = make_weights(torch, V3["hidden"], V3["experts"], V3["inter"], request.param)
    yield request.param, w
    del w
    torch.cuda.empty_cache()


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("t", [1, 300])
def test_small_layer_matches_loop(t, fp8):
    w = make_weights(torch, SMALL["hidden"], SMALL["experts"], SMALL["inter"], fp8, seed=1)
    x = x_of(t, SMALL["hidden"], 2)
    got = tkreg_layer(x, w, SMALL, fp8)
    assert got.shape == x.shape and got.dtype == torch.bfloat16
    assert rel_err(got, loop_layer(x, w, SMALL, fp8)) <= 1e-2


def test_small_layer_compiles_fullgraph():
    w = make_weights(torch, SMALL["hidden"], SMALL["experts"], SMALL["inter"], False, seed=3)
    x = x_of(200, SMALL["hidden"], 4)
    f = torch.compile(lambda x: tkreg_layer(x, w, SMALL), fullgraph=True)
    assert rel_err(f(x), tkreg_layer(x, w, SMALL)) == 0.0


def test_v3_layer_matches_loop(v3):
    fp8, w = v3
    x = x_of(4096, V3["hidden"], 5)
    assert rel_err(tkreg_layer(x, w, V3, fp8), loop_layer(x, w, V3, fp8)) <= 1e-2


@pytest.mark.parametrize("t", [64, 256])
def test_v3_layer_replays_as_cuda_graph(v3, t):
    """Captured once; replayed on new tokens (so new routing): equal to the eager layer."""
    fp8, w = v3
    x = x_of(t, V3["hidden"], 6)
    tkreg_layer(x, w, V3, fp8)                      # load every module outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tkreg_layer(x, w, V3, fp8)
    for seed in (7, 8):
        x.copy_(x_of(t, V3["hidden"], seed))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(out, tkreg_layer(x, w, V3, fp8)) <= 1e-5, seed   # split-K GEMMs may sum in another order
