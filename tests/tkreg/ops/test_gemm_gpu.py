"""Dense GEMMs (gemm, fp8_gemm) on a real GPU, from the installed wheel, against float64 products.

Relative Frobenius error <= 2e-3 against the exact (float64) product: bf16 output rounding alone
is ~1.6e-3, fp16 ~2e-4.  FP8: against the float64 product of the dequantized inputs (the GEMM's
own error), and within DeepGEMM's `calc_diff` <= 1e-3 of the bf16 product (quantization included).
The shape lists reach every shape class the wheel ships for sm_90a on a 132-SM GPU (H100 / H200);
a test of each list checks that on the CPU through `tkreg.explain(..., sm_count=132)`.
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference
from tkreg.reference import quant as ref8
from tkreg.spec import Variant

pytestmark = pytest.mark.gpu
BF16, FP16, FP8 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
ops = tkreg.ops


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def shape_class(key: str) -> str:
    return Variant.parse_key(key)["shape_class"]


def calc_diff(x, y):
    """DeepGEMM's similarity measure: 1 - 2<x,y> / (|x|^2 + |y|^2)."""
    x, y = x.double(), y.double()
    return (1 - 2 * (x * y).sum() / (x * x + y * y).sum()).item()


@pytest.mark.parametrize("m", [1, 37, 64, 65, 300, 4097])
@pytest.mark.parametrize("n, k", [(256, 512), (1000, 264), (4096, 4096)])
def test_gemm_matches_reference(m, n, k, seed):
    a = torch.randn(m, k, dtype=BF16, device="cuda")
    b = torch.randn(n, k, dtype=BF16, device="cuda")
    out = torch.full((m, n), float("nan"), dtype=BF16, device="cuda")
    y = ops.gemm(a, b, out=out)
    assert not torch.isnan(y).any(), f"m={m} n={n} k={k}: unwritten outputs"
    assert rel_err(y, a.double() @ b.double().t()) < 1e-2, f"m={m} n={n} k={k}"


# (M, N): one shape per sm_90a shape class at 132 SMs, K not a multiple of any block_K
CLASS_SHAPES = [(1, 1000), (17, 4096), (5, 16384), (64, 8192), (128, 8192), (256, 8192), (256, 7168),
                (1024, 4096), (1024, 7168)]


def class_k(m: int) -> int:
    return 5128 if m < 1024 else 1032


def test_class_shapes_reach_every_shipped_class(shipped_values):
    reached = {shape_class(tkreg.explain("gemm", torch.empty(m, class_k(m), dtype=BF16),
                                         torch.empty(n, class_k(m), dtype=BF16), arch="sm_90a", sm_count=132).chosen)
               for m, n in CLASS_SHAPES}
    assert reached == shipped_values("tkreg.gemm", "sm_90a", "shape_class")


@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m, n", CLASS_SHAPES)
def test_gemm_every_class(m, n, bias, dt, seed):
    k = class_k(m)
    a, b = torch.randn(m, k, dtype=dt, device="cuda"), torch.randn(n, k, dtype=dt, device="cuda")
    c = torch.randn(n, dtype=dt, device="cuda") * 30 if bias else None
    out = torch.full((m, n), float("nan"), dtype=dt, device="cuda")
    y = ops.gemm(a, b, c, out=out)
    want = a.double() @ b.double().t() + (c.double() if bias else 0)
    assert y is out and not torch.isnan(y).any()
    assert rel_err(y, want) <= 2e-3, (m, n, k, bias, dt)


@pytest.mark.parametrize("m", [0, 1, 37, 63, 65, 4097])
@pytest.mark.parametrize("n, k", [(1000, 5128), (24, 8), (20488, 264), (4104, 8)])
def test_gemm_odd_sizes(m, n, k, seed):
    a, b = torch.randn(m, k, dtype=BF16, device="cuda"), torch.randn(n, k, dtype=BF16, device="cuda")
    y = ops.gemm(a, b)
    assert y.shape == (m, n)
    if m:
        assert rel_err(y, a.double() @ b.double().t()) <= 2e-3, (m, n, k)


def test_gemm_compile_and_graph(seed):
    a = torch.randn(37, 1024, dtype=BF16, device="cuda")
    b, c = torch.randn(3000, 1024, dtype=BF16, device="cuda"), torch.randn(3000, dtype=BF16, device="cuda")
    f = torch.compile(lambda a, b, c: torch.relu(ops.gemm(a, b, c)), fullgraph=True)
    assert rel_err(f(a, b, c), torch.relu(reference.gemm(a, b, c).double())) <= 2e-3
    ops.gemm(a, b, c)   # load the module outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = ops.gemm(a, b, c)
    for _ in range(2):
        a.copy_(torch.randn_like(a))
        g.replay()
        torch.cuda.synchronize()
        assert rel_err(y, a.double() @ b.double().t() + c.double()) <= 2e-3


