"""Paged decode attention beside torch SDPA, GB/s over the KV bytes read against the copy ceiling.

Bytes per call: every sequence's keys and values once (2 * B * ctx * HK * D * 2 for bf16; q, the
block table and the output are noise).  Pages are a random permutation of the cache, so no two
neighbouring pages of a sequence are neighbours in memory.  Peers, in the same process:
"sdpa (gathered KV)" is `scaled_dot_product_attention(enable_gqa=True)` over the same keys and
values already gathered into contiguous [B, HK, ctx, D] tensors (the dense decode kernel a
paged one should match), with torch's choice of backend and with cuDNN's; "gather + sdpa" adds the gather a user without a paged kernel pays.
Every time is `queued_ms` (calls queued behind a spin kernel), so host launch cost never counts.
"""
from __future__ import annotations

from .timing import bandwidth_rows, need_torch, queued_ms, rotations, try_ms

# (batch, context, page size): the bar (>= 85% of copy bandwidth), HQ = 32, HK = 8, D = 128
SHAPES = [(64, 4096, 16), (64, 4096, 64), (64, 16384, 16), (64, 16384, 64), (64, 32768, 16), (64, 32768, 64),
          (1, 32768, 16), (1, 32768, 64), (1, 4096, 16), (1, 4096, 64)]
QUICK = [(64, 4096, 64), (1, 32768, 16), (1, 4096, 64)]
HQ, HK, D = 32, 8, 128


def _inputs(torch, b, ctx, ps):
    mp = ctx // ps
    np_ = b * mp
    k = torch.randn(np_, ps, HK, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(np_, ps, HK, D, dtype=torch.bfloat16, device="cuda")
    bt = torch.randperm(np_, device="cuda").to(torch.int32).view(b, mp)
    lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    q = torch.randn(b, HQ, D, dtype=torch.bfloat16, device="cuda")
    return q, k, v, bt, lens


def _gather(k, bt):
    b, mp = bt.shape
    g = k.index_select(0, bt.reshape(-1).long())                 # [B * MP, PS, HK, D]
    return g.view(b, mp * k.shape[1], k.shape[2], k.shape[3]).transpose(1, 2)   # [B, HK, ctx, D]


def _cudnn(F, q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def cases(quick, ceiling, progress):
    torch = need_torch()
    import torch.nn.functional as F

    import tkreg
    rows = []
    for b, ctx, ps in (QUICK if quick else SHAPES):
        nbytes = 2 * b * ctx * HK * D * 2
        sets = rotations(lambda: _inputs(torch, b, ctx, ps), nbytes)
        reps = 20 if nbytes > 2**30 else 50
        ours = queued_ms(lambda q, k, v, bt, lens: tkreg.ops.paged_decode_attention(q, k, v, bt, lens), sets, reps=reps)
        dense = [(q.unsqueeze(2), _gather(k, bt).contiguous(), _gather(v, bt).contiguous()) for q, k, v, bt, _ in sets]
        sdpa = try_ms(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), dense,
                      reps=reps, timer=queued_ms)
        cudnn = try_ms(lambda q, k, v: _cudnn(F, q, k, v), dense, reps=reps, timer=queued_ms)
        del dense
        gathered = try_ms(lambda q, k, v, bt, lens: F.scaled_dot_product_attention(
            q.unsqueeze(2), _gather(k, bt), _gather(v, bt), enable_gqa=True), sets, reps=reps, timer=queued_ms)
        case = f"B={b} ctx={ctx} page={ps} HQ={HQ} HK={HK} D={D} bf16"
        rows += bandwidth_rows("paged_decode", case, nbytes, ceiling, ours,
                               {"sdpa (gathered KV)": sdpa, "sdpa cuDNN (gathered KV)": cudnn, "gather + sdpa": gathered})
        del sets
        torch.cuda.empty_cache()
        progress()
    return rows

