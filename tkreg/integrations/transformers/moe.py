"""Sparse-MoE blocks of transformers models on tkreg's routing and grouped GEMM.

`patch_moe_block(block, config)` returns a module with the stock block's forward convention
(hidden [B, S, H] -> hidden [B, S, H]) that runs

  router logits (torch F.linear: one small GEMM) -> topk_gate / group_limited_topk_gate ->
  moe_mapping (128-row segments) -> moe_expand -> grouped_gemm (gate_up [E, 2I, H]) ->
  silu_and_mul -> grouped_gemm (down [E, H, I]) -> moe_combine (+ the shared expert: gemm,
  silu_and_mul, gemm); up to 64 tokens (decode) the masked grouped GEMM over [E, T, .] instead

Families (transformers 5.17 stores the experts fused: gate_up_proj [E, 2I, H], gate rows first,
and down_proj [E, H, I], the layout the grouped GEMM takes, so the expert weights are used in
place, not copied):
  Qwen3MoeSparseMoeBlock   softmax over bf16 logits, top-k, renormalized if norm_topk_prob.
  MixtralSparseMoeBlock    softmax over bf16 logits, top-k, always renormalized.
  DeepseekV3MoE            fp32 logits, sigmoid, group-limited top-k with e_score_correction_bias,
                           renormalized if norm_topk_prob, times routed_scaling_factor; the shared
                           expert's gate/up packed once into one [2Is, H] weight.
The patched block keeps the stock submodules (gate, experts, shared_experts) as its children, so
the state dict, `.to()` and the router-logits recording of `output_router_logits` stay the
stock's.  In train() mode with grad enabled it runs the stock forward: the grouped GEMM has no
backward.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ...ops.gemm import ALIGN
from ...reference.moe import MAX_EXPERTS, MAX_K
from ._support import Unsupported

MOE_BLOCKS = ("Qwen3MoeSparseMoeBlock", "MixtralSparseMoeBlock", "DeepseekV3MoE")
INT32_MAX = 2**31 - 1     # the grouped GEMM's and expand's outputs are indexed with int32


# ---- the pipeline over plain tensors (tkreg/bench/moe_layer.py's bf16 layer: the contiguous form)
def swiglu_mlp(x, w13, w2):
    """x[T, H] @ w13[2I, H]^T -> silu(gate) * up -> @ w2[H, I]^T: one dense SwiGLU MLP."""
    from ... import ops
    return ops.gemm(ops.silu_and_mul(ops.gemm(x, w13)), w2)


def moe_experts(x, topk_idx, topk_weights, w13, w2, shared=None):
    """out[T, H] = sum_j topk_weights[t, j] * expert_{topk_idx[t, j]}(x[t]) (+ shared[t]); experts
    are SwiGLU MLPs w13[E, 2I, H] (gate rows first), w2[E, H, I]; bf16.  Up to MASKED_MAX_TOKENS
    tokens the experts run masked (`_masked_layout`), above that contiguous in 128-row segments."""
    from ... import ops
    if x.shape[0] <= MASKED_MAX_TOKENS:
        return _masked_experts(x, topk_idx, topk_weights, w13, w2, shared)
    m = ops.moe_mapping(topk_idx, w13.shape[0], ALIGN)
    h = ops.grouped_gemm(ops.moe_expand(x, m), w13, m.expert_offsets)
    y = ops.grouped_gemm(ops.silu_and_mul(h), w2, m.expert_offsets)
    return ops.moe_combine(y, m, topk_weights, shared=shared)


# Decode sizes: the contiguous layout pads each expert's few rows to a 128-row tile, so the GEMMs
# read and multiply mostly zeros; the masked GEMM's 64-row tile (Mmax <= 64) halves that (T = 64,
# Qwen3-30B-A3B shape, H100: the experts 0.51 ms against 0.63 ms).
MASKED_MAX_TOKENS = 64


def _masked_layout(topk_idx, num_experts):
    """A MoeMapping onto [E, Mmax = T] rows: slot (t, j) of expert e at row e * T + its rank among
    e's slots, so expand / combine address the masked GEMM's [E, T, .] operands."""
    from ... import ops
    from ...ops.moe import MoeMapping
    t, k = topk_idx.shape
    m = ops.moe_mapping(topk_idx, num_experts, 1)
    e = topk_idx.long()
    rows = e * t + (m.row_of_slot.long() - m.expert_offsets.long()[e])
    dev = topk_idx.device
    slot_of_row = torch.full((num_experts * t,), -1, dtype=torch.int32, device=dev)
    slot_of_row.scatter_(0, rows.flatten(), torch.arange(t * k, dtype=torch.int32, device=dev))
    offsets = torch.arange(0, num_experts * t + 1, t, dtype=torch.int32, device=dev)
    return MoeMapping(offsets, m.counts, slot_of_row, rows.to(torch.int32))


def _masked_experts(x, topk_idx, topk_weights, w13, w2, shared):
    from ... import ops
    (t, h), e = x.shape, w13.shape[0]
    m = _masked_layout(topk_idx, e)
    g = ops.grouped_gemm_masked(ops.moe_expand(x, m).view(e, t, h), w13, m.counts)
    y = ops.grouped_gemm_masked(ops.silu_and_mul(g.view(e * t, -1)).view(e, t, -1), w2, m.counts)
    return ops.moe_combine(y.view(e * t, h), m, topk_weights, shared=shared)


class Routing(NamedTuple):
    """How a family picks experts, in the terms of tkreg's gate ops."""
    k: int
    renormalize: bool
    scaling: float = 1.0
    fp32_logits: bool = False   # DeepSeek-V3 computes the router GEMM in fp32
    groups: tuple = ()          # (n_groups, topk_groups): the group-limited sigmoid rule


