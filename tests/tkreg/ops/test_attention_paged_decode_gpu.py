"""paged_decode_attention on a real GPU, from the installed wheel, against the fp32 torch reference.

Tolerance: the output is rounded once to bf16/fp16, which alone moves it by up to half an ulp
(2^-9 relative for bf16), so the bar is 2e-3 relative *beyond* that rounding norm-wise:
||out - ref|| <= ||round(ref) - ref|| + 2e-3 ||ref||.  Element-wise the kernel rounds each softmax
weight p to the cache dtype before its P V product, which moves out[i] by up to 2^-9 sum_j p_j |v_j|
(bf16; 2^-12 fp16), so |out - ref| <= ulp(ref) + 2 * that bound (`mag`: the reference over |v|):
an output that averages values of both signs to near zero may lose more than 2e-3 of max|ref|.
lse (fp32) within 1e-3 absolute.  Unused slots of the
last page are NaN and table entries past a sequence's pages are junk in every test: neither may
reach the output.
"""
from __future__ import annotations

import pytest
import torch

import tkreg
from tkreg import reference
from tkreg.errors import NoKernelError

pytestmark = pytest.mark.gpu
DEV = "cuda"
BF16, FP16, I32 = torch.bfloat16, torch.float16, torch.int32
JUNK_PAGE = -7


