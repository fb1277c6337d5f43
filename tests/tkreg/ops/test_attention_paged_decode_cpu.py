"""paged_decode_attention without a GPU: its variant set, explain's reasons, validation, the split
count, the reference's semantics, and the kernels' split + combine arithmetic modelled in torch."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import tkreg
from tkreg import expr, reference
from tkreg.ops import attention as typed
from tkreg.spec import Variant

BF16, FP16, I32 = torch.bfloat16, torch.float16, torch.int32
OP = "paged_decode_attention"


def make(b=3, hq=32, hk=8, d=128, ps=16, mp=8, dt=BF16, lens=None, extra_pages=3, seed=0):
    """Random caches with `b * mp + extra_pages` pages, each sequence's pages a random draw."""
    g = torch.Generator().manual_seed(seed)
    np_ = b * mp + extra_pages
    k = torch.randn(np_, ps, hk, d, generator=g).to(dt)
    v = torch.randn(np_, ps, hk, d, generator=g).to(dt)
    bt = torch.randperm(np_, generator=g)[: b * mp].to(I32).view(b, mp)
    lens = torch.tensor(lens if lens is not None else [mp * ps] * b, dtype=I32)
    q = torch.randn(b, hq, d, generator=g).to(dt)
    return q, k, v, bt, lens


# ---- variants, explain's reasons and validation ----------------------------------------------
@pytest.mark.parametrize("make_args, why", [
    (lambda: make(hq=30, hk=8), "HQ % HK == 0"),
    (lambda: make(hq=34, hk=2), "HQ <= 16 * HK"),          # a GQA group of 17 heads
    (lambda: make(d=96), "D == 128"),
    (lambda: make(ps=32), "PS == 64"),
])
def test_no_variant_says_why(make_args, why):
    e = tkreg.explain(OP, *make_args(), arch="sm_90a", sm_count=132)
    assert e.chosen is None and why in str(e), str(e)


def _bad(**kw):
    q, k, v, bt, lens = make()
    args = dict(q=q, k_cache=k, v_cache=v, block_table=bt, seq_lens=lens)
    args.update({n: f(args) for n, f in kw.items()})
    return args


