"""Flash attention (fixed-length and varlen) on a real GPU, from the installed wheel, against the
fp32 torch reference.

The reference runs on fp32 copies of the inputs and is not rounded.  Bars: relative Frobenius
error <= 2e-3 for fp16 outputs and 1e-3 absolute for lse; bf16 outputs <= 3e-3, because rounding
the output to bf16 alone costs ~1.6e-3 and rounding P to bf16 for the p v matmul (as FlashAttention
and cuDNN do) as much again: measured 2.0-2.4e-3, the same as torch's own flash SDPA on the same
inputs (test_bf16_error_matches_torch_flash_sdpa).  Varlen must equal the fixed-length kernel on
each sequence bit for bit where both run the same tiles (only the addressing differs).
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference

pytestmark = pytest.mark.gpu
BF16, FP16 = torch.bfloat16, torch.float16
ops = tkreg.ops
NEG_INF = float("-inf")


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def qkv(b, sq, sk, hq, hk, d, dt):
    return (torch.randn(b, sq, hq, d, dtype=dt, device="cuda"), torch.randn(b, sk, hk, d, dtype=dt, device="cuda"),
            torch.randn(b, sk, hk, d, dtype=dt, device="cuda"))


def check(out, lse, q, k, v, causal, scale=0.0, what=""):
    ro, rl = reference.flash_attention(q.float(), k.float(), v.float(), causal, scale)
    assert not out.isnan().any() and not lse.isnan().any(), what
    if ro.norm() > 0:
        bar = 3e-3 if out.dtype == BF16 else 2e-3
        assert rel_err(out, ro) <= bar, (what, rel_err(out, ro))
    fin = torch.isfinite(rl)
    assert torch.equal(torch.isfinite(lse), fin), what
    assert (lse[~fin] == NEG_INF).all() and (out.float().abs().amax(-1)[rl.transpose(1, 2) == NEG_INF] == 0).all(), what
    if fin.any():
        assert (lse[fin] - rl[fin]).abs().max().item() <= 1e-3, what


# (B, Sq, Sk, HQ, HK): MHA, GQA, MQA, odd lengths, Sq != Sk both ways (bottom-right causal); the
# last two have more (row block, head, batch) tiles than an H200 has SMs, so each CTA of the
# persistent sm_90a kernel walks several tiles of different lengths (its K/V ring runs on across them)
SHAPES = [(1, 1, 1, 4, 4), (2, 17, 17, 8, 2), (1, 300, 300, 6, 1), (1, 77, 333, 4, 4), (1, 333, 77, 4, 2),
          (1, 4095, 4095, 2, 1), (2, 1000, 1000, 16, 4), (4, 520, 777, 32, 8)]


@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_fp32_reference(shape, causal, d, dt, seed):
    q, k, v = qkv(*shape, d, dt)
    out, lse = ops.flash_attention(q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == dt and lse.shape == (shape[0], shape[3], shape[1])
    check(out, lse, q, k, v, causal, what=(shape, causal, d, dt))


@pytest.mark.parametrize("shape", [(1, 333, 16461, 4, 2), (1, 16411, 16411, 2, 1)])
def test_causal_d64_on_long_keys(shape, seed):
    # the keys where the 192-row d64 tile (three consumers, kernels_src/attention/prefill.py
    # THREE_CONSUMERS) takes over from 128-row ones: a partial last row block, Sq != Sk, rows that see no tile
    q, k, v = qkv(*shape, 64, BF16)
    out, lse = ops.flash_attention(q, k, v, causal=True)
    check(out, lse, q, k, v, True, what=shape)


@pytest.mark.parametrize("causal", [False, True])
def test_bf16_error_matches_torch_flash_sdpa(causal, seed):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = qkv(2, 1024, 1024, 8, 8, 128, BF16)
    ro, _ = reference.flash_attention(q.float(), k.float(), v.float(), causal)
    out, _ = ops.flash_attention(q, k, v, causal=causal)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        peer = torch.nn.functional.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)),
                                                                is_causal=causal).transpose(1, 2)
    assert rel_err(out, ro) <= 1.15 * rel_err(peer, ro), (rel_err(out, ro), rel_err(peer, ro))


def test_softmax_scale_and_empty_rows(seed):
    q, k, v = qkv(1, 200, 50, 4, 2, 128, BF16)
    out, lse = ops.flash_attention(q, k, v, causal=True, softmax_scale=0.3)
    check(out, lse, q, k, v, True, 0.3)
    assert (out[0, :150] == 0).all() and (lse[0, :, :150] == NEG_INF).all()   # rows that see no key
    out, lse = ops.flash_attention(q[:, :0], k, v)
    assert out.shape == (1, 0, 4, 128) and lse.shape == (1, 4, 0)


def test_strided_views_of_a_fused_qkv_need_no_copy(seed):
    b, s, hq, hk, d = 2, 257, 8, 2, 128
    fused = torch.randn(b, s, (hq + 2 * hk) * d, dtype=BF16, device="cuda")
    q = fused[..., :hq * d].view(b, s, hq, d)
    k = fused[..., hq * d:(hq + hk) * d].view(b, s, hk, d)
    v = fused[..., (hq + hk) * d:].view(b, s, hk, d)
    assert not q.is_contiguous()
    for causal in (False, True):
        got = ops.flash_attention(q, k, v, causal=causal)
        want = ops.flash_attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def _packed(lens_q, lens_k, hq, hk, d, dt):
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
    q = torch.randn(int(cu_q[-1]), hq, d, dtype=dt, device="cuda")
    k = torch.randn(int(cu_k[-1]), hk, d, dtype=dt, device="cuda")
    v = torch.randn(int(cu_k[-1]), hk, d, dtype=dt, device="cuda")
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_varlen_equals_each_sequence_alone(causal, d, seed):
    lens = [1, 8192, 17, 0, 300, 4095, 2, 1000, 129, 128, 5, 2048, 64, 3000, 1, 777]   # 16 sequences
    lens_k = [n if i % 3 else n + 37 for i, n in enumerate(lens)]                   # some Sk > Sq
    q, k, v, cu_q, cu_k = _packed(lens, lens_k, 8, 2, d, BF16)
    out, lse = ops.flash_attention_varlen(q, k, v, cu_q, cu_k, max(lens), max(lens_k), causal=causal)
    assert out.shape == q.shape and lse.shape == (8, q.shape[0])
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for i in range(len(lens)):
        if not lens[i]:
            continue
        sl, kl = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        fixed = tkreg.explain("flash_attention", q[None, sl], k[None, kl], v[None, kl], causal=causal).chosen
        if "consumers=3" in fixed:   # the fixed-length op on other tiles than varlen's: no bit equality
            check(out[None, sl], lse[None, :, sl], q[None, sl], k[None, kl], v[None, kl], causal, what=i)
            continue
        one = ops.flash_attention(q[None, sl], k[None, kl], v[None, kl], causal=causal)
        assert torch.equal(out[sl], one[0][0]), i
        assert torch.equal(lse[:, sl], one[1][0]), i
    for i in (0, 2, 4):   # and a few against the fp32 reference
        sl, kl = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        check(out[None, sl], lse[None, :, sl], q[None, sl], k[None, kl], v[None, kl], causal)


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_many_sequences_offset_start(causal, seed):
    """300 sequences (empties and long ones among them: the persistent kernel's batch cursor walks
    all of them, each CTA over several items), packed after 40 rows the offsets never name."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, 300, (300,), generator=g)
    lens[::7] = 0
    lens[5], lens[150] = 2000, 1025
    q, k, v, cu_q, cu_k = _packed([40] + lens.tolist(), [40] + lens.tolist(), 4, 2, 128, BF16)
    cu_q, cu_k = cu_q[1:].clone(), cu_k[1:].clone()          # the first 40 rows belong to no sequence
    out = torch.full_like(q, 7.0)
    lse = torch.full((4, q.shape[0]), 7.0, device="cuda")
    ops.flash_attention_varlen(q, k, v, cu_q, cu_k, int(lens.max()), int(lens.max()), causal=causal, out=out, lse=lse)
    assert (out[:40] == 7).all() and (lse[:, :40] == 7).all()        # rows outside every sequence untouched
    cq = cu_q.tolist()
    for i in range(len(lens)):
        if lens[i]:
            one = ops.flash_attention(q[None, cq[i]:cq[i + 1]], k[None, cq[i]:cq[i + 1]], v[None, cq[i]:cq[i + 1]],
                                      causal=causal)
            assert torch.equal(out[cq[i]:cq[i + 1]], one[0][0]) and torch.equal(lse[:, cq[i]:cq[i + 1]], one[1][0]), i


