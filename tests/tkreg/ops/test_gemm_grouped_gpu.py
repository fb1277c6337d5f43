"""The grouped GEMMs (contiguous and masked, bf16 / fp16 and FP8) on a real GPU, from the installed
wheel, against float64 products per expert.

bf16/fp16: relative Frobenius error <= 2e-3 against the exact (float64) product, per expert.
FP8: against the float64 product of the dequantized inputs (the GEMM's own error), <= 2e-3.
Rows no segment covers must keep what `out=` held (NaN here): the kernels never write them.
The bf16 / fp16 shape lists reach every shape class the wheel ships for sm_90a on a 132-SM GPU
(checked on the CPU through `tkreg.explain(..., sm_count=132)`).
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg.reference import quant as ref8
from tkreg.spec import Variant

pytestmark = pytest.mark.gpu
BF16, FP16, FP8, I32 = torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.int32
ops = tkreg.ops


def shape_class(op, *args) -> str:
    """The class an H100 / H200 (sm_90a, 132 SMs) runs for these (CPU stand-in) arguments."""
    return Variant.parse_key(tkreg.explain(op, *args, arch="sm_90a", sm_count=132).chosen)["shape_class"]


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def offsets(sizes):
    """Segments padded to 128 rows, the last non-empty one exact (an unaligned total)."""
    last = max((i for i, s in enumerate(sizes) if s), default=-1)
    out = [0]
    for i, s in enumerate(sizes):
        out.append(out[-1] + (s if i >= last else -(-s // 128) * 128))
    return out


def check_contiguous(y, want_of_expert, offs, m):
    """Every segment within 2e-3 of its float64 product; rows outside every segment still NaN."""
    covered = torch.zeros(m, dtype=torch.bool, device=y.device)
    for e in range(len(offs) - 1):
        lo, hi = offs[e], offs[e + 1]
        if hi > lo:
            assert not torch.isnan(y[lo:hi]).any(), (e, lo, hi)
            assert rel_err(y[lo:hi], want_of_expert(e, lo, hi)) <= 2e-3, (e, lo, hi)
            covered[lo:hi] = True
    assert torch.isnan(y[~covered]).all()


# ---- bf16 / fp16 contiguous ------------------------------------------------------------------------
CONTIGUOUS = [  # (expert sizes, N, K)
    ([300, 0, 1, 128, 0, 77], 1000, 1032),                   # empty, single-row, unaligned total
    ([1, 1, 1], 24, 8),                                      # single-row experts, tiny N, K
    ([0, 0, 0, 0], 512, 256),                                # every expert empty: nothing written
    ([2048, 1500, 0, 2049], 2048, 520),                      # persistent tile: partial tiles, a tail
]


def test_contiguous_shapes_reach_every_shipped_class(shipped_values):
    reached = {shape_class("grouped_gemm", torch.empty(offsets(sizes)[-1] + 130, k, dtype=BF16),
                           torch.empty(len(sizes), n, k, dtype=BF16), torch.tensor(offsets(sizes), dtype=I32))
               for sizes, n, k in CONTIGUOUS}
    assert reached == shipped_values("tkreg.grouped_gemm", "sm_90a", "shape_class")


@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("sizes, n, k", CONTIGUOUS)
def test_contiguous_matches_float64(sizes, n, k, dt, seed):
    offs = offsets(sizes)
    m = offs[-1] + 130                                       # a tail past offsets[E]
    a = torch.randn(m, k, dtype=dt, device="cuda")
    b = torch.randn(len(sizes), n, k, dtype=dt, device="cuda")
    g = torch.tensor(offs, dtype=I32, device="cuda")
    out = torch.full((m, n), float("nan"), dtype=dt, device="cuda")
    y = ops.grouped_gemm(a, b, g, out=out)
    assert y is out
    check_contiguous(y, lambda e, lo, hi: a[lo:hi].double() @ b[e].double().t(), offs, m)


def test_contiguous_zero_rows_and_allocated_out(seed):
    b = torch.randn(3, 256, 128, dtype=BF16, device="cuda")
    y = ops.grouped_gemm(torch.empty(0, 128, dtype=BF16, device="cuda"), b, torch.zeros(4, dtype=I32, device="cuda"))
    assert y.shape == (0, 256)
    a = torch.randn(256, 128, dtype=BF16, device="cuda")
    y = ops.grouped_gemm(a, b, torch.tensor([0, 128, 128, 256], dtype=I32, device="cuda"))
    assert rel_err(y[128:], a[128:].double() @ b[2].double().t()) <= 2e-3


def test_contiguous_graph_replay_with_new_offsets(seed):
    a = torch.randn(1024, 512, dtype=BF16, device="cuda")
    b = torch.randn(4, 768, 512, dtype=BF16, device="cuda")
    g = torch.tensor(offsets([256, 256, 256, 256]), dtype=I32, device="cuda")
    out = torch.empty(1024, 768, dtype=BF16, device="cuda")
    ops.grouped_gemm(a, b, g, out=out)          # load the module outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.grouped_gemm(a, b, g, out=out)
    for sizes in ([0, 512, 129, 0], [1000, 0, 0, 0], [1, 1, 1, 1]):
        offs = offsets(sizes)
        g.copy_(torch.tensor(offs, dtype=I32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_contiguous(out, lambda e, lo, hi: a[lo:hi].double() @ b[e].double().t(), offs, 1024)


# ---- bf16 / fp16 masked ------------------------------------------------------------------------------
MASKED = [  # (counts, Mmax, N, K)
    ([0, 1, 64, 130, 200], 200, 1000, 1032),
    ([0, 1, 63, 64], 64, 2048, 520),
    ([5, 999], 1, 264, 64),                                  # counts above Mmax: clamped to Mmax
]


def test_masked_shapes_reach_every_shipped_class(shipped_values):
    reached = {shape_class("grouped_gemm_masked", torch.empty(len(c), mmax, k, dtype=BF16),
                           torch.empty(len(c), n, k, dtype=BF16), torch.tensor(c, dtype=I32))
               for c, mmax, n, k in MASKED}
    assert reached == shipped_values("tkreg.grouped_gemm_masked", "sm_90a", "shape_class")


def check_masked(y, a, b, counts, mmax):
    for e, c in enumerate(counts):
        c = min(max(c, 0), mmax)
        if c:
            assert rel_err(y[e, :c], a[e, :c].double() @ b[e].double().t()) <= 2e-3, (e, c)
        assert torch.isnan(y[e, c:]).all(), (e, c)


@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("counts, mmax, n, k", MASKED)
def test_masked_matches_float64(counts, mmax, n, k, dt, seed):
    e = len(counts)
    a = torch.randn(e, mmax, k, dtype=dt, device="cuda")
    b = torch.randn(e, n, k, dtype=dt, device="cuda")
    c = torch.tensor(counts, dtype=I32, device="cuda")
    out = torch.full((e, mmax, n), float("nan"), dtype=dt, device="cuda")
    assert ops.grouped_gemm_masked(a, b, c, out=out) is out
    check_masked(out, a, b, counts, mmax)


@pytest.mark.parametrize("mmax", [64, 384])
def test_masked_graph_replay_with_changed_counts(mmax, seed):
    e, n, k = 6, 1024, 512
    a = torch.randn(e, mmax, k, dtype=BF16, device="cuda")
    b = torch.randn(e, n, k, dtype=BF16, device="cuda")
    counts = torch.zeros(e, dtype=I32, device="cuda")
    out = torch.empty(e, mmax, n, dtype=BF16, device="cuda")
    ops.grouped_gemm_masked(a, b, counts, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.grouped_gemm_masked(a, b, counts, out=out)
    for new in ([0, 1, 2, 3, 4, 5], [mmax, 0, mmax - 1, 17, 0, mmax], [0] * 6):
        counts.copy_(torch.tensor(new, dtype=I32))
        a.copy_(torch.randn_like(a))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_masked(out, a, b, new, mmax)


def test_compile_fullgraph(seed):
    a = torch.randn(2, 100, 256, dtype=BF16, device="cuda")
    b = torch.randn(2, 512, 256, dtype=BF16, device="cuda")
    c = torch.tensor([100, 30], dtype=I32, device="cuda")
    f = torch.compile(lambda a, b, c: ops.grouped_gemm_masked(a, b, c) * 2, fullgraph=True)
    y = f(a, b, c)
    assert rel_err(y[1, :30], 2 * a[1, :30].double() @ b[1].double().t()) <= 2e-3
    a2 = a.view(200, 256)
    g = torch.tensor([0, 128, 200], dtype=I32, device="cuda")
    f2 = torch.compile(lambda a, b, g: torch.relu(ops.grouped_gemm(a, b, g)), fullgraph=True)
    y2 = f2(a2, b, g)
    assert rel_err(y2[128:], torch.relu(a2[128:].double() @ b[1].double().t())) <= 2e-3


# ---- FP8 -------------------------------------------------------------------------------------------
def quantized_experts(e, n, k, ue8m0):
    qs = [ops.per_block_quant_fp8(torch.randn(n, k, dtype=BF16, device="cuda") * 0.05, ue8m0=ue8m0) for _ in range(e)]
    return torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])


def dq_product(qa, sa, qb, sb):
    return ref8.dequant_groups(qa, sa).double() @ ref8.dequant_blocks(qb, sb).double().t()


@pytest.mark.parametrize("layout", ["row", "colmajor"])
@pytest.mark.parametrize("ue8m0", [False, True])
@pytest.mark.parametrize("sizes, n, k", [([300, 0, 1, 128, 77], 1000, 1152), ([2048, 0, 1999], 2048, 512),
                                         ([300, 0, 129], 512, 4224)])   # 33 K blocks: the odd tail
def test_fp8_contiguous_matches_dequantized_product(sizes, n, k, layout, ue8m0, seed):
    offs = offsets(sizes)
    m = offs[-1] + 60
    x = torch.randn(m, k, dtype=BF16, device="cuda")
    qa, sa = ops.per_token_group_quant_fp8(x, ue8m0=ue8m0, column_major_scales=layout == "colmajor")
    qb, sb = quantized_experts(len(sizes), n, k, ue8m0)
    g = torch.tensor(offs, dtype=I32, device="cuda")
    out = torch.full((m, n), float("nan"), dtype=BF16, device="cuda")
    ops.fp8_grouped_gemm(qa, sa, qb, sb, g, out=out)
    check_contiguous(out, lambda e, lo, hi: dq_product(qa[lo:hi], sa[lo:hi], qb[e], sb[e]), offs, m)


FP8_MASKED = [([0, 1, 64, 200], 200), ([3, 0, 64], 64)]     # (counts, Mmax) at N = 768, K = 1024


def test_fp8_masked_shapes_reach_every_shipped_class(shipped_values):
    reached = {shape_class("fp8_grouped_gemm_masked", torch.empty(len(c), mmax, 1024, dtype=FP8),
                           torch.empty(len(c), mmax, 8), torch.empty(len(c), 768, 1024, dtype=FP8),
                           torch.empty(len(c), 6, 8), torch.tensor(c, dtype=I32))
               for c, mmax in FP8_MASKED}
    assert reached == shipped_values("tkreg.fp8_grouped_gemm_masked", "sm_90a", "shape_class")


@pytest.mark.parametrize("layout", ["row", "colmajor"])
@pytest.mark.parametrize("counts, mmax", FP8_MASKED)
def test_fp8_masked_matches_dequantized_product(counts, mmax, layout, seed):
    e, n, k = len(counts), 768, 1024
    x = torch.randn(e * mmax, k, dtype=BF16, device="cuda")
    qa, sa = ops.per_token_group_quant_fp8(x, column_major_scales=layout == "colmajor")
    qa, sa = qa.view(e, mmax, k), sa.view(e, mmax, k // 128)     # the colmajor view stays strided
    qb, sb = quantized_experts(e, n, k, False)
    c = torch.tensor(counts, dtype=I32, device="cuda")
    out = torch.full((e, mmax, n), float("nan"), dtype=BF16, device="cuda")
    ops.fp8_grouped_gemm_masked(qa, sa, qb, sb, c, out=out)
    for i, cnt in enumerate(counts):
        if cnt:
            assert rel_err(out[i, :cnt], dq_product(qa[i, :cnt], sa[i, :cnt], qb[i], sb[i])) <= 2e-3, (i, cnt)
        assert torch.isnan(out[i, cnt:]).all()


def test_fp8_masked_graph_and_compile(seed):
    e, mmax, n, k = 4, 128, 512, 512
    x = torch.randn(e * mmax, k, dtype=BF16, device="cuda")
    qa, sa = ops.per_token_group_quant_fp8(x)
    qa, sa = qa.view(e, mmax, k), sa.view(e, mmax, k // 128)
    qb, sb = quantized_experts(e, n, k, False)
    counts = torch.tensor([128, 0, 5, 77], dtype=I32, device="cuda")
    f = torch.compile(lambda *t: ops.fp8_grouped_gemm_masked(*t), fullgraph=True)
    y = f(qa, sa, qb, sb, counts)
    assert rel_err(y[3, :77], dq_product(qa[3, :77], sa[3, :77], qb[3], sb[3])) <= 2e-3
    out = torch.empty(e, mmax, n, dtype=BF16, device="cuda")
    ops.fp8_grouped_gemm_masked(qa, sa, qb, sb, counts, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.fp8_grouped_gemm_masked(qa, sa, qb, sb, counts, out=out)
    counts.copy_(torch.tensor([1, 128, 0, 64], dtype=I32))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    for i, cnt in enumerate([1, 128, 0, 64]):
        if cnt:
            assert rel_err(out[i, :cnt], dq_product(qa[i, :cnt], sa[i, :cnt], qb[i], sb[i])) <= 2e-3
        assert torch.isnan(out[i, cnt:]).all()


# ---- bad inputs: clear errors before launch ----------------------------------------------------------
def test_bad_inputs_on_the_gpu(monkeypatch):
    a = torch.zeros(256, 128, dtype=BF16, device="cuda")
    b = torch.zeros(2, 256, 128, dtype=BF16, device="cuda")
    with pytest.raises(ValueError, match=r"`group_offsets` has shape \(2,\); expected \(3,\)"):
        ops.grouped_gemm(a, b, torch.zeros(2, dtype=I32, device="cuda"))
    with pytest.raises(ValueError, match=r"`b` has shape \(2, 256, 128\); expected \(3, 256, 128\)"):
        ops.grouped_gemm_masked(torch.zeros(3, 8, 128, dtype=BF16, device="cuda"), b,
                                torch.zeros(3, dtype=I32, device="cuda"))
    with pytest.raises(TypeError, match="`counts` has dtype torch.int64"):
        ops.grouped_gemm_masked(a.view(2, 128, 128), b, torch.zeros(2, dtype=torch.int64, device="cuda"))
    monkeypatch.setenv("TKREG_CHECK_INDICES", "1")
    with pytest.raises(ValueError, match="non-decreasing"):
        ops.grouped_gemm(a, b, torch.tensor([0, 200, 128], dtype=I32, device="cuda"))
    with pytest.raises(ValueError, match=r"must lie in \[0, 256\]"):
        ops.grouped_gemm(a, b, torch.tensor([0, 128, 300], dtype=I32, device="cuda"))
    with pytest.raises(ValueError, match=r"`counts` must lie in \[0, Mmax = 128\]"):
        ops.grouped_gemm_masked(a.view(2, 128, 128), b, torch.tensor([0, 129], dtype=I32, device="cuda"))
    ops.grouped_gemm(a, b, torch.tensor([0, 128, 256], dtype=I32, device="cuda"))   # good values pass