def _softmax_topk(block, renormalize):
    return Routing(k=int(block.gate.top_k), renormalize=bool(renormalize))


def _deepseek_v3(block):
    g = block.gate
    e, ng, tg, k = g.weight.shape[0], int(g.num_group or 1), int(g.topk_group or 1), int(g.top_k)
    if ng > 32 or e % ng or e // ng < 2 or tg > ng or k > tg * (e // ng):
        raise Unsupported(f"group-limited routing E={e}, n_group={ng}, topk_group={tg}, top-k={k}: tkreg's "
                          "gate serves n_group <= 32 groups of >= 2 experts with top-k within the kept groups")
    return Routing(k=k, renormalize=bool(g.norm_topk_prob), scaling=float(g.routed_scaling_factor),
                   fp32_logits=True, groups=(ng, tg))


READERS = {"Qwen3MoeSparseMoeBlock": lambda b: _softmax_topk(b, b.gate.norm_topk_prob),
           "MixtralSparseMoeBlock": lambda b: _softmax_topk(b, True),
           "DeepseekV3MoE": _deepseek_v3}


def _check(block, config, routing):
    ex = block.experts
    w13, w2 = ex.gate_up_proj, ex.down_proj
    e, i2, h = w13.shape
    if getattr(ex, "is_transposed", False) or not getattr(ex, "is_concatenated", True) or getattr(ex, "has_bias", False):
        raise Unsupported("experts stored transposed, interleaved or with biases: tkreg's grouped GEMM takes "
                          "[E, N, K] weights, gate rows then up rows, no bias")
    act = getattr(config, "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise Unsupported(f"hidden_act {act!r}: tkreg's experts run SwiGLU (silu)")
    if w13.dtype != torch.bfloat16:
        raise Unsupported(f"expert weights in {str(w13.dtype).replace('torch.', '')}: tkreg's MoE "
                          "routing ops (expand, combine) serve bfloat16")
    if tuple(w2.shape) != (e, h, i2 // 2):
        raise Unsupported(f"down_proj {tuple(w2.shape)} does not match gate_up_proj {tuple(w13.shape)}")
    if h % 8 or (i2 // 2) % 8:
        raise Unsupported(f"hidden {h}, expert intermediate {i2 // 2}: the grouped GEMM needs both % 8 == 0")
    sh = getattr(block, "shared_experts", None)
    if sh is not None:
        si = sh.gate_proj.weight.shape[0]
        if si == 0 or si % 8 or sh.gate_proj.weight.dtype != torch.bfloat16:
            raise Unsupported(f"shared expert intermediate {si} in {sh.gate_proj.weight.dtype}: tkreg.gemm "
                              "needs a bf16 intermediate that is a positive multiple of 8")
    if e > MAX_EXPERTS or not 1 <= routing.k <= MAX_K or routing.k > e:
        raise Unsupported(f"{e} experts, top-{routing.k}: tkreg's gate serves E <= {MAX_EXPERTS}, "
                          f"k <= {MAX_K}")
    if w13.device.type != "cuda":
        from ... import env
        if not env.fallback_reference():
            raise Unsupported(f"expert weights on {w13.device.type}: tkreg kernels run on CUDA GPUs "
                              "(TKREG_FALLBACK=reference runs the torch references)")


class TkregMoeBlock(torch.nn.Module):
    """A stock sparse-MoE block's forward on tkreg ops; the stock submodules are its children."""

    def __init__(self, block, routing: Routing):
        super().__init__()
        object.__setattr__(self, "stock", block)   # not a child: its children are ours
        self.gate, self.experts, self.routing = block.gate, block.experts, routing
        self.shared_experts = getattr(block, "shared_experts", None)
        e, i2, h = self.experts.gate_up_proj.shape
        # token chunk whose padded rows R = T*k + E*(ALIGN-1) keep R * max(2I, H) within int32
        self.max_tokens = max(1, (INT32_MAX // max(i2, h) - e * (ALIGN - 1)) // routing.k)
        for w in (self.experts.gate_up_proj, self.experts.down_proj):
            if not w.is_contiguous():
                w.data = w.data.contiguous()
        self._pack_shared()

    def _pack_shared(self):
        """The shared expert's gate/up weights become views of one [2Is, H] tensor (no copy kept)."""
        s = self.shared_experts
        if s is None:
            self.shared_gate_up = None
            return
        w13 = torch.cat([s.gate_proj.weight.data, s.up_proj.weight.data])
        n = s.gate_proj.weight.shape[0]
        s.gate_proj.weight.data, s.up_proj.weight.data = w13[:n], w13[n:]
        self.shared_gate_up = w13

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)   # .to() / .cuda() move gate and up apart: repack
        self._pack_shared()
        return out

    def extra_repr(self):
        r = self.routing
        rule = f"group-limited sigmoid {r.groups}" if r.groups else "softmax"
        return f"tkreg: {rule} top-{r.k}, renormalize={r.renormalize}, scaling={r.scaling}"

    def forward(self, hidden_states):
        if self.training and torch.is_grad_enabled():
            self.stock.training = True
            return self.stock(hidden_states)
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1]).contiguous()
        with torch.no_grad():
            if x.shape[0] == 0:
                return torch.zeros_like(hidden_states)
            if x.shape[0] > self.max_tokens:
                out = torch.cat([self._tokens(c) for c in x.split(self.max_tokens)])
            else:
                out = self._tokens(x)
        return out.view(shape)

    def _tokens(self, x):
        from ... import ops
        r, w = self.routing, self.gate.weight
        logits = F.linear(x.float(), w.float()) if r.fp32_logits else F.linear(x, w)
        if r.groups:
            bias = self.gate.e_score_correction_bias
            idx, wts = ops.group_limited_topk_gate(logits, r.k, *r.groups, scoring="sigmoid", bias=bias.float(),
                                                   renormalize=r.renormalize, routed_scaling_factor=r.scaling)
        else:
            idx, wts = ops.topk_gate(logits, r.k, scoring="softmax", renormalize=r.renormalize,
                                     routed_scaling_factor=r.scaling)
        if self.gate._forward_hooks:   # output_router_logits: transformers records the router's output
            for hook in tuple(self.gate._forward_hooks.values()):
                hook(self.gate, (x,), (logits, wts, idx))
        shared = None
        if self.shared_experts is not None:
            shared = swiglu_mlp(x, self.shared_gate_up, self.shared_experts.down_proj.weight)
        return moe_experts(x, idx, wts, self.experts.gate_up_proj, self.experts.down_proj, shared)


def patch_moe_block(block, config) -> torch.nn.Module:
    """A tkreg module replacing `block` (a stock sparse-MoE block, one of MOE_BLOCKS); raises
    Unsupported(one-line reason) for what tkreg does not serve."""
    name = type(block).__name__
    if name not in READERS:
        raise Unsupported(f"{name}: tkreg serves the sparse-MoE blocks {', '.join(MOE_BLOCKS)}")
    routing = READERS[name](block)
    _check(block, config, routing)
    return TkregMoeBlock(block, routing)