def test_varlen_no_sequences_launches_nothing():
    q, k, v, cu_q, cu_k = _packed([3], [3], 4, 4, 128, BF16)
    out = torch.full_like(q, 7.0)
    ops.flash_attention_varlen(q, k, v, cu_q[:1], cu_k[:1], 0, 0, out=out)
    assert (out == 7).all()


def test_varlen_empty_sequences_give_no_nan(seed):
    q, k, v, cu_q, cu_k = _packed([5, 3], [0, 4], 4, 4, 128, FP16)
    out, lse = ops.flash_attention_varlen(q, k, v, cu_q, cu_k, 5, 4)
    assert (out[:5] == 0).all() and (lse[:, :5] == NEG_INF).all() and not out.isnan().any()


def test_bad_inputs_are_clear_errors(monkeypatch):
    q, k, v = qkv(1, 16, 16, 5, 3, 128, BF16)
    with pytest.raises(Exception, match="HQ % HK"):
        ops.flash_attention(q, k, v)
    q, k, v = qkv(1, 16, 16, 4, 2, 128, BF16)
    with pytest.raises(Exception, match="v"):
        ops.flash_attention(q, k, v[:, :, :1])                       # k and v head counts differ
    with pytest.raises(Exception, match="D|dim|rule"):
        ops.flash_attention(*qkv(1, 16, 16, 4, 2, 96, BF16))         # no d96 kernel
    q, k, v, cu_q, cu_k = _packed([5, 3], [5, 3], 4, 4, 128, BF16)
    with pytest.raises(TypeError, match="cu_seqlens_q"):
        ops.flash_attention_varlen(q, k, v, cu_q.long(), cu_k, 5, 5)
    monkeypatch.setenv("TKREG_CHECK_INDICES", "1")
    bad = torch.tensor([0, 6, 5], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="cu_seqlens_q must be non-decreasing"):
        ops.flash_attention_varlen(q, k, v, bad, cu_k, 5, 5)
    with pytest.raises(ValueError, match="max_seqlen_q=4"):
        ops.flash_attention_varlen(q, k, v, cu_q, cu_k, 4, 5)
