"""The GEMM family on a real GPU, from the installed wheel, against float64 products.

Relative Frobenius error <= 2e-3 against the exact (float64) product: bf16 output rounding alone
is ~1.6e-3, fp16 ~2e-4.  FP8: against the float64 product of the dequantized inputs (the GEMM's
own error), and within DeepGEMM's `calc_diff` <= 1e-3 of the bf16 product (quantization included).
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference
from tkreg.reference import fp8 as ref8

pytestmark = pytest.mark.gpu
BF16, FP16, FP8 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
ops = tkreg.ops


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def picks(chosen: str, tile: str) -> bool:
    """Every `name=value` of `tile` is one of the chosen variant key's parameters."""
    have = set(chosen.split(","))
    return all(p in have for p in tile.split(",") if p)


def calc_diff(x, y):
    """DeepGEMM's similarity measure: 1 - 2<x,y> / (|x|^2 + |y|^2)."""
    x, y = x.double(), y.double()
    return (1 - 2 * (x * y).sum() / (x * x + y * y).sum()).item()


# (M, N) per shape class on the H200 (132 SMs); kernels_src/gemm.py CLASSES
CLASS_SHAPES = [(1, 1000, "block_M=16,"), (17, 4096, "block_M=32,"), (5, 16384, "block_N=256,"),
                (64, 8192, "block_M=64,block_N=64,"), (128, 8192, "block_M=64,block_N=128,"),
                (256, 8192, "block_K=64,block_M=128,block_N=128,mma=ws,"), (256, 7168, "block_N=112,mma=ws,"),
                (1024, 4096, "block_M=128,block_N=256,mma=ws,"), (1024, 7168, "block_N=224,mma=ws,")]


@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m, n, tile", CLASS_SHAPES)
def test_gemm_every_class(m, n, tile, bias, dt, seed):
    k = 5128 if m < 1024 else 1032   # not a multiple of any block_K
    a, b = torch.randn(m, k, dtype=dt, device="cuda"), torch.randn(n, k, dtype=dt, device="cuda")
    c = torch.randn(n, dtype=dt, device="cuda") * 30 if bias else None
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:
        chosen = tkreg.explain("gemm", a, b, c).chosen
        assert picks(chosen, tile + f",bias={str(bias).lower()}"), chosen
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


@pytest.mark.parametrize("layout", ["row", "colmajor"])
@pytest.mark.parametrize("ue8m0", [False, True])
@pytest.mark.parametrize("m, n, k, tile", [
    (1, 1000, 8192, "block_tok=16,mma=ws,smem_scales=true,splits=3"), (3, 520, 128 * 200, "block_tok=16,mma=ws,splits=3"),
    (16, 5120, 1024, "block_tok=16,mma=ws,splits=1"), (16, 4096, 2048, "block_tok=16,mma=ws,splits=1"),
    (8, 20480, 512, "mma=ws,smem_scales=true,splits=1,swap_ab=true"),
    (16, 8192, 1152, "mma=ws,smem_scales=true,splits=1,swap_ab=true"),
    (5, 7168, 1920, "mma=ws,smem_scales=true,splits=1,swap_ab=true"),
    (37, 4096, 8320, "block_tok=32,mma=ws,splits=2"), (64, 1000, 8576, "block_tok=32,mma=ws,splits=2"),
    (37, 4096, 7168, "block_tok=32,mma=ws,splits=1"),
    (17, 8200, 1024, "block_tok=32,mma=ws,splits=1"), (32, 28672, 640, "block_tok=32,mma=ws,splits=1"),
    (33, 8192, 1152, "block_tok=64,mma=ws"), (64, 5120, 1920, "block_tok=64,mma=ws"),
    (64, 28672, 512, "block_M=64,block_N=128,"),
    (48, 1000, 512, "block_tok=32,mma=ws,splits=1"),
    (200, 1000, 512, "block_M=64,block_N=64,"), (128, 8192, 1024, "block_M=64,block_N=128,"),
    (4097, 1024, 1024, "block_M=128,mma=ws"), (1000, 8192, 1920, "block_M=128,mma=ws"),
    (4096, 8192, 640, "block_M=128,mma=ws")])
def test_fp8_gemm_matches_dequantized_product(m, n, k, tile, layout, ue8m0, seed):
    x, w, qa, sa, qb, sb = quantized(m, n, k, layout, ue8m0)
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:
        chosen = tkreg.explain("fp8_gemm", qa, sa, qb, sb).chosen
        assert picks(chosen, tile), chosen
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
