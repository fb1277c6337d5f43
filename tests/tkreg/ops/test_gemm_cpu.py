"""Dense GEMMs (gemm, fp8_gemm) without a GPU: the installed variants against kernels_src/gemm's
specs, the references against independent float64 products, and the calls
through the reference fallback (grouped GEMMs: test_gemm_grouped_cpu.py)."""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

BF16, FP16 = torch.bfloat16, torch.float16
OPS = ("gemm", "fp8_gemm", "grouped_gemm", "grouped_gemm_masked", "fp8_grouped_gemm", "fp8_grouped_gemm_masked",
       "gemm_swiglu", "gemm_dgrad", "gemm_wgrad", "gemm_wgrad_accumulate")
OPS += ("grouped_gemm_dgrad", "grouped_gemm_masked_dgrad", "grouped_gemm_wgrad", "grouped_gemm_wgrad_accumulate",
        "grouped_gemm_masked_wgrad")
OPS += ("fp8_gemm_wgrad", "fp8_gemm_wgrad_accumulate")


def test_wheel_ships_the_gemm_specs(ships_the_specs):
    assert set(ships_the_specs("gemm")) == {f"tkreg.{n}" for n in OPS}


@pytest.mark.parametrize("name", ["gemm", "fp8_gemm"])
def test_registered_for_both_archs(name, shipped):
    have = shipped[f"tkreg.{name}"]
    assert have["archs"] == ["sm_100a", "sm_90a"] and all(have["variants"].values()), have["variants"]


def blocks(q, s, rows, cols):
    """fp32(q) * s with s[i // rows, j // cols], element by element (an oracle written out)."""
    out = torch.empty(q.shape, dtype=torch.float64)
    for i in range(q.shape[0]):
        for j in range(q.shape[1]):
            out[i, j] = float(q[i, j].float()) * float(s[i // rows, j // cols])
    return out


def test_fp8_gemm_reference_is_the_product_of_the_dequantized_operands(seed):
    """1 x 128 activation groups and 128 x 128 weight blocks, partial blocks at both edges."""
    a, w = torch.randn(5, 300, dtype=BF16), torch.randn(130, 300, dtype=BF16) * 0.05
    qa, sa = reference.per_token_group_quant_fp8(torch.nn.functional.pad(a, (0, 84)))   # groups of 128: K = 384
    qa = qa[:, :300].contiguous()
    qb, sb = reference.per_block_quant_fp8(w)
    got = reference.fp8_gemm(qa, sa, qb, sb)
    want = blocks(qa, sa, 1, 128) @ blocks(qb, sb, 128, 128).t()
    assert got.dtype == BF16 and got.shape == (5, 130)
    torch.testing.assert_close(got.double(), want, rtol=2 ** -8, atol=1e-4 * want.abs().max().item())


@pytest.mark.parametrize("dt", [BF16, FP16])
def test_gemm_reference_rounds_the_float64_product_once(dt, seed):
    a, b, c = torch.randn(7, 96, dtype=dt), torch.randn(24, 96, dtype=dt), torch.randn(24, dtype=dt)
    want = (a.double() @ b.double().t() + c.double())
    got = reference.gemm(a, b, c)
    assert got.dtype == dt
    torch.testing.assert_close(got.double(), want, rtol=2 ** -7 if dt == BF16 else 2 ** -10, atol=1e-5)


def test_calls_route_to_the_reference_on_the_cpu(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    a, b = torch.randn(7, 256, dtype=BF16), torch.randn(24, 256, dtype=BF16)
    torch.testing.assert_close(tkreg.ops.gemm(a, b), reference.gemm(a, b), rtol=0, atol=0)
    qa, sa = reference.per_token_group_quant_fp8(a)
    qb, sb = reference.per_block_quant_fp8(b)
    torch.testing.assert_close(tkreg.ops.fp8_gemm(qa, sa, qb, sb), reference.fp8_gemm(qa, sa, qb, sb), rtol=0, atol=0)
