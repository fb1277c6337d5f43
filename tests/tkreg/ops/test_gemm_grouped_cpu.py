"""The grouped GEMMs (contiguous and masked, bf16 / fp16 and FP8) without a GPU: registration,
explain's reasons and layouts it accepts, argument validation before launch, the
TKREG_CHECK_INDICES debug checks, and the references' semantics (float64 per expert)."""
from __future__ import annotations

import importlib

import pytest
import torch

import tkreg

# the packages re-export functions named like these modules, so import the modules by path
gg = importlib.import_module("tkreg.ops.gemm")
ref = importlib.import_module("tkreg.reference.gemm")

BF16, FP16, FP8 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
I32 = torch.int32
ops = tkreg.ops
OPS = ("grouped_gemm", "grouped_gemm_masked", "fp8_grouped_gemm", "fp8_grouped_gemm_masked")


def test_family_is_registered_for_both_archs(shipped):
    """Both archs; the sm_100a variants are the tcgen05 kernels, sm_90a's the WGMMA ones."""
    for name in OPS:
        have = shipped[f"tkreg.{name}"]
        assert have["archs"] == ["sm_100a", "sm_90a"], name
        for arch, keys in have["variants"].items():
            assert keys and all(("mma=tcgen05" in k) == (arch == "sm_100a") for k in keys), (name, arch, keys)


def contiguous(m, n, k, e, dt=BF16):
    return torch.empty(m, k, dtype=dt), torch.empty(e, n, k, dtype=dt), torch.zeros(e + 1, dtype=I32)


def masked(e, mmax, n, k, dt=BF16):
    return torch.empty(e, mmax, k, dtype=dt), torch.empty(e, n, k, dtype=dt), torch.zeros(e, dtype=I32)