# ---- FP8 block-scaled ----------------------------------------------------------------------------

def quantized(m, n, k, layout, ue8m0):
    """Inputs quantized by tkreg's own ops: activations per 1x128 group, weights per 128x128 block."""
    x = torch.randn(m, k, dtype=BF16, device="cuda")
    w = torch.randn(n, k, dtype=BF16, device="cuda") * 0.05
    qa, sa = ops.per_token_group_quant_fp8(x, ue8m0=ue8m0, column_major_scales=layout == "colmajor")
    qb, sb = ops.per_block_quant_fp8(w, ue8m0=ue8m0)
    return x, w, qa, sa, qb, sb


def dequantized_product(qa, sa, qb, sb):
    """float64 product of the dequantized inputs (the dequantized values are exact in fp32 to 1 ulp)."""
    return ref8.dequant_groups(qa, sa).double() @ ref8.dequant_blocks(qb, sb).double().t()


# (M, N, K): every sm_90a fp8_gemm shape class at 132 SMs, split-K and not, K ragged or whole blocks
FP8_SHAPES = [(1, 1000, 8192), (3, 520, 128 * 200), (16, 5120, 1024), (16, 4096, 2048), (8, 20480, 512),
              (16, 8192, 1152), (5, 7168, 1920), (37, 4096, 8320), (64, 1000, 8576), (37, 4096, 7168),
              (17, 8200, 1024), (32, 28672, 640), (33, 8192, 1152), (64, 5120, 1920), (64, 28672, 512),
              (48, 1000, 512), (200, 1000, 512), (128, 8192, 1024), (4097, 1024, 1024), (1000, 8192, 1920),
              (4096, 8192, 640)]


def fp8_operands(m, n, k):
    """CPU stand-ins for explain: a[M, K], a_scale[M, K/128], b[N, K], b_scale[N/128, K/128]."""
    kb = (k + 127) // 128
    return (torch.empty(m, k, dtype=FP8), torch.empty(m, kb), torch.empty(n, k, dtype=FP8),
            torch.empty((n + 127) // 128, kb))


def test_fp8_shapes_reach_every_shipped_class(shipped_values):
    reached = {shape_class(tkreg.explain("fp8_gemm", *fp8_operands(m, n, k), arch="sm_90a", sm_count=132).chosen)
               for m, n, k in FP8_SHAPES}
    assert reached == shipped_values("tkreg.fp8_gemm", "sm_90a", "shape_class")


@pytest.mark.parametrize("layout", ["row", "colmajor"])
@pytest.mark.parametrize("ue8m0", [False, True])
@pytest.mark.parametrize("m, n, k", FP8_SHAPES)
def test_fp8_gemm_matches_dequantized_product(m, n, k, layout, ue8m0, seed):
    x, w, qa, sa, qb, sb = quantized(m, n, k, layout, ue8m0)
    if layout == "colmajor":
        assert sa.stride(0) == 1    # DeepGEMM's layout, read in place
    y = ops.fp8_gemm(qa, sa, qb, sb)
    assert y.dtype == BF16 and y.shape == (m, n)
    assert rel_err(y, dequantized_product(qa, sa, qb, sb)) <= 2e-3, (m, n, k)
    assert calc_diff(y, x.double() @ w.double().t()) <= 1e-3, (m, n, k)


def test_fp8_gemm_empty_and_compile(seed):
    qb, sb = ops.per_block_quant_fp8(torch.randn(256, 512, dtype=BF16, device="cuda"))
    qa, sa = ops.per_token_group_quant_fp8(torch.empty(0, 512, dtype=BF16, device="cuda"))
    assert ops.fp8_gemm(qa, sa, qb, sb).shape == (0, 256)
    x = torch.randn(33, 512, dtype=BF16, device="cuda")
    qa, sa = ops.per_token_group_quant_fp8(x)
    f = torch.compile(lambda *t: ops.fp8_gemm(*t) * 2, fullgraph=True)
    assert rel_err(f(qa, sa, qb, sb), 2 * dequantized_product(qa, sa, qb, sb)) <= 2e-3


def test_fp8_gemm_bad_scales_are_clear_errors():
    qa = torch.zeros(4, 256, dtype=FP8, device="cuda")
    qb, sb = torch.zeros(128, 256, dtype=FP8, device="cuda"), torch.ones(1, 2, device="cuda")
    with pytest.raises(ValueError, match="`a_scale` has shape"):
        ops.fp8_gemm(qa, torch.ones(4, 3, device="cuda"), qb, sb)
    with pytest.raises(TypeError, match="`a_scale` has dtype"):
        ops.fp8_gemm(qa, torch.ones(4, 2, device="cuda", dtype=BF16), qb, sb)
