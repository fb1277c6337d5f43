"""Rotary embedding beside torch eager and torch.compile (GB/s against the copy ceiling).

In place on q and k.  Bytes per call: q and k read and written once (2 * 2 * T * (HQ + HK) * D
for bf16), positions read (8 * T), and each distinct cache row touched read once (2 * D per
row; positions are 0..T-1, one prefill sequence).  "eager" runs the torch reference
(tkreg.reference.rotary, fp32 math, in place); "torch.compile" compiles that reference.

qk_norm_rope_cache (`qk_norm_rope_cache_rows`): q/k/v as views of one fused qkv output, beside the
same math written plainly (per-head RMSNorm in fp32, rotation, cache rows through index_copy_),
eager and under torch.compile, and a device copy of the same bytes (queued GPU time).
"""
from __future__ import annotations

from .timing import (Row, bandwidth_rows, compiled, gpu_ms, host_us, need_torch, queued_ms, rotations,
                     same_size_rows, try_ms)



MAX_POS = 32768


def _inputs(torch, t, hq, hk, d):
    bf16 = torch.bfloat16
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32, device="cuda") / d))
    f = torch.outer(torch.arange(MAX_POS, dtype=torch.float32, device="cuda"), inv)
    cache = torch.cat((f.cos(), f.sin()), dim=-1).to(bf16)
    pos = torch.arange(t, dtype=torch.int64, device="cuda") % MAX_POS
    return (pos, torch.randn(t, hq * d, dtype=bf16, device="cuda"),
            torch.randn(t, hk * d, dtype=bf16, device="cuda"), cache)


def cases(quick, ceiling, progress):
    torch = need_torch()
    import tkreg
    from tkreg import reference
    rows = []
    comp = compiled(reference.rotary_embedding)
    # (tokens, HQ, HK, D, neox): Llama-3 8B and 70B, GPT-OSS (D=64), a GPT-J-style (interleaved) run.
    shapes = [(16384, 32, 8, 128, True), (16384, 64, 8, 64, True)]
    if not quick:
        shapes += [(16384, 64, 8, 128, True), (16384, 32, 8, 128, False), (4096, 8, 1, 128, True)]
    for t, hq, hk, d, neox in shapes:
        nbytes = 4 * t * (hq + hk) * d + 8 * t + 2 * d * min(t, MAX_POS)
        sets = rotations(lambda: _inputs(torch, t, hq, hk, d), nbytes)
        case = f"T={t} HQ={hq} HK={hk} D={d} {'neox' if neox else 'gptj'} bf16"
        ours = gpu_ms(lambda p, q, k, c: tkreg.ops.rotary_embedding(p, q, k, c, neox), sets)
        peers = {"eager": try_ms(lambda p, q, k, c: reference.rotary_embedding(p, q, k, c, neox), sets, reps=20),
                 "torch.compile": comp and try_ms(lambda p, q, k, c: comp(p, q, k, c, neox), sets)}
        rows += bandwidth_rows("rotary", case, nbytes, ceiling, ours, peers)
        progress()
    for t in ([1, 64] if quick else [1, 16, 64]):
        p, q, k, c = _inputs(torch, t, 32, 8, 128)
        ours = host_us(lambda: tkreg.ops.rotary_embedding(p, q, k, c, True), 5000) / 1e3
        eager = host_us(lambda: reference.rotary_embedding(p, q, k, c, True), 2000) / 1e3
        case = f"T={t} HQ=32 HK=8 D=128 neox bf16 (per call, loop)"
        rows.append(Row("rotary", case, "tkreg", ours, vs={"eager": eager / ours}))
        rows.append(Row("rotary", case, "eager", eager))
        progress()
    return rows + qk_norm_rope_cache_rows(quick, ceiling, progress)


def plain_qk_norm_rope_cache(q, k, v, positions, cos_sin_cache, q_weight, k_weight, k_cache, v_cache, slot_mapping,
                             eps: float = 1e-6):
    """The fused op's math as a user writes it in torch (neox, every slot >= 0): the peer of the
    kernel, eager or compiled."""
    import torch

    def norm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

    c, s = cos_sin_cache[positions].float()[:, None].chunk(2, dim=-1)

    def rope(x):
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)

    q_out, k_out = rope(norm(q, q_weight)), rope(norm(k, k_weight))
    hk, d = k.shape[1:]
    k_cache.view(-1, hk, d).index_copy_(0, slot_mapping, k_out)
    v_cache.view(-1, hk, d).index_copy_(0, slot_mapping, v)
    return q_out, k_out


def qk_norm_rope_cache_rows(quick, ceiling, progress):
    """Prefill chunks of Qwen3-8B (32/8 heads of 128) and a D = 64 model (64/8), qk-norm + rotary +
    paged cache write (PS 16), and the same without norm and cache; % of a same-size copy."""
    torch = need_torch()
    import tkreg
    bf16 = torch.bfloat16
    comp = compiled(plain_qk_norm_rope_cache)
    rows = []
    shapes = [(4096, 32, 8, 128, True), (16384, 32, 8, 128, True)]
    if not quick:
        shapes += [(4096, 64, 8, 64, True), (16384, 32, 8, 128, False), (1024, 32, 8, 128, True)]
    for t, hq, hk, d, full in shapes:
        def make():
            qkv = torch.randn(t, (hq + 2 * hk) * d, dtype=bf16, device="cuda")
            q, k, v = qkv.view(t, hq + 2 * hk, d).split([hq, hk, hk], 1)
            pages = -(-t // 16)
            return (q, k, v, torch.arange(t, dtype=torch.int64, device="cuda"), _inputs(torch, 1, 1, 1, d)[3],
                    torch.rand(d, dtype=bf16, device="cuda"), torch.rand(d, dtype=bf16, device="cuda"),
                    torch.empty(pages, 16, hk, d, dtype=bf16, device="cuda"),
                    torch.empty(pages, 16, hk, d, dtype=bf16, device="cuda"),
                    torch.randperm(pages * 16, device="cuda")[:t])
        # head rows: q, k, v read, q_out, k_out and the two cache rows written (rope only: q and k
        # read, q_out and k_out written); one cos/sin row and position (and slot) a token; weights
        heads = 2 * hq + 5 * hk if full else 2 * (hq + hk)
        nbytes = 2 * t * d * heads + 2 * t * d + 8 * t * (2 if full else 1) + (4 * d if full else 0)
        sets = rotations(make, nbytes)
        case = f"T={t} HQ={hq} HK={hk} D={d} " + ("qk-norm + rope + cache PS=16" if full else "rope only") + " bf16"
        if full:
            ours = lambda q, k, v, p, c, qw, kw, kc, vc, sm: tkreg.ops.qk_norm_rope_cache(
                q, k, v, p, c, q_weight=qw, k_weight=kw, k_cache=kc, v_cache=vc, slot_mapping=sm)
            peers = {"eager": lambda *a: plain_qk_norm_rope_cache(*a),
                     "torch.compile": comp and (lambda *a: comp(*a))}
        else:
            ours = lambda q, k, v, p, c, *_: tkreg.ops.qk_norm_rope_cache(q, k, v, p, c)
            peers = {}
        rows += same_size_rows("qk_norm_rope_cache", case, nbytes, ceiling, ours, sets, peers)
        progress()
    return rows