def make(lens, hq=32, hk=8, d=128, ps=16, mp=None, dt=BF16, spare=5, layout="plain"):
    """Caches with every slot NaN, then each sequence's tokens written into randomly drawn pages;
    block_table entries past a sequence's last page are junk.  layout "kv": K and V are the
    halves of one [NP, 2, PS, HK, D] tensor; "q": q is a slice of a fused qkv buffer."""
    b = len(lens)
    mp = mp or max(1, max(-(-n // ps) for n in lens))
    np_ = b * mp + spare
    if layout == "kv":
        kv = torch.full((np_, 2, ps, hk, d), float("nan"), dtype=dt, device=DEV)
        k, v = kv[:, 0], kv[:, 1]
    else:
        k = torch.full((np_, ps, hk, d), float("nan"), dtype=dt, device=DEV)
        v = torch.full_like(k, float("nan"))
    bt = torch.randperm(np_, device=DEV)[: b * mp].to(I32).view(b, mp)
    seq = torch.cat([torch.full((n,), i) for i, n in enumerate(lens)] + [torch.zeros(0, dtype=torch.long)]).to(DEV)
    tok = torch.cat([torch.arange(n) for n in lens] + [torch.zeros(0, dtype=torch.long)]).to(DEV)
    pages, slots = bt[seq, tok // ps].long(), tok % ps
    k[pages, slots] = torch.randn(len(tok), hk, d, device=DEV).to(dt)
    v[pages, slots] = torch.randn(len(tok), hk, d, device=DEV).to(dt)
    for i, n in enumerate(lens):
        bt[i, -(-n // ps):] = JUNK_PAGE
    if layout == "q":
        q = torch.randn(b, hq + 2 * hk, d, device=DEV).to(dt)[:, :hq]
    else:
        q = torch.randn(b, hq, d, device=DEV).to(dt)
    return q, k, v, bt, torch.tensor(lens, dtype=I32, device=DEV)


def ref_of(q, k, v, bt, lens, scale=0.0):
    """(out, lse, mag): the fp32 reference before its final rounding (an fp32 q keeps the output
    fp32), and the same attention over |v| (sum_j p_j |v_j|, the element bound's scale); it gathers
    only each sequence's tokens, so NaN slots and junk entries never reach it."""
    out, lse = reference.paged_decode_attention(q.float(), k, v, bt, lens, scale)
    return out, lse, reference.paged_decode_attention(q.float(), k, v.abs(), bt, lens, scale)[0]


def check(got, got_lse, want, want_lse, mag, dt, what):
    """Per sequence: norm-wise and element-wise as in the module docstring; lse within 1e-3."""
    assert torch.isfinite(got).all(), f"{what}: non-finite output"
    for b in range(got.shape[0]):
        g, w = got[b].float(), want[b]
        err, rounding = (g - w).norm(), (w.to(dt).float() - w).norm()
        assert err <= rounding + 2e-3 * w.norm() + 1e-6, \
            f"{what} seq {b}: |err| {err:.3e} vs rounding {rounding:.3e}, |ref| {w.norm():.3e}"
        ulp = w.abs() * (2 ** -8 if dt == BF16 else 2 ** -11)
        bad = (g - w).abs() > ulp + 2 * mag[b] * (2 ** -9 if dt == BF16 else 2 ** -12) + 1e-6
        assert not bad.any(), f"{what} seq {b}: {int(bad.sum())} elements off, worst {(g - w).abs().max():.3e}"
    fin = torch.isfinite(want_lse)
    assert torch.equal(fin, torch.isfinite(got_lse)) and (got_lse[~fin] == float("-inf")).all(), f"{what}: lse -inf pattern"
    torch.testing.assert_close(got_lse[fin], want_lse[fin], rtol=0, atol=1e-3, msg=lambda m: f"{what} lse: {m}")


LENS = [1, 17, 4095, 0, 64, 4096 + 64]


@pytest.mark.parametrize("dt", [BF16, FP16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("ps", [16, 64])
@pytest.mark.parametrize("hq, hk", [(32, 8), (8, 8), (16, 1), (64, 4)])
def test_matches_fp32_reference(dt, d, ps, hq, hk, seed):
    q, k, v, bt, lens = make(LENS, hq, hk, d, ps, dt=dt)
    want, want_lse, mag = ref_of(q, k, v, bt, lens)
    out, lse = tkreg.ops.paged_decode_attention(q, k, v, bt, lens, return_lse=True)
    check(out, lse, want, want_lse, mag, dt, f"{dt} D={d} PS={ps} HQ={hq} HK={hk}")
    assert (out[3] == 0).all() and torch.isneginf(lse[3]).all()


@pytest.mark.parametrize("num_splits", [1, 2, 5, 33, 128, 1000])
@pytest.mark.parametrize("ps", [16, 64])
def test_any_split_count_gives_the_same_answer(num_splits, ps, seed):
    q, k, v, bt, lens = make([4095, 1, 0, 300], 32, 8, 128, ps)
    want, want_lse, mag = ref_of(q, k, v, bt, lens)
    out, lse = tkreg.ops.paged_decode_attention(q, k, v, bt, lens, num_splits=num_splits, return_lse=True)
    check(out, lse, want, want_lse, mag, BF16, f"num_splits={num_splits} PS={ps}")


@pytest.mark.parametrize("b, ctx, ps", [(1, 32768, 64), (1, 32768, 16), (2, 20000, 16), (64, 1000, 64)])
def test_long_and_wide_batches(b, ctx, ps, seed):
    lens = [ctx - (ctx // (2 * b)) * i for i in range(b)]          # ctx down to about ctx / 2
    q, k, v, bt, lens_t = make(lens, 32, 8, 128, ps, spare=1)
    want, want_lse, mag = ref_of(q, k, v, bt, lens_t)
    out, lse = tkreg.ops.paged_decode_attention(q, k, v, bt, lens_t, return_lse=True)
    check(out, lse, want, want_lse, mag, BF16, f"B={b} ctx={ctx} PS={ps}")


@pytest.mark.parametrize("layout", ["kv", "q"])
def test_strided_views(layout, seed):
    q, k, v, bt, lens = make([100, 1, 513], 16, 4, 64, 16, layout=layout)
    assert not (q.is_contiguous() and k.is_contiguous())
    want, want_lse, mag = ref_of(q, k, v, bt, lens)
    out, lse = tkreg.ops.paged_decode_attention(q, k, v, bt, lens, return_lse=True)
    check(out, lse, want, want_lse, mag, BF16, layout)


def test_softmax_scale_and_out(seed):
    q, k, v, bt, lens = make([77, 300], 8, 2, 128, 64)
    want, want_lse, mag = ref_of(q, k, v, bt, lens, 0.05)
    buf = torch.empty_like(q)
    out, lse = tkreg.ops.paged_decode_attention(q, k, v, bt, lens, softmax_scale=0.05, out=buf, return_lse=True)
    assert out is buf
    check(out, lse, want, want_lse, mag, BF16, "scale 0.05")


def test_empty_batch_and_all_empty(seed):
    q, k, v, bt, lens = make([0, 0, 0], 32, 8, 128, 16, mp=4)
    for ns in (0, 1, 4):
        out, lse = tkreg.ops.paged_decode_attention(q, k, v, bt, lens, num_splits=ns, return_lse=True)
        assert (out == 0).all() and torch.isneginf(lse).all(), ns
    e = tkreg.ops.paged_decode_attention(q[:0], k, v, bt[:0], lens[:0])
    assert e.shape == (0, 32, 128)


def test_cache_over_2_gib_elements(seed):
    """index64: pages past element 2^31 of a 4.3 GB cache."""
    ps, hk, d = 64, 8, 128
    np_ = 2 ** 31 // (ps * hk * d) + 64
    k = torch.empty(np_, ps, hk, d, dtype=BF16, device=DEV)
    v = torch.empty_like(k)
    pages = torch.arange(np_ - 40, np_, device=DEV, dtype=I32).flip(0).view(2, 20)
    k[pages.long()] = torch.randn(2, 20, ps, hk, d, device=DEV).to(BF16)
    v[pages.long()] = torch.randn(2, 20, ps, hk, d, device=DEV).to(BF16)
    q = torch.randn(2, 32, d, device=DEV).to(BF16)
    lens = torch.tensor([1280, 1000], dtype=I32, device=DEV)
    want, want_lse, mag = ref_of(q, k, v, pages, lens)
    out, lse = tkreg.ops.paged_decode_attention(q, k, v, pages, lens, return_lse=True)
    check(out, lse, want, want_lse, mag, BF16, "4.3 GB cache")
    del k, v
    torch.cuda.empty_cache()


def test_cuda_graph_replay_with_changed_lengths(seed):
    """Captured once; seq_lens and block tables change between replays (shapes do not)."""
    q, k, v, bt, lens = make([4096, 4096, 4096, 4096], 32, 8, 128, 16, spare=64)
    out = torch.empty_like(q)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        tkreg.ops.paged_decode_attention(q, k, v, bt, lens, out=out)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _, lse = tkreg.ops.paged_decode_attention(q, k, v, bt, lens, out=out, return_lse=True)
    for new in ([1, 0, 17, 4095], [4096, 4096, 2000, 1], [0, 0, 0, 0], [33, 1000, 4000, 64]):
        q2, k2, v2, bt2, lens2 = make(new, 32, 8, 128, 16, mp=bt.shape[1], spare=k.shape[0] - 4 * bt.shape[1])
        for dst, src in ((q, q2), (k, k2), (v, v2), (bt, bt2), (lens, lens2)):
            dst.copy_(src)
        want, want_lse, mag = ref_of(q, k, v, bt, lens)
        g.replay()
        torch.cuda.synchronize()
        check(out, lse, want, want_lse, mag, BF16, f"replay {new}")


def test_torch_compile_fullgraph(seed):
    q, k, v, bt, lens = make([300, 1, 4095], 32, 8, 128, 64)

    def f(q, k, v, bt, lens):
        o, l = tkreg.ops.paged_decode_attention(q * 1, k, v, bt, lens, return_lse=True)
        return o.float() * 2, l
    got = torch.compile(f, fullgraph=True)(q, k, v, bt, lens)
    o, l = tkreg.ops.paged_decode_attention(q, k, v, bt, lens, return_lse=True)
    torch.testing.assert_close(got, (o.float() * 2, l), rtol=0, atol=0)


def test_bad_inputs_raise_before_launch(seed):
    q, k, v, bt, lens = make([10, 20], 32, 8, 128, 16)
    with pytest.raises(NoKernelError, match="HQ % HK == 0"):
        tkreg.ops.paged_decode_attention(q[:, :30], k, v, bt, lens)
    with pytest.raises(TypeError, match="`v_cache` has dtype torch.float16"):
        tkreg.ops.paged_decode_attention(q, k, v.half(), bt, lens)
    with pytest.raises(ValueError, match="`v_cache` has shape"):
        tkreg.ops.paged_decode_attention(q, k, v[:, :, :4], bt, lens)
    with pytest.raises(TypeError, match="`block_table` has dtype torch.int64"):
        tkreg.ops.paged_decode_attention(q, k, v, bt.long(), lens)


def test_check_pages_switch(monkeypatch, seed):
    q, k, v, bt, lens = make([10, 40], 32, 8, 128, 16)
    monkeypatch.setenv("TKREG_CHECK_INDICES", "1")
    tkreg.ops.paged_decode_attention(q, k, v, bt, lens)          # junk past the last pages is fine
    bad = bt.clone()
    bad[1, 2] = k.shape[0]
    with pytest.raises(ValueError, match=r"`block_table`\[1, 2\]"):
        tkreg.ops.paged_decode_attention(q, k, v, bad, lens)
    with pytest.raises(ValueError, match=r"`seq_lens`\[0\]"):
        tkreg.ops.paged_decode_attention(q, k, v, bt, torch.tensor([10 ** 6, 1], dtype=I32, device=DEV))


def test_a_bad_page_reads_zeros_not_a_fault(seed):
    """Without the check, an entry past the cache reads zeros (TMA out of bounds): no crash."""
    q, k, v, bt, lens = make([16, 16], 8, 8, 64, 16)
    bt[0, 0] = k.shape[0] + 1000
    out = tkreg.ops.paged_decode_attention(q, k, v, bt, lens)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all() and (out[0] == 0).all()
