"""Typed function for paged-KV decode attention (vLLM / FlashInfer NHD page layout).

The kernels (kernels_src/paged_attention.py) trust the block table: an entry outside the cache
reads zeros there (TMA fills out-of-bounds boxes), it never faults, but the answer is wrong.
`TKREG_CHECK_INDICES=1` checks seq_lens and every entry
a sequence uses on the GPU before each launch and raises ValueError: it costs a device sync per
call, so it is a debug switch, skipped under CUDA-graph capture and torch.compile.
"""
from __future__ import annotations

from ..runtime import OPS
from ._route import checking, compiling, graph

NAME = "tkreg.paged_decode_attention"


def paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens, *, softmax_scale=None,
                           num_splits: int = 0, return_lse: bool = False, out=None):
    """Decode attention of one query token per sequence over a paged KV cache.

    q[B, HQ, D] (bf16/fp16; rows may be strided, as slices of a fused qkv projection);
    k_cache, v_cache[NP, PS, HK, D] in q's dtype (pages may be strided, as the halves of a
    [NP, 2, PS, HK, D] cache); block_table[B, MP] int32 (token t of sequence b is in page
    block_table[b, t // PS], slot t % PS); seq_lens[B] int32 (clamped to [0, MP * PS]).
    D = 64 or 128, PS = 16 or 64, HQ a multiple of HK with at most 16 query heads per KV head.
    softmax_scale defaults to 1/sqrt(D) (so does 0).  num_splits > 0 fixes how many CTAs share a
    sequence's KV (0: chosen from B, HK, the block table's width and the SM count, never from
    seq_lens, so a CUDA graph captured once replays for any lengths).
    Returns out[B, HQ, D] (zeros for an empty sequence), or (out, lse[B, HQ] fp32, natural-log
    sum-exp of the scaled scores, -inf for an empty sequence) with return_lse=True.
    """
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    if compiling():
        res = graph(NAME, None, q, k_cache, v_cache, block_table, seq_lens, scale, num_splits)
        if out is not None:
            out.copy_(res[0])
            res = (out, res[1])
    else:
        if checking():
            check_pages(k_cache, block_table, seq_lens)
        res = OPS[NAME](q, k_cache, v_cache, block_table, seq_lens, scale, num_splits, out)
    return res if return_lse else res[0]


def check_pages(k_cache, block_table, seq_lens) -> None:
    """ValueError unless 0 <= seq_lens[b] <= MP * PS and every page a sequence uses is in
    [0, NP).  One sync; skipped while a CUDA graph is being captured."""
    import torch
    if k_cache.dim() != 4 or block_table.dim() != 2 or seq_lens.dim() != 1:
        return   # the launcher names the shape error
    if block_table.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    np_, ps = k_cache.shape[0], k_cache.shape[1]
    mp = block_table.shape[1]
    lens = seq_lens.long()
    used = torch.arange(mp, device=block_table.device) < ((lens.clamp(0, mp * ps) + ps - 1) // ps)[:, None]
    bad = used & ((block_table < 0) | (block_table >= np_))
    bad_len = (lens < 0) | (lens > mp * ps)
    if not bool(torch.stack((bad.any(), bad_len.any())).any()):
        return
    if bad_len.any():
        b = int(bad_len.nonzero()[0, 0])
        raise ValueError(f"{NAME}: `seq_lens`[{b}] = {int(lens[b])} is outside [0, {mp * ps}] "
                         f"(block_table has {mp} pages of {ps} tokens per sequence)")
    b, j = (int(x) for x in bad.nonzero()[0])
    raise ValueError(f"{NAME}: `block_table`[{b}, {j}] = {int(block_table[b, j])} is outside the cache's "
                     f"{np_} pages (sequence {b} uses its first {int(used[b].sum())} entries)")
