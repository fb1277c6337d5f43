"""Typed functions for attention: flash attention (prefill) over fixed-length batches and packed
varlen batches, and paged-KV decode attention (vLLM / FlashInfer NHD page layout).

Both return (out, lse): lse is the fp32 natural-log sum of exp of each query row's scaled scores
(-inf for a row that sees no key), so a backward pass or a split merge can follow.

Paged decode trusts the block table: an entry outside the cache reads zeros there (TMA fills
out-of-bounds boxes), it never faults, but the answer is wrong.  `TKREG_CHECK_INDICES=1` checks
seq_lens and every entry a sequence uses on the GPU before each launch and raises ValueError: it
costs a device sync per call, so it is a debug switch, skipped under CUDA-graph capture and
torch.compile.
"""
from __future__ import annotations

from ..runtime import OPS
from ._route import checking, compiling, graph


def _scale(softmax_scale) -> float:
    return 0.0 if softmax_scale is None else float(softmax_scale)   # 0: the kernels use 1/sqrt(D)


def _call(name, out, lse, *args):
    if compiling():
        o, l = graph(name, None, *args)
        return (o if out is None else out.copy_(o)), (l if lse is None else lse.copy_(l))
    return OPS[name](*args, out, lse)


def flash_attention(q, k, v, *, causal: bool = False, softmax_scale=None, out=None, lse=None):
    """q[B, Sq, HQ, D], k/v[B, Sk, HK, D] -> (out[B, Sq, HQ, D], lse[B, HQ, Sq] fp32).

    bf16/fp16, D = 64 or 128, HQ a multiple of HK (MHA, GQA, MQA).  `causal` masks bottom-right
    aligned (query i sees keys j <= i + Sk - Sq).  q/k/v may be strided views (e.g. slices of a
    fused qkv projection) as long as the head dim is contiguous and strides are multiples of 8.
    """
    return _call("tkreg.flash_attention", out, lse, q, k, v, bool(causal), _scale(softmax_scale))


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, *,
                           causal: bool = False, softmax_scale=None, out=None, lse=None):
    """Packed q[TQ, HQ, D], k/v[TK, HK, D]; cu_seqlens_q/k[batch + 1] int32 running offsets
    (FlashAttention's varlen convention) -> (out[TQ, HQ, D], lse[HQ, TQ] fp32).

    `max_seqlen_q` must be at least the longest query sequence (rows past it are not computed);
    rows of q past cu_seqlens_q[-1] are left unwritten.  With TKREG_CHECK_INDICES=1 the offsets
    are checked (monotone, within the tensors, max_seqlen_q honest) at the cost of a device sync.
    """
    if checking():
        _check_offsets("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q)
        _check_offsets("cu_seqlens_k", cu_seqlens_k, k.shape[0], None)
    return _call("tkreg.flash_attention_varlen", out, lse, q, k, v, cu_seqlens_q, cu_seqlens_k,
                 int(max_seqlen_q), int(max_seqlen_k), bool(causal), _scale(softmax_scale))


def _check_offsets(name, cu, rows, max_len):
    c = cu.tolist()
    if c and c[0] < 0 or any(b < a for a, b in zip(c, c[1:])) or (c and c[-1] > rows):
        raise ValueError(f"tkreg.flash_attention_varlen: {name} must be non-decreasing offsets in "
                         f"[0, {rows}], got {c[:8]}{'...' if len(c) > 8 else ''}")
    longest = max((b - a for a, b in zip(c, c[1:])), default=0)
    if max_len is not None and longest > max_len:
        raise ValueError(f"tkreg.flash_attention_varlen: max_seqlen_q={max_len} is below the longest "
                         f"query sequence ({longest})")



def sdpa_gradients(dout, q, k, v, causal: bool, softmax_scale: float):
    """dq, dk, dv of flash attention by torch: the forward recomputed with SDPA (cuDNN / flash /
    memory-efficient backends, GQA via enable_gqa) and differentiated.  The causal mask is
    bottom-right aligned as tkreg's: an explicit mask where Sq != Sk, the rows that see no key
    given zero gradients (their dout zeroed, one key left visible so SDPA stays finite)."""
    import torch
    import torch.nn.functional as F
    sq, sk = q.shape[1], k.shape[1]
    mask = None
    if causal and sq != sk:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mask = (j <= i + (sk - sq)) | (j == 0)
        if sq > sk:
            dout = dout.masked_fill((torch.arange(sq, device=q.device) < sq - sk)[None, :, None, None], 0)
    with torch.enable_grad():
        qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
        o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, is_causal=causal and mask is None,
                                           scale=softmax_scale or None, enable_gqa=q.shape[2] != k.shape[2])
        grads = torch.autograd.grad(o, (qt, kt, vt), dout.transpose(1, 2))
    return tuple(g.transpose(1, 2) for g in grads)


class FlashAttentionGrad:
    """Autograd of tkreg.flash_attention (its spec names this class as `backward`): lse is an output
    that carries no gradient (as in FlashAttention).  tkreg's backward kernel is not shipped yet
    (docs/attention-tuning.md), so dq, dk, dv come from torch: on a GPU `sdpa_gradients` (the
    forward recomputed by SDPA and its backward, cuDNN or flash), on the CPU the reference's fp32
    formulas from the saved out and lse."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, causal, softmax_scale = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.softmax_scale = bool(causal), float(softmax_scale)

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        if dout is None:
            return None, None, None, None, None
        dout = dout.contiguous()
        if q.is_cuda:
            dq, dk, dv = sdpa_gradients(dout, q, k, v, ctx.causal, ctx.softmax_scale)
        else:
            from ..reference.attention_backward import flash_attention_backward as ref
            dq, dk, dv = ref(dout, q, k, v, out, lse, ctx.causal, ctx.softmax_scale)
        needs = ctx.needs_input_grad
        return (dq if needs[0] else None, dk if needs[1] else None, dv if needs[2] else None, None, None)


class FlashAttentionVarlenGrad:
    """Autograd of tkreg.flash_attention_varlen (its spec names this class as `backward`): the
    reference's fp32 formulas per sequence from the saved out and lse (a host sync over
    cu_seqlens), rows outside every sequence given zero gradients.  lse carries no gradient."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, cu_q, cu_k, max_q, max_k, causal, softmax_scale = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, cu_q, cu_k, out, lse)
        ctx.scalars = (int(max_q), int(max_k), bool(causal), float(softmax_scale))

    @staticmethod
    def backward(ctx, dout, _dlse):
        from ..reference.attention_backward import flash_attention_varlen_backward as ref
        q, k, v, cu_q, cu_k, out, lse = ctx.saved_tensors
        none = (None,) * 6
        if dout is None:
            return (None, None, None) + none
        dq, dk, dv = ref(dout.contiguous(), q, k, v, out, lse, cu_q, cu_k, *ctx.scalars)
        needs = ctx.needs_input_grad
        return (dq if needs[0] else None, dk if needs[1] else None, dv if needs[2] else None) + none


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
