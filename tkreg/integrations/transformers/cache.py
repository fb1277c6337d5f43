"""TkregPagedCache: a transformers `Cache` holding K/V in tkreg's paged NHD layout.

Per layer k/v pages [num_pages, page_size, HK, D] (contiguous), one block table [B, max_pages]
int32 (sequence b owns pages b * max_pages ... (b + 1) * max_pages - 1, plus one scratch page at
the end that no sequence reads) and seq_lens [B] int32 = tokens stored per sequence.  Only valid
(unpadded) tokens are stored: a left-padded prompt of n tokens fills slots 0..n-1 of its
sequence, so decode attends exactly the sequence's tokens and never a pad, and no KV is gathered.

One forward is one step: the first attention layer plans it (`plan`: slots of the new tokens,
seq_lens advanced in place, so a CUDA graph of a decode step replays with the same buffers), each
layer writes its K/V (`write`) and attends (`attend`): from an empty cache the new tokens attend
among themselves (flash_attention_varlen, pads in their own segments), otherwise every query row
attends its sequence's pages (paged_decode_attention; several new tokens per sequence become
several rows with their own lengths, which is causal).
"""
from __future__ import annotations

import math

from transformers.cache_utils import Cache, CacheLayerMixin


def _capturing(t) -> bool:
    import torch
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


class _Step:
    """What one forward shares across layers."""
    __slots__ = ("slots", "first", "cu", "rows_table", "rows_lens", "B", "S")