@pytest.mark.parametrize("args, err, msg", [
    (_bad(k_cache=lambda a: a["k_cache"].half()), TypeError, "`k_cache` has dtype torch.float16; expected torch.bfloat16"),
    (_bad(q=lambda a: a["q"].float()), TypeError, "`q` has dtype torch.float32"),
    (_bad(block_table=lambda a: a["block_table"].long()), TypeError, "`block_table` has dtype torch.int64; expected torch.int32"),
    (_bad(seq_lens=lambda a: a["seq_lens"].long()), TypeError, "`seq_lens` has dtype torch.int64"),
    (_bad(v_cache=lambda a: a["v_cache"][:, :, :4]), ValueError, r"`v_cache` has shape \(27, 16, 4, 128\); expected \(27, 16, 8, 128\)"),
    (_bad(q=lambda a: a["q"][:, :, :64]), ValueError, "`q`"),
    (_bad(seq_lens=lambda a: a["seq_lens"][:2]), ValueError, r"`seq_lens` has shape \(2,\); expected \(3,\)"),
    (_bad(k_cache=lambda a: a["k_cache"].transpose(1, 2).contiguous().transpose(1, 2)), ValueError, "`k_cache`"),
    (_bad(), ValueError, "on the CPU.*TKREG_FALLBACK=reference"),
], ids=["k-dtype", "q-dtype", "table-int64", "lens-int64", "v-heads", "q-dim", "lens-batch", "k-layout", "cpu"])
def test_bad_input_is_refused_before_launch(args, err, msg, monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    with pytest.raises(err, match=msg):
        tkreg.ops.paged_decode_attention(**args)


def test_strided_views_are_accepted():
    """q rows from a fused qkv buffer and K/V halves of a [NP, 2, PS, HK, D] cache need no copy:
    they take the variant contiguous copies take."""
    q, k, v, bt, lens = make(2, 8, 2, 64, 16, mp=4)
    qkv = torch.randn(2, 12, 64).to(BF16)
    kv = torch.stack((k, v), dim=1)                                    # [NP, 2, PS, HK, D]
    e = tkreg.explain(OP, qkv[:, :8], kv[:, 0], kv[:, 1], bt, lens, arch="sm_90a", sm_count=132)
    want = tkreg.explain(OP, qkv[:, :8].contiguous(), k, v, bt, lens, arch="sm_90a", sm_count=132).chosen
    assert want is not None and e.chosen == want, str(e)


def test_one_variant_per_head_dim_page_size_and_dtype(shipped):
    """The split count is a run-time rule, not a variant: each arch holds one variant per (D, page
    size, dtype), every combination of the values its keys take."""
    for arch, keys in shipped[f"tkreg.{OP}"]["variants"].items():
        triples = [tuple(Variant.parse_key(k)[p] for p in ("D", "page_size", "dtype")) for k in keys]
        assert len(set(triples)) == len(triples), (arch, keys)
        assert len(triples) == math.prod(len({t[i] for t in triples}) for i in range(3)), (arch, keys)


# ---- the split count: shapes only, never seq_lens -------------------------------------------
def splits(b, hk, mp, ps, sm=132, num_splits=0, waves=2, block_n=64):
    cap = max(min(math.ceil(mp * ps / block_n), 128), 1)
    auto = max(waves * sm // max(b * hk, 1), 1)
    return min(num_splits if num_splits > 0 else auto, cap)


@pytest.mark.parametrize("b, hk, mp, ps, ns, waves", [
    (1, 8, 512, 64, 0, 2), (1, 8, 2048, 16, 0, 2), (64, 8, 512, 64, 0, 2), (4, 8, 256, 64, 0, 3),
    (1, 1, 8192, 16, 0, 2), (1, 8, 4, 16, 0, 2), (2, 8, 100, 64, 7, 2), (2, 8, 100, 64, 1000, 2), (0, 8, 9, 16, 0, 2),
    (3, 2, 0, 64, 0, 2),
])
def test_split_count_rule(b, hk, mp, ps, ns, waves):
    SPLITS = pytest.importorskip("kernels_src.attention.paged_decode").SPLITS   # build-time source
    env = {"B": b, "HK": hk, "MP": mp, "SM_COUNT": 132, "num_splits": ns, "waves": waves, "page_size": ps}
    assert expr.evaluate(expr.parse(SPLITS), env) == splits(b, hk, mp, ps, 132, ns, waves)


def test_batch_one_long_context_fills_the_gpu_in_one_wave():
    assert splits(1, 8, 32768 // 64, 64) * 8 == 264          # two CTAs per SM of an H200
    assert splits(64, 8, 4096 // 16, 16) == 1                # 512 CTAs already: no combine pass
    assert splits(16, 8, 512, 64) == 2                       # 256 CTAs, not 384 (a 45% second wave)
    assert splits(5, 8, 512, 64) * 40 == 240
    assert splits(1, 8, 512, 64, waves=3) * 8 == 392 and splits(2, 8, 4, 16) == 1   # 4 pages of 16: one iteration


def test_grids_depend_on_shapes_only():
    """CUDA-graph safety: every launch dimension reads sizes, SM_COUNT and num_splits only."""
    SPLITS = pytest.importorskip("kernels_src.attention.paged_decode").SPLITS   # build-time source
    from tkreg.runtime import RUNTIME
    allowed = {"B", "HQ", "HK", "MP", "NP", "SM_COUNT", "num_splits"}
    e = RUNTIME.registry.entry("tkreg.paged_decode_attention")
    for arch in e.archs():
        for c in e.candidates(arch):
            for k in c.record.plan.kernels:
                assert set().union(*(expr.symbols(g) for g in k.grid)) <= allowed, (arch, c.key, k.name)
    assert expr.symbols(expr.parse(SPLITS)) <= allowed | {"waves", "page_size"}


# ---- reference semantics -----------------------------------------------------------------
def dense_sdpa(q, k, v, bt, lens, scale=None):
    """Independent oracle: per sequence, gather by a Python loop over tokens, SDPA in float64."""
    b, hq, d = q.shape
    ps, hk = k.shape[1], k.shape[2]
    out = torch.zeros(b, hq, d, dtype=torch.float64)
    for i in range(b):
        n = int(lens[i])
        if n == 0:
            continue
        kk = torch.stack([k[bt[i, t // ps], t % ps] for t in range(n)]).double()     # [L, HK, D]
        vv = torch.stack([v[bt[i, t // ps], t % ps] for t in range(n)]).double()
        qq = q[i].double().view(hk, hq // hk, 1, d)
        o = F.scaled_dot_product_attention(qq, kk.transpose(0, 1)[:, None], vv.transpose(0, 1)[:, None], scale=scale)
        out[i] = o.reshape(hq, d)
    return out


@pytest.mark.parametrize("hq, hk", [(8, 8), (32, 8), (16, 1), (12, 3)])
@pytest.mark.parametrize("ps", [16, 64])
def test_reference_matches_sdpa_over_gathered_pages(hq, hk, ps):
    q, k, v, bt, lens = make(4, hq, hk, 64, ps, mp=3, dt=FP16, lens=[1, 17, 3 * ps - 1, 3 * ps])
    out, lse = reference.paged_decode_attention(q, k, v, bt, lens)
    assert out.dtype == FP16 and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), dense_sdpa(q, k, v, bt, lens), rtol=1e-3, atol=1e-3)


def test_reference_lse_and_scale():
    q, k, v, bt, lens = make(2, 4, 2, 64, 16, mp=2, dt=torch.float32, lens=[5, 32])
    out, lse = reference.paged_decode_attention(q, k, v, bt, lens, softmax_scale=0.3)
    torch.testing.assert_close(out.double(), dense_sdpa(q, k, v, bt, lens, scale=0.3), rtol=1e-5, atol=1e-5)
    kk = k[bt[0, 0], :5, 1].double()                                   # heads 2, 3 read KV head 1
    want = torch.logsumexp(0.3 * q[0, 3].double() @ kk.T, dim=0)
    torch.testing.assert_close(lse[0, 3].double(), want, rtol=1e-6, atol=1e-6)
    default, _ = reference.paged_decode_attention(q, k, v, bt, lens, softmax_scale=0.0)
    torch.testing.assert_close(default.double(), dense_sdpa(q, k, v, bt, lens, scale=64 ** -0.5), rtol=1e-5, atol=1e-5)


def test_empty_sequences_give_zeros_and_minus_inf():
    q, k, v, bt, lens = make(3, 8, 2, 128, 64, mp=2, lens=[0, 7, 0])
    out, lse = reference.paged_decode_attention(q, k, v, bt, lens)
    assert (out[[0, 2]] == 0).all() and torch.isneginf(lse[[0, 2]]).all()
    assert torch.isfinite(out).all() and torch.isfinite(lse[1]).all()


def test_lengths_are_clamped_to_the_block_table():
    q, k, v, bt, lens = make(2, 8, 8, 64, 16, mp=2, lens=[-4, 99])
    out, lse = reference.paged_decode_attention(q, k, v, bt, lens)
    want, want_lse = reference.paged_decode_attention(q, k, v, bt, torch.tensor([0, 32], dtype=I32))
    torch.testing.assert_close((out, lse), (want, want_lse), rtol=0, atol=0)


def test_unused_slots_and_table_entries_are_never_read():
    """NaN past each sequence's end, and junk entries past its last page, change nothing."""
    q, k, v, bt, lens = make(2, 8, 2, 64, 16, mp=4, dt=torch.float32, lens=[20, 33])
    want = reference.paged_decode_attention(q, k, v, bt, lens)
    k2, v2, bt2 = k.clone(), v.clone(), bt.clone()
    for i, n in enumerate(lens.tolist()):
        for t in range(n, 4 * 16):
            if t // 16 < -(-n // 16):
                k2[bt[i, t // 16], t % 16] = float("nan")
                v2[bt[i, t // 16], t % 16] = float("nan")
        bt2[i, -(-n // 16):] = -12345
    torch.testing.assert_close(reference.paged_decode_attention(q, k2, v2, bt2, lens), want, rtol=0, atol=0)


# ---- the kernels' split + combine arithmetic, modelled in torch --------------------------------
def kernel_model(q, k, v, bt, lens, ns, block_n=64, scale=None):
    """What the kernels compute, step by step in fp32: split s of a sequence takes iterations
    [s * per, (s + 1) * per) of `block_n` tokens, per = ceil(ceil(L / block_n) / ns); each split
    keeps an online softmax in the exp2 domain and leaves its normalized output and log2-sum-exp
    (-inf when empty); the combine weights them by exp2(lse_s - max)."""
    b, hq, d = q.shape
    ps, hk = k.shape[1], k.shape[2]
    g = hq // hk
    c = (scale or d ** -0.5) * 1.4426950408889634
    out = torch.zeros(b, hq, d)
    lse = torch.full((b, hq), float("-inf"))
    for i in range(b):
        n = max(min(int(lens[i]), bt.shape[1] * ps), 0)
        iters = -(-n // block_n)
        per = -(-iters // ns)
        parts, lses = [], []
        for s in range(ns):
            n_it = max(min(iters - s * per, per), 0)
            m = torch.full((hq,), float("-inf"))
            lsum, acc = torch.zeros(hq), torch.zeros(hq, d)
            for it in range(s * per, s * per + n_it):
                t = torch.arange(it * block_n, (it + 1) * block_n)
                pages = bt[i, torch.clamp(t // ps, max=max(-(-n // ps) - 1, 0))].long()
                kk, vv = k[pages, t % ps].float(), v[pages, t % ps].float()      # [block_n, HK, D]
                vv[t >= n] = 0
                sc = torch.einsum("hgd,thd->hgt", q[i].float().view(hk, g, d), kk).reshape(hq, -1)
                sc[:, t >= n] = float("-inf")
                m_new = torch.maximum(m, sc.max(dim=1).values)
                alpha = torch.exp2((m - m_new) * c)
                p = torch.exp2((sc - m_new[:, None]) * c)
                lsum = lsum * alpha + p.sum(1)
                acc = acc * alpha[:, None] + torch.einsum("ht,thd->hd", p, vv.repeat_interleave(g, dim=1))
                m = m_new
            parts.append(torch.where(lsum[:, None] > 0, acc / lsum.clamp(min=1e-30)[:, None], 0.0))
            lses.append(torch.where(lsum > 0, torch.log2(lsum.clamp(min=1e-30)) + m * c, float("-inf")))
        P, Ls = torch.stack(parts), torch.stack(lses)                        # [NS, HQ, D], [NS, HQ]
        mx = Ls.max(0).values
        w = torch.where(torch.isfinite(mx), torch.exp2(Ls - mx), 0.0)
        tot = w.sum(0)
        out[i] = torch.where(tot[:, None] > 0, (w[:, :, None] * P).sum(0) / tot.clamp(min=1e-30)[:, None], 0.0)
        lse[i] = torch.where(tot > 0, (torch.log2(tot.clamp(min=1e-30)) + mx) * math.log(2), float("-inf"))
    return out, lse


@pytest.mark.parametrize("ns", [1, 2, 3, 7, 33])
@pytest.mark.parametrize("ps, hq, hk", [(16, 8, 2), (64, 4, 4)])
def test_split_and_combine_equal_one_pass(ns, ps, hq, hk):
    q, k, v, bt, lens = make(4, hq, hk, 64, ps, mp=640 // ps, dt=torch.float32, lens=[0, 1, 129, 640])
    got, got_lse = kernel_model(q, k, v, bt, lens, ns)
    want, want_lse = reference.paged_decode_attention(q, k, v, bt, lens)
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(got_lse, want_lse, rtol=0, atol=1e-5)


# ---- the typed function on the CPU (reference fallback): routing, not math -------------------
def test_typed_call_routes_to_the_reference(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    q, k, v, bt, lens = make(2, 8, 2, 64, 16, mp=3, lens=[5, 40])
    want, want_lse = reference.paged_decode_attention(q, k, v, bt, lens, softmax_scale=0.2)
    out = tkreg.ops.paged_decode_attention(q, k, v, bt, lens, softmax_scale=0.2)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    out2, lse = tkreg.ops.paged_decode_attention(q, k, v, bt, lens, softmax_scale=0.2, return_lse=True, num_splits=3)
    torch.testing.assert_close((out2, lse), (want, want_lse), rtol=0, atol=0)
    buf = torch.empty_like(q)
    assert tkreg.ops.paged_decode_attention(q, k, v, bt, lens, softmax_scale=0.2, out=buf) is buf


def test_torch_compile_traces_without_graph_break(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    q, k, v, bt, lens = make(2, 8, 2, 64, 16, mp=3, lens=[5, 40])
    want = reference.paged_decode_attention(q, k, v, bt, lens)

    def f(q, k, v, bt, lens):
        o, l = tkreg.ops.paged_decode_attention(q, k, v, bt, lens, return_lse=True)
        return o * 1, l + 0
    got = torch.compile(f, fullgraph=True, backend="eager")(q, k, v, bt, lens)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_check_pages_names_the_bad_entry():
    q, k, v, bt, lens = make(2, 8, 2, 64, 16, mp=3, lens=[20, 48])
    typed.check_pages(k, bt, lens)                                     # all good
    junk = bt.clone()
    junk[0, 2] = 10 ** 6                                               # past sequence 0's pages: fine
    typed.check_pages(k, junk, lens)
    junk[1, 1] = k.shape[0]
    with pytest.raises(ValueError, match=r"`block_table`\[1, 1\] = 9 is outside the cache's 9 pages"):
        typed.check_pages(k, junk, lens)
    with pytest.raises(ValueError, match=r"`seq_lens`\[0\] = 49 is outside \[0, 48\]"):
        typed.check_pages(k, bt, torch.tensor([49, 1], dtype=I32))


def test_check_pages_switch_runs_before_the_launcher(monkeypatch):
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    monkeypatch.setenv("TKREG_CHECK_INDICES", "1")
    q, k, v, bt, lens = make(1, 8, 2, 64, 16, mp=2, lens=[30])
    bt[0, 1] = -1
    with pytest.raises(ValueError, match="outside the cache"):
        tkreg.ops.paged_decode_attention(q, k, v, bt, lens)
