"""rotary_embedding on a real GPU: in place, bit for bit against the torch reference.

Kernel and reference both compute x1*c - x2*s and x2*c + x1*s with fp32 products and sums
(no FMA) and round once, so the comparison is exact.  q and k sit inside guarded buffers to
catch any write outside them.
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

pytestmark = pytest.mark.gpu
DEV = "cuda"
BF16, FP16 = torch.bfloat16, torch.float16
I64 = torch.int64
GUARD = 64          # elements of sentinel on each side of q and k (a multiple of 8: stays 16-byte aligned)
SENTINEL = 1234.0


def make_cache(p, d, dt, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32, device=DEV) / d))
    f = torch.outer(torch.arange(p, dtype=torch.float32, device=DEV), inv)
    return torch.cat((f.cos(), f.sin()), dim=-1).to(dt)


def guarded(t, width, dt):
    """A [t, width] contiguous tensor inside a sentinel-filled buffer; returns (tensor, buffer)."""
    buf = torch.full((t * width + 2 * GUARD,), SENTINEL, dtype=dt, device=DEV)
    x = buf[GUARD:GUARD + t * width].view(t, width)
    x.copy_(torch.randn(t, width, device=DEV).to(dt))
    return x, buf


def check_guards(buf, n, what):
    assert (buf[:GUARD] == SENTINEL).all() and (buf[GUARD + n:] == SENTINEL).all(), f"{what}: wrote outside"


def same(got, want, what):
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("hq, hk", [(32, 8), (64, 8), (8, 1), (5, 3), (1, 1)])
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("t", [1, 37, 4097])
def test_matches_reference_exactly_in_place(t, dt, d, neox, hq, hk, seed):
    p = 8192
    cache = make_cache(p, d, dt)
    pos = torch.randint(0, p, (t,), dtype=I64, device=DEV)
    q, qbuf = guarded(t, hq * d, dt)
    k, kbuf = guarded(t, hk * d, dt)
    want_q, want_k = q.clone(), k.clone()
    reference.rotary_embedding(pos, want_q, want_k, cache, neox)
    qp, kp = q.data_ptr(), k.data_ptr()
    rq, rk = tkreg.ops.rotary_embedding(pos, q, k, cache, neox)
    assert rq is q and rk is k and q.data_ptr() == qp and k.data_ptr() == kp
    what = f"t={t} {dt} D={d} {'neox' if neox else 'gptj'} HQ={hq} HK={hk}"
    same(q, want_q, what + " q")
    same(k, want_k, what + " k")
    check_guards(qbuf, q.numel(), what + " q")
    check_guards(kbuf, k.numel(), what + " k")


@pytest.mark.parametrize("neox", [True, False])
def test_out_of_range_positions_are_clamped(neox, seed):
    p, d = 100, 128
    cache = make_cache(p, d, BF16)
    pos = torch.tensor([-1, 0, 99, 100, 2**40, -(2**40), 57], dtype=I64, device=DEV)
    q, qbuf = guarded(7, 4 * d, BF16)
    k, kbuf = guarded(7, 2 * d, BF16)
    want_q, want_k = q.clone(), k.clone()
    reference.rotary_embedding(pos, want_q, want_k, cache, neox)
    tkreg.ops.rotary_embedding(pos, q, k, cache, neox)
    same(q, want_q, "clamped q")
    same(k, want_k, "clamped k")
    check_guards(qbuf, q.numel(), "q")
    check_guards(kbuf, k.numel(), "k")


def test_layouts_and_empty(seed):
    d, cache = 64, make_cache(512, 64, FP16)
    pos = torch.randint(0, 512, (2, 5), dtype=I64, device=DEV)                # [B, S]
    q = torch.randn(2, 5, 6, d, device=DEV).to(FP16)                         # [B, S, H, D]
    k = torch.randn(2, 5, 2 * d, device=DEV).to(FP16)                        # [B, S, H * D]
    want_q, want_k = q.clone().view(10, -1), k.clone().view(10, -1)
    reference.rotary_embedding(pos.view(-1), want_q, want_k, cache, False)
    rq, rk = tkreg.ops.rotary_embedding(pos, q, k, cache, False)
    assert rq is q and rk is k
    same(q.view(10, -1), want_q, "4-D q")
    same(k.view(10, -1), want_k, "3-D k")
    e = torch.empty(0, 8 * d, dtype=FP16, device=DEV)
    tkreg.ops.rotary_embedding(torch.empty(0, dtype=I64, device=DEV), e, e.clone(), cache)


def test_position_zero_is_identity(seed):
    cache = make_cache(16, 128, BF16)
    q, k = torch.randn(33, 4096, device=DEV).to(BF16), torch.randn(33, 1024, device=DEV).to(BF16)
    q0, k0 = q.clone(), k.clone()
    tkreg.ops.rotary_embedding(torch.zeros(33, dtype=I64, device=DEV), q, k, cache, True)
    same(q, q0, "q")
    same(k, k0, "k")


def test_cuda_graph_replay(seed):
    cache = make_cache(4096, 128, BF16)
    pos = torch.randint(0, 4096, (37,), dtype=I64, device=DEV)
    q, k = torch.randn(37, 4096, device=DEV).to(BF16), torch.randn(37, 1024, device=DEV).to(BF16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        tkreg.ops.rotary_embedding(pos, q.clone(), k.clone(), cache)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tkreg.ops.rotary_embedding(pos, q, k, cache)
    for _ in range(2):
        q.copy_(torch.randn_like(q, dtype=torch.float32).to(BF16))
        k.copy_(torch.randn_like(k, dtype=torch.float32).to(BF16))
        pos.copy_(torch.randint(0, 4096, (37,), dtype=I64, device=DEV))
        want_q, want_k = q.clone(), k.clone()
        reference.rotary_embedding(pos, want_q, want_k, cache, True)
        g.replay()
        torch.cuda.synchronize()
        same(q, want_q, "graph q")
        same(k, want_k, "graph k")
