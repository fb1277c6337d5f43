"""Attention: flash attention forward (prefill, fixed-length and varlen) and paged-KV decode.

tkreg.flash_attention(q[B, Sq, HQ, D], k/v[B, Sk, HK, D], causal, softmax_scale) -> out[B, Sq, HQ, D],
lse[B, HQ, Sq] fp32, and tkreg.flash_attention_varlen (packed q[TQ, HQ, D], k/v[TK, HK, D] with int32
cu_seqlens_q/k, FlashAttention's convention) -> out[TQ, HQ, D], lse[HQ, TQ]:

    out[b, i, h, :] = sum_j p[i, j] v[b, j, h // G, :],  p = softmax_j(q[b, i, h] . k[b, j, h // G] * scale)
    lse[b, h, i]    = log(sum_j exp(q . k * scale))      (natural log)

GQA/MQA: G = HQ // HK query heads share a KV head.  Causal masks are bottom-right aligned (query i
sees keys j <= i + Sk - Sq), so a row may see no key at all: its output is 0 and its lse -inf.
softmax_scale 0 means 1 / sqrt(D).  q/k/v are read through their strides (slices of a fused qkv
projection need no copy; the head dim must be contiguous, strides 16-byte aligned for TMA).
Sizes: D 64 or 128, HQ % HK == 0, bf16 / fp16; online softmax in fp32, exp2 domain.

tkreg.paged_decode_attention(q[B, HQ, D], k/v_cache[NP, PS, HK, D], block_table[B, MP],
seq_lens[B]) -> out[B, HQ, D], lse[B, HQ]: one query token a sequence over a paged KV cache,
D 64 or 128, page size 16 or 64, HQ / HK <= 16 (paged_decode.py).

Modules: prefill.py (the flash ops' specs and sm_100a's tiled fallback kernel), tiles.py (what the
flash kernels share), warp_specialized.py (sm_90a), tcgen05.py (sm_100a), paged_decode.py.
Tuning history: docs/attention-tuning.md.
"""
from .paged_decode import SPECS as _PAGED_DECODE
from .prefill import SPECS as _PREFILL

SPECS = _PREFILL + _PAGED_DECODE
