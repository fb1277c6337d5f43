"""Typed functions for flash attention (prefill): fixed-length batches and packed varlen batches.

Both return (out, lse): lse is the fp32 natural-log sum of exp of each query row's scaled scores
(-inf for a row that sees no key), so a backward pass or a split merge can follow.
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