class _PagedLayer(CacheLayerMixin):
    is_compileable = False
    is_sliding = False
    is_croppable = False

    def __init__(self, cache: "TkregPagedCache", idx: int):
        super().__init__()
        self.cache, self.idx = cache, idx

    def lazy_initialization(self, key_states, value_states) -> None:
        self.cache.allocate(key_states.shape[0], key_states.dtype, key_states.device)

    def update(self, key_states, value_states, *args, **kwargs):
        """Stock attention modules call this before their attention function: the K/V are handed
        back tagged, and the "tkreg" attention function writes and attends through the cache."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        key_states._tkreg_paged = (self.cache, self.idx)
        return key_states, value_states

    @property
    def is_initialized(self):
        return self.cache.k is not None

    @is_initialized.setter
    def is_initialized(self, value):
        pass

    @property
    def batch_size(self):
        if self.cache.k is None:
            raise AttributeError("batch_size")   # transformers' Cache.batch_size then says -1 (not allocated)
        return self.cache.num_seqs

    def get_mask_sizes(self, query_length: int):
        return self.cache.seen + query_length, 0

    def get_seq_length(self) -> int:
        return self.cache.seen

    def get_max_length(self) -> int:
        return self.cache.max_tokens

    def reset(self) -> None:
        self.cache.reset()

    def _unsupported(self, *args, **kwargs):
        raise NotImplementedError("TkregPagedCache: beam search, cropping and batch reordering are not supported "
                                  "(greedy / sampling generate only)")

    reorder_cache = crop = batch_repeat_interleave = batch_select_indices = _unsupported


class TkregPagedCache(Cache):
    """Paged K/V cache for `model.generate(..., past_key_values=TkregPagedCache(model.config, max_cache_len=N))`.

    config: the model's config (layers, KV heads, head dim); max_cache_len: tokens per sequence
    (the padded prompt length + new tokens); page_size: 16 or 64.  batch_size / dtype / device
    are taken from the first forward unless given (give them to capture a CUDA graph first).
    Needs attention on tkreg: a `tkreg.kernelize`d model, or attn_implementation="tkreg".
    """

    def __init__(self, config, max_cache_len: int, *, page_size: int = 16, batch_size: int | None = None,
                 dtype=None, device=None):
        if page_size not in (16, 64):
            raise ValueError(f"TkregPagedCache: page_size must be 16 or 64 (tkreg.paged_decode_attention), got {page_size}")
        cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        self.num_layers = cfg.num_hidden_layers
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.page_size, self.max_tokens = page_size, int(max_cache_len)
        self.pages_per_seq = math.ceil(self.max_tokens / page_size)
        self.k = self.v = self.block_table = self.seq_lens = None
        self.num_seqs, self.seen, self._step = None, 0, None
        super().__init__(layers=[_PagedLayer(self, i) for i in range(self.num_layers)])
        if batch_size is not None and dtype is not None and device is not None:
            self.allocate(batch_size, dtype, device)

    def allocate(self, batch_size: int, dtype, device) -> None:
        import torch
        if self.k is not None:
            if batch_size != self.num_seqs:
                raise ValueError(f"TkregPagedCache: allocated for batch {self.num_seqs}, got a batch of {batch_size}")
            return
        mp, ps = self.pages_per_seq, self.page_size
        pages = batch_size * mp + 1                      # + the scratch page skipped tokens are written to
        shape = (pages, ps, self.kv_heads, self.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.num_layers)]
        self.block_table = torch.arange(batch_size * mp, dtype=torch.int32, device=device).view(batch_size, mp)
        self.seq_lens = torch.zeros(batch_size, dtype=torch.int32, device=device)
        self.num_seqs, self._scratch = batch_size, (pages - 1) * ps

    def reset(self) -> None:
        if self.seq_lens is not None:
            self.seq_lens.zero_()
        self.seen, self._step = 0, None

    # ---- one forward ----------------------------------------------------------------------
    def plan(self, mask, B: int, S: int, like) -> _Step:
        """At the first layer of a forward: where the S new tokens of each sequence go.  `mask`
        is the "tkreg" mask ([B, kv_len] bool, True: a real token; None: every token real);
        `like`: a tensor of the new K/V (dtype and device of a first allocation)."""
        import torch
        self.allocate(B, like.dtype, like.device)
        device = like.device
        if B != self.num_seqs:
            raise ValueError(f"TkregPagedCache: allocated for batch {self.num_seqs}, got a batch of {B}")
        if self.seen + S > self.max_tokens:
            raise ValueError(f"TkregPagedCache: {self.seen} + {S} tokens exceed max_cache_len={self.max_tokens}")
        if mask is not None and mask.dim() != 2:
            raise NotImplementedError("TkregPagedCache serves causal attention with a padding mask; this model built "
                                      f"a {mask.dim()}-D mask (custom or sliding-window masking)")
        if mask is None:
            valid = torch.ones(B, S, dtype=torch.bool, device=device)
        else:
            valid = mask[:, self.seen:self.seen + S].bool().expand(B, S)
        ps, mp = self.page_size, self.pages_per_seq
        rank = valid.long().cumsum(1) - 1                           # index among this step's valid tokens
        pos = self.seq_lens.long()[:, None] + rank.clamp(min=0)      # slot index within the sequence
        page = self.block_table.long().gather(1, (pos // ps).clamp(max=mp - 1))
        slots = torch.where(valid, page * ps + pos % ps, torch.full_like(pos, -1))
        st = _Step()
        st.B, st.S, st.slots, st.first = B, S, slots.reshape(-1), self.seen == 0
        if st.first:
            st.cu = _segments(valid, S)
        else:
            lens = (self.seq_lens.long()[:, None] + rank + 1).clamp(min=0)
            st.rows_lens = lens.reshape(-1).to(torch.int32)
            st.rows_table = self.block_table if S == 1 else self.block_table.repeat_interleave(S, 0)
        self.seq_lens.add_(valid.sum(1).to(torch.int32))
        self.seen += S
        self._step = st
        return st

    def write(self, layer: int, k, v, step: _Step) -> None:
        """k/v[T, HK, D] of the new tokens into the pages at step.slots (skipped tokens: scratch):
        the path of attn_implementation="tkreg" without kernelize, whose k arrives already rotated
        by the stock module (kernelized attention writes through tkreg.qk_norm_rope_cache instead)."""
        import torch
        idx = torch.where(step.slots >= 0, step.slots, torch.full_like(step.slots, self._scratch))
        hk, d = self.kv_heads, self.head_dim
        self.k[layer].view(-1, hk, d).index_copy_(0, idx, k.reshape(-1, hk, d))
        self.v[layer].view(-1, hk, d).index_copy_(0, idx, v.reshape(-1, hk, d))

    def attend(self, layer: int, q, k, v, step: _Step, scale: float):
        """q[T, HQ, D] -> out[T, HQ, D] (T = B * S rows, batch-major)."""
        from ... import ops
        if step.first:
            s = step.S
            return ops.flash_attention_varlen(q, k, v, step.cu, step.cu, s, s, causal=True, softmax_scale=scale)[0]
        return ops.paged_decode_attention(q, self.k[layer], self.v[layer], step.rows_table, step.rows_lens,
                                          softmax_scale=scale)

    @property
    def is_compileable(self) -> bool:
        return False


def _segments(valid, S: int):
    """cu_seqlens [3B + 1] int32 of a [B, S] prompt batch whose valid tokens are one run per row:
    per row (pads before, valid run, pads after), so each run attends only itself, causally.
    Rows whose valid tokens are not one run raise (checked unless a CUDA graph is capturing)."""
    import torch
    B = valid.shape[0]
    vi = valid.int()
    n = vi.sum(1)
    start = torch.where(n > 0, vi.argmax(1), torch.zeros_like(n))
    if not _capturing(valid):
        runs = (vi[:, 1:] > vi[:, :-1]).sum(1) + vi[:, 0]
        if bool((runs > 1).any()):
            raise NotImplementedError("tkreg attention: a padding mask whose valid tokens are not one run per "
                                      "sequence (pads only before and/or after the tokens are served)")
    lens = torch.stack((start, n, S - start - n), 1).reshape(-1)
    return torch.nn.functional.pad(lens.cumsum(0), (1, 0)).to(torch.int32)