def fp8_contiguous(m, n, k, e):
    kb, nb = -(-k // 128), -(-n // 128)
    return (torch.empty(m, k, dtype=FP8), torch.empty(m, kb), torch.empty(e, n, k, dtype=FP8),
            torch.empty(e, nb, kb), torch.zeros(e + 1, dtype=I32))


def fp8_masked(e, mmax, n, k):
    kb, nb = -(-k // 128), -(-n // 128)
    return (torch.empty(e, mmax, k, dtype=FP8), torch.empty(e, mmax, kb), torch.empty(e, n, k, dtype=FP8),
            torch.empty(e, nb, kb), torch.zeros(e, dtype=I32))


# ---- what explain says and accepts ------------------------------------------------------------------
def test_expert_count_beyond_the_search_depth_names_the_rule():
    e = tkreg.explain("grouped_gemm", *contiguous(256, 64, 64, 4096), arch="sm_90a", sm_count=132)
    assert e.chosen is None and any("E <= 4095" in why for _, _, why in e.rows), str(e)


def test_colmajor_scales_are_accepted_by_strides():
    """DeepGEMM's column-major layout as the view the colmajor quant ops return, and for the masked
    layout that view reshaped to [E, Mmax, K/128]."""
    a, sa, b, sb, offs = fp8_contiguous(300, 256, 512, 2)
    col = torch.empty(4, 304).t()[:300]
    assert tkreg.explain("fp8_grouped_gemm", a, col, b, sb, offs, arch="sm_90a").chosen
    a, sa, b, sb, counts = fp8_masked(2, 150, 256, 512)
    col = torch.empty(4, 300).t().reshape(2, 150, 4)
    assert col.stride() == (150, 1, 300)
    assert tkreg.explain("fp8_grouped_gemm_masked", a, col, b, sb, counts, arch="sm_90a").chosen


# ---- validation before launch (no GPU needed) -----------------------------------------------------
@pytest.mark.parametrize("make, err, msg", [
    (lambda: ops.grouped_gemm(*contiguous(256, 64, 64, 4)[:2], torch.zeros(4, dtype=I32)), ValueError,
     r"`group_offsets` has shape \(4,\); expected \(5,\)"),
    (lambda: ops.grouped_gemm(*contiguous(256, 64, 64, 4)[:2], torch.zeros(5)), TypeError,
     r"`group_offsets` has dtype torch.float32; expected torch.int32"),
    (lambda: ops.grouped_gemm(torch.empty(256, 64, dtype=BF16), torch.empty(4, 64, 128, dtype=BF16),
                              torch.zeros(5, dtype=I32)), ValueError, r"`b` has shape \(4, 64, 128\); expected \(4, 64, 64\)"),
    (lambda: ops.grouped_gemm(torch.empty(256, 64, dtype=BF16), torch.empty(4, 64, 64, dtype=FP16),
                              torch.zeros(5, dtype=I32)), TypeError, "`b` has dtype torch.float16; expected torch.bfloat16"),
    (lambda: ops.grouped_gemm(torch.empty(256, 64, dtype=BF16), torch.empty(64, 64, dtype=BF16),
                              torch.zeros(5, dtype=I32)), ValueError, "`b` must have 3 dims"),
    (lambda: ops.grouped_gemm_masked(torch.empty(3, 64, 64, dtype=BF16), torch.empty(4, 64, 64, dtype=BF16),
                                     torch.zeros(3, dtype=I32)), ValueError, r"`b` has shape \(4, 64, 64\); expected \(3, 64, 64\)"),
    (lambda: ops.grouped_gemm_masked(*masked(4, 64, 64, 64)[:2], torch.zeros(5, dtype=I32)), ValueError,
     r"`counts` has shape \(5,\); expected \(4,\)"),
    (lambda: ops.grouped_gemm_masked(*masked(4, 64, 64, 64)[:2], torch.zeros(4, dtype=torch.int64)), TypeError,
     "`counts` has dtype torch.int64; expected torch.int32"),
    (lambda: ops.fp8_grouped_gemm(*fp8_contiguous(256, 256, 512, 4)[:3], torch.empty(3, 2, 4),
                                  torch.zeros(5, dtype=I32)), ValueError, r"`b_scale` has shape \(3, 2, 4\); expected \(4, 2, 4\)"),
    (lambda: ops.fp8_grouped_gemm(torch.empty(256, 512, dtype=FP8), torch.empty(256, 3),
                                  *fp8_contiguous(256, 256, 512, 4)[2:]), ValueError, r"`a_scale` has shape \(256, 3\); expected \(256, 4\)"),
    (lambda: ops.fp8_grouped_gemm(*fp8_contiguous(256, 256, 512, 4)[:4], torch.zeros(4, dtype=I32)), ValueError,
     r"`group_offsets` has shape \(4,\); expected \(5,\)"),
    (lambda: ops.fp8_grouped_gemm_masked(*fp8_masked(4, 64, 256, 512)[:3], torch.empty(4, 2, 4, dtype=BF16),
                                         torch.zeros(4, dtype=I32)), TypeError, "`b_scale` has dtype torch.bfloat16; expected torch.float32"),
    (lambda: ops.fp8_grouped_gemm_masked(torch.empty(4, 64, 512, dtype=FP8), torch.empty(5, 64, 4),
                                         *fp8_masked(4, 64, 256, 512)[2:]), ValueError, r"`a_scale` has shape \(5, 64, 4\); expected \(4, 64, 4\)"),
    (lambda: ops.fp8_grouped_gemm_masked(*fp8_masked(4, 64, 256, 512)[:4], torch.zeros(4, dtype=torch.int64)),
     TypeError, "`counts` has dtype torch.int64; expected torch.int32"),
    (lambda: ops.grouped_gemm(*contiguous(256, 64, 64, 4)), ValueError, "TKREG_FALLBACK=reference"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_arguments_are_named(make, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        make()


# ---- TKREG_CHECK_INDICES: the value checks that need a device-to-host copy ------------------------
@pytest.mark.parametrize("offs, msg", [([0, 256, 128, 384], "non-decreasing"),
                                       ([0, 100, 228, 300], "expert 1's segment starts at row 100"),
                                       ([0, 128, 256, 600], r"must lie in \[0, 512\]"),
                                       ([-128, 0, 128, 256], r"must lie in \[0, 512\]")])
def test_debug_switch_checks_offsets(offs, msg, monkeypatch):
    monkeypatch.setenv("TKREG_CHECK_INDICES", "1")
    a, b, _ = contiguous(512, 64, 64, 3)
    with pytest.raises(ValueError, match="tkreg.grouped_gemm: .*" + msg):
        ops.grouped_gemm(a, b, torch.tensor(offs, dtype=I32))
    qa, sa, qb, sb, _ = fp8_contiguous(512, 128, 128, 3)
    with pytest.raises(ValueError, match="tkreg.fp8_grouped_gemm: .*" + msg):
        ops.fp8_grouped_gemm(qa, sa, qb, sb, torch.tensor(offs, dtype=I32))


def test_debug_switch_accepts_padded_segments_and_empty_experts():
    # empty experts (even at an unaligned row at the end), a last segment ending anywhere, a tail
    gg.check_offsets("op", torch.tensor([0, 0, 128, 128, 384, 391, 391], dtype=I32), 400)


@pytest.mark.parametrize("counts", [[0, 65, 3], [-1, 0, 0]])
def test_debug_switch_checks_counts(counts, monkeypatch):
    monkeypatch.setenv("TKREG_CHECK_INDICES", "1")
    a, b, _ = masked(3, 64, 64, 64)
    with pytest.raises(ValueError, match=r"tkreg.grouped_gemm_masked: `counts` must lie in \[0, Mmax = 64\]"):
        ops.grouped_gemm_masked(a, b, torch.tensor(counts, dtype=I32))
    qa, sa, qb, sb, _ = fp8_masked(3, 64, 128, 128)
    with pytest.raises(ValueError, match="tkreg.fp8_grouped_gemm_masked: `counts` must lie"):
        ops.fp8_grouped_gemm_masked(qa, sa, qb, sb, torch.tensor(counts, dtype=I32))


def test_without_the_switch_values_are_not_read(monkeypatch):
    """No device-to-host copy by default: bad values reach the launcher (here: refused as CPU tensors)."""
    monkeypatch.delenv("TKREG_CHECK_INDICES", raising=False)
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    a, b, _ = contiguous(512, 64, 64, 3)
    with pytest.raises(ValueError, match="TKREG_FALLBACK=reference"):
        ops.grouped_gemm(a, b, torch.tensor([0, 256, 128, 384], dtype=I32))


# ---- references ----------------------------------------------------------------------------------
def offsets(sizes):
    """Segments padded to 128 rows, the last non-empty one exact (an unaligned total)."""
    last = max((i for i, s in enumerate(sizes) if s), default=-1)
    out = [0]
    for i, s in enumerate(sizes):
        out.append(out[-1] + (s if i >= last else -(-s // 128) * 128))
    return torch.tensor(out, dtype=I32)


def per_expert64(a, b, offs):
    out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64)
    o = offs.tolist()
    for e in range(b.shape[0]):
        out[o[e]:o[e + 1]] = a[o[e]:o[e + 1]].double() @ b[e].double().t()
    return out


@pytest.mark.parametrize("dt", [BF16, FP16])
def test_contiguous_reference_per_expert(dt, seed):
    sizes = [200, 0, 1, 128, 0, 37, 0]
    offs = offsets(sizes)
    m = int(offs[-1]) + 50                                   # a tail no segment covers
    a, b = torch.randn(m, 96, dtype=dt), torch.randn(len(sizes), 40, 96, dtype=dt)
    got = ref.grouped_gemm(a, b, offs)
    want = per_expert64(a, b, offs)
    assert got.dtype == dt and got.shape == (m, 40)
    torch.testing.assert_close(got.double(), want, rtol=8e-3, atol=8e-3 * want.abs().max().item())
    assert not got[int(offs[-1]):].any()                     # rows past offsets[E]: zeros here


def test_masked_reference_clamps_counts(seed):
    a, b = torch.randn(3, 70, 64, dtype=BF16), torch.randn(3, 24, 64, dtype=BF16)
    got = ref.grouped_gemm_masked(a, b, torch.tensor([0, 5, 99], dtype=I32))
    assert not got[0].any() and not got[1, 5:].any()
    torch.testing.assert_close(got[1, :5], ref.gemm(a[1, :5], b[1]))
    torch.testing.assert_close(got[2], ref.gemm(a[2], b[2]))   # counts above Mmax: all Mmax rows


def _quantized(rows, n, k, e):
    from tkreg.reference import quant
    x = torch.randn(rows, k, dtype=BF16)
    qa, sa = quant.per_token_group_quant_fp8(x)
    qs = [quant.per_block_quant_fp8(torch.randn(n, k, dtype=BF16) * 0.05) for _ in range(e)]
    return qa, sa, torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])


def test_fp8_references_are_the_dense_reference_per_expert(seed):
    qa, sa, qb, sb = _quantized(300, 200, 384, 3)
    offs = offsets([128, 0, 44])
    got = ref.fp8_grouped_gemm(qa, sa, qb, sb, offs)
    assert got.dtype == BF16 and not got[172:].any()
    torch.testing.assert_close(got[:128], ref.fp8_gemm(qa[:128], sa[:128], qb[0], sb[0]), rtol=0, atol=0)
    torch.testing.assert_close(got[128:172], ref.fp8_gemm(qa[128:172], sa[128:172], qb[2], sb[2]), rtol=0, atol=0)
    a3, s3 = qa[:300].view(3, 100, 384), sa.view(3, 100, 3)
    gotm = ref.fp8_grouped_gemm_masked(a3, s3, qb, sb, torch.tensor([100, 0, 7], dtype=I32))
    torch.testing.assert_close(gotm[0], ref.fp8_gemm(a3[0], s3[0], qb[0], sb[0]), rtol=0, atol=0)
    torch.testing.assert_close(gotm[2, :7], ref.fp8_gemm(a3[2, :7], s3[2, :7], qb[2], sb[2]), rtol=0, atol=0)
    assert not gotm[1].any() and not gotm[2, 7:].any()


def test_calls_route_to_the_reference_on_the_cpu(monkeypatch, seed):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    offs = offsets([130, 5])
    a, b = torch.randn(300, 64, dtype=BF16), torch.randn(2, 32, 64, dtype=BF16)
    torch.testing.assert_close(ops.grouped_gemm(a, b, offs), ref.grouped_gemm(a, b, offs), rtol=0, atol=0)
    a3, counts = torch.randn(2, 10, 64, dtype=BF16), torch.tensor([3, 10], dtype=I32)
    torch.testing.assert_close(tkreg.call("tkreg.grouped_gemm_masked", a3, b, counts),
                               ref.grouped_gemm_masked(a3, b, counts), rtol=0, atol=0)
