"""Decode under CUDA graphs: one captured step of a kernelized model over a TkregPagedCache.

transformers' own compile path (static cache + torch.compile) cannot drive a paged cache (it
compiles only caches it marks compileable, and recompiles on Python-side state), so tkreg brings
its own: a decode step is capturable as written (fixed batch and block table; the step's
metadata is computed on the GPU; seq_lens advance in place; paged_decode_attention picks its
split count from shapes only), so one graph replays for every later token.
"""
from __future__ import annotations

import torch

from .cache import TkregPagedCache


class DecodeGraph:
    """`step(ids[B], positions[B]) -> logits[B, V]` replaying one captured decode step.

    Capture after the prefill (the cache must hold tokens).  Each replay appends one token per
    sequence, as an eager forward would; `cache.seen` advances on the host side.
    """

    def __init__(self, model, cache: TkregPagedCache, warmup: int = 2):
        if cache.seq_lens is None or cache.seen == 0:
            raise RuntimeError("capture_decode: run the prefill through the cache first (the graph is a decode step)")
        B, dev = cache.num_seqs, cache.seq_lens.device
        self.model, self.cache = model, cache
        self.ids = torch.zeros(B, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(B, 1, dtype=torch.long, device=dev)
        lens, seen = cache.seq_lens.clone(), cache.seen
        side = torch.cuda.Stream(device=dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            for _ in range(warmup):        # first calls load cubins and build dispatch tables
                self._forward()
                cache.seq_lens.copy_(lens)
                cache.seen = seen
        torch.cuda.current_stream(dev).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self._forward()
        cache.seen = seen                   # capture recorded the step without running it

    @torch.no_grad()
    def _forward(self):
        out = self.model(input_ids=self.ids, position_ids=self.pos, past_key_values=self.cache, use_cache=True,
                         logits_to_keep=1)
        return out.logits[:, -1]

    def step(self, ids, positions):
        c = self.cache
        if c.seen + 1 > c.max_tokens:
            raise ValueError(f"TkregPagedCache: full (max_cache_len={c.max_tokens})")
        self.ids.copy_(ids.view(-1, 1))
        self.pos.copy_(positions.view(-1, 1))
        self.graph.replay()
        c.seen += 1
        return self.logits


def capture_decode(model, cache: TkregPagedCache, warmup: int = 2) -> DecodeGraph:
    """Capture one decode step of `model` (kernelized, or attn_implementation="tkreg") over `cache`."""
    return DecodeGraph(model, cache, warmup)


@torch.no_grad()
def greedy_generate(model, input_ids, attention_mask=None, *, max_new_tokens: int, cache=None,
                    page_size: int = 16, cuda_graph: bool = True):
    """Greedy decoding of exactly `max_new_tokens` tokens (no stop tokens) through a TkregPagedCache:
    the prefill eagerly, each decode step a CUDA-graph replay (cuda_graph=True on a CUDA model)
    or an eager forward.  Left padding in `attention_mask` is served.  Returns [B, L + new] ids."""
    B, L = input_ids.shape
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    p = next(model.parameters())
    cache = cache or TkregPagedCache(model.config, L + max_new_tokens, page_size=page_size, batch_size=B,
                                     dtype=p.dtype, device=p.device)
    pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos, past_key_values=cache,
                   use_cache=True, logits_to_keep=1).logits[:, -1]
    nxt, last = logits.argmax(-1), pos[:, -1]
    tokens = [nxt]
    graph = capture_decode(model, cache) if cuda_graph and p.is_cuda and max_new_tokens > 1 else None
    for _ in range(max_new_tokens - 1):
        last = last + 1
        if graph is not None:
            logits = graph.step(nxt, last)
        else:
            logits = model(input_ids=nxt[:, None], position_ids=last[:, None], past_key_values=cache,
                           use_cache=True, logits_to_keep=1).logits[:, -1]
        nxt = logits.argmax(-1)
        tokens.append(nxt)
    return torch.cat([input_ids, torch.stack(tokens, 1)], 1)
