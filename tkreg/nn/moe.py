"""tkreg.nn.MoE: a routed mixture-of-experts block (SwiGLU experts) on tkreg's differentiable ops.

router logits (fp32 matmul) -> tkreg.topk_gate / group_limited_topk_gate picks the experts (no
gradient through the choice) -> the routing weights recomputed in torch from the chosen ids, so
the router gets its gradient -> moe_mapping (128-row segments) -> moe_expand -> grouped_gemm
(gate_up) -> silu_and_mul -> grouped_gemm (down) -> moe_combine, which adds the optional shared
expert.  Every step's backward is a tkreg kernel where one serves (grouped dgrad / k-grouped wgrad,
the expand/combine transposes, silu_and_mul's backward), torch elsewhere.
"""
from __future__ import annotations

import torch

from .. import ops
from ..reference.moe import SCORINGS, score
from .linear import _tokens
from .mlp import SwiGLUMLP

ALIGN = 128     # rows per expert segment: the grouped GEMMs' contiguous-layout alignment


class MoE(torch.nn.Module):
    """y[..., H] = sum over the k chosen experts e of w_e * down_e(silu(gate_e x) * up_e x) (+ a
    shared SwiGLU expert of `shared_intermediate` rows).  Weights: router [E, H] (fp32 logits),
    gate_up [E, 2I, H] (each expert's I gate rows then I up rows), down [E, H, I].
    `n_groups`/`topk_groups` select DeepSeek-V3's group-limited routing; otherwise plain top-k.
    The `bias` buffer (load balancing: set by the trainer, not learned) shifts the choice only,
    not the weights.  H, I % 8 == 0."""

    def __init__(self, hidden_size: int, intermediate_size: int, num_experts: int, top_k: int, *,
                 scoring: str = "softmax", renormalize: bool = True, routed_scaling_factor: float = 1.0,
                 n_groups: int | None = None, topk_groups: int | None = None, shared_intermediate: int = 0,
                 device=None, dtype=torch.bfloat16):
        super().__init__()
        if scoring not in SCORINGS:
            raise ValueError(f"tkreg.nn.MoE: scoring={scoring!r}; expected one of {', '.join(SCORINGS)}")
        if (n_groups is None) != (topk_groups is None):
            raise ValueError("tkreg.nn.MoE: give both n_groups and topk_groups (group-limited routing) or neither")
        self.num_experts, self.top_k, self.scoring = num_experts, top_k, scoring
        self.renormalize, self.scaling = renormalize, float(routed_scaling_factor)
        self.n_groups, self.topk_groups = n_groups, topk_groups
        h, i, e = hidden_size, intermediate_size, num_experts
        self.router = torch.nn.Parameter(torch.empty(e, h, device=device, dtype=dtype))
        self.gate_up = torch.nn.Parameter(torch.empty(e, 2 * i, h, device=device, dtype=dtype))
        self.down = torch.nn.Parameter(torch.empty(e, h, i, device=device, dtype=dtype))
        self.register_buffer("bias", torch.zeros(e, device=device, dtype=torch.float32))
        self.shared = SwiGLUMLP(h, shared_intermediate, device=device, dtype=dtype) if shared_intermediate else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for w in (self.router, self.gate_up, self.down):
                w.normal_(0.0, w.shape[-1] ** -0.5)

    def route(self, x):
        """x[T, H] -> (topk_idx[T, k] int32, differentiable weights[T, k] fp32)."""
        logits = torch.matmul(x.float(), self.router.float().t())
        code = SCORINGS[self.scoring]
        with torch.no_grad():
            if self.n_groups is None:
                idx, _ = ops.topk_gate(logits, self.top_k, scoring=self.scoring, bias=self.bias)
            else:
                idx, _ = ops.group_limited_topk_gate(logits, self.top_k, self.n_groups, self.topk_groups,
                                                     scoring=self.scoring, bias=self.bias)
        w = score(logits, code).gather(1, idx.long())
        if self.renormalize:
            w = w / w.sum(-1, keepdim=True).clamp_min(1e-20)
        return idx, w * self.scaling

    def experts(self, x, idx, w, shared=None):
        """The routed part for given choices: x[T, H], idx[T, k], w[T, k] -> y[T, H] (+ shared)."""
        m = ops.moe_mapping(idx, self.num_experts, alignment=ALIGN)
        xe = ops.moe_expand(x, m)
        h = ops.grouped_gemm(xe, self.gate_up, m.expert_offsets)
        ye = ops.grouped_gemm(ops.silu_and_mul(h), self.down, m.expert_offsets)
        return ops.moe_combine(ye, m, w, shared=shared)

    def forward(self, x):
        xt = _tokens(x)
        idx, w = self.route(xt)
        shared = self.shared(xt) if self.shared is not None else None
        return self.experts(xt, idx, w, shared).view(x.shape)

    def extra_repr(self) -> str:
        e, i2, h = self.gate_up.shape
        return (f"hidden={h}, intermediate={i2 // 2}, experts={e}, top_k={self.top_k}, scoring={self.scoring}, "
                f"shared={self.shared is not None}")
