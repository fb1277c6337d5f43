"""Typed functions for MoE routing: gating, the expert-major mapping, expand, combine, counts.

A routing step is `topk_gate` (or `group_limited_topk_gate`) -> `moe_mapping` -> `moe_expand` ->
the experts (a grouped GEMM over `mapping.expert_offsets`) -> `moe_combine`.  Semantics (exact):
kernels_src/moe.py and tkreg/reference/moe.py.  Arguments the launcher cannot judge from shapes
(k against E, the group counts) are checked here, before launch, with errors naming the op and
the argument.  Ids in `topk_idx` outside [0, E) are skipped by the kernels; set
TKREG_CHECK_INDICES=1 to raise on them instead (costs a device sync per call).
"""
from __future__ import annotations

from typing import NamedTuple

from ..reference.moe import MAX_EXPERTS as E_MAX, MAX_K as K_MAX, SCORINGS, padded_rows
from ..runtime import OPS
from ._route import checking, compiling, graph



class MoeMapping(NamedTuple):
    """Expert-major layout of the routed slots (all int32): expert e owns rows
    expert_offsets[e] .. expert_offsets[e + 1] - 1, the first counts[e] real (ascending token*k +
    slot), the rest padding (slot_of_row -1); row_of_slot[t, j] is slot (t, j)'s row (-1: skipped)."""
    expert_offsets: object
    counts: object
    slot_of_row: object
    row_of_slot: object


def _scoring(op, scoring):
    if isinstance(scoring, str):
        if scoring not in SCORINGS:
            raise ValueError(f"{op}: `scoring`={scoring!r}; expected one of {', '.join(SCORINGS)}")
        return SCORINGS[scoring]
    if scoring not in SCORINGS.values():
        raise ValueError(f"{op}: `scoring`={scoring!r}; expected one of {', '.join(SCORINGS)}")
    return int(scoring)


def _check_gate(op, scores, k):
    if scores.dim() != 2:
        raise ValueError(f"{op}: `scores` must have 2 dims [T, E], got shape {tuple(scores.shape)}")
    e = scores.shape[1]
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= K_MAX:
        raise ValueError(f"{op}: `k`={k!r}; expected an int in 1..{K_MAX}")
    if k > e:
        raise ValueError(f"{op}: `k`={k} exceeds the number of experts E={e} (scores.shape[1])")
    if e > E_MAX:
        raise ValueError(f"{op}: E={e} experts (scores.shape[1]); at most {E_MAX} are served")
    return e


def topk_gate(scores, k: int, *, scoring="softmax", bias=None, renormalize: bool = False,
              routed_scaling_factor: float = 1.0):
    """scores[T, E] fp32/bf16 -> (topk_idx[T, k] int32, topk_weights[T, k] fp32).

    Experts in descending order of score + bias (ties -> the lower id); weights are the unbiased
    scores, renormalized to sum 1 if asked, times routed_scaling_factor."""
    op = "tkreg.topk_gate"
    _check_gate(op, scores, k)
    args = (scores, bias, k, _scoring(op, scoring), bool(renormalize), float(routed_scaling_factor))
    if compiling():
        return graph(op, None, *args)
    return OPS[op](*args)


def group_limited_topk_gate(scores, k: int, n_groups: int, topk_groups: int, *, scoring="sigmoid", bias=None,
                            renormalize: bool = True, routed_scaling_factor: float = 1.0, num_shared: int = 0,
                            mask=None):
    """DeepSeek-V3 routing: experts in E / n_groups groups; the topk_groups groups with the best sum
    of their two largest biased scores are eligible; then top-k as `topk_gate`.  num_shared shared
    experts are appended as ids E .. E + num_shared - 1 with weight 1; tokens with mask[t] False get
    ids -1 and weights 0.  -> (topk_idx, topk_weights) [T, k + num_shared]."""
    op = "tkreg.group_limited_topk_gate"
    e = _check_gate(op, scores, k)
    for name, v in (("n_groups", n_groups), ("topk_groups", topk_groups), ("num_shared", num_shared)):
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "num_shared" else 1):
            raise ValueError(f"{op}: `{name}`={v!r}; expected a {'non-negative' if name == 'num_shared' else 'positive'} int")
    if n_groups > 32:
        raise ValueError(f"{op}: `n_groups`={n_groups}; at most 32 groups are served")
    if e % n_groups:
        raise ValueError(f"{op}: E={e} experts are not divisible into `n_groups`={n_groups} groups")
    if e // n_groups < 2:
        raise ValueError(f"{op}: groups of E / n_groups = {e // n_groups} expert; the group score needs >= 2")
    if topk_groups > n_groups:
        raise ValueError(f"{op}: `topk_groups`={topk_groups} exceeds `n_groups`={n_groups}")
    if k > topk_groups * (e // n_groups):
        raise ValueError(f"{op}: `k`={k} exceeds the {topk_groups * (e // n_groups)} experts of the "
                         f"topk_groups={topk_groups} kept groups")
    if k + num_shared > 32:
        raise ValueError(f"{op}: k + num_shared = {k + num_shared}; at most 32 slots per token")
    args = (scores, bias, mask, k, n_groups, topk_groups, k + num_shared, _scoring(op, scoring), bool(renormalize),
            float(routed_scaling_factor))
    if compiling():
        return graph(op, None, *args)
    return OPS[op](*args)


def _ids(op, topk_idx, num_experts):
    import torch
    if topk_idx.dim() != 2:
        raise ValueError(f"{op}: `topk_idx` must have 2 dims [T, k], got shape {tuple(topk_idx.shape)}")
    if not isinstance(num_experts, int) or isinstance(num_experts, bool) or not 1 <= num_experts <= E_MAX:
        raise ValueError(f"{op}: `num_experts`={num_experts!r}; expected an int in 1..{E_MAX}")
    if topk_idx.dtype == torch.int64:
        topk_idx = topk_idx.to(torch.int32)
    if checking() and topk_idx.numel():
        hi = int(topk_idx.max())
        if hi >= num_experts or int(topk_idx.min()) < -1:
            raise ValueError(f"{op}: `topk_idx` holds ids outside -1..{num_experts - 1} (max {hi}); "
                             "ids must be < num_experts")
    return topk_idx


def moe_mapping(topk_idx, num_experts: int, alignment: int = 1) -> MoeMapping:
    """topk_idx[T, k] int32 (int64 is converted) -> MoeMapping; see its doc.  Each segment is padded
    to a multiple of `alignment` rows; R = T*k + min(E, T*k) * (alignment - 1) rows are allocated."""
    op = "tkreg.moe_mapping"
    topk_idx = _ids(op, topk_idx, num_experts)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise ValueError(f"{op}: `alignment`={alignment!r}; expected a positive int")
    t, k = topk_idx.shape
    args = (topk_idx, num_experts, alignment, padded_rows(t, k, num_experts, alignment))
    if compiling():
        return MoeMapping(*graph(op, None, *args))
    return MoeMapping(*OPS[op](*args))


def _mapping_args(mapping):
    return (mapping.row_of_slot, mapping.slot_of_row, mapping.expert_offsets, mapping.counts)


def moe_expand(x, mapping: MoeMapping, *, scales=None):
    """x[T, H] -> x_e[R, H] in expert-major order (padding rows zero; rows past
    expert_offsets[E] are not written).  bf16; or fp8 e4m3 with `scales` [T, H // 128] fp32,
    row-major or the column-major view the quant ops return (column_major_scales=True): then
    returns (x_e, s_e) with s_e in the same layout ([R, H // 128], or the transposed view of a
    [H // 128, ceil(R / 4) * 4] buffer)."""
    m = _mapping_args(mapping)
    if scales is None:
        if compiling():
            return graph("tkreg.moe_expand", None, x, *m)
        return OPS["tkreg.moe_expand"](x, *m)
    col = scales.dim() == 2 and scales.stride(-1) != 1 and scales.stride(0) == 1
    name = "tkreg.moe_expand_fp8_colmajor" if col else "tkreg.moe_expand_fp8"
    xe, se = graph(name, None, x, scales, *m) if compiling() else OPS[name](x, scales, *m)
    return (xe, se.t()[: xe.shape[0]]) if col else (xe, se)


def moe_combine(y_e, mapping: MoeMapping, topk_weights, *, shared=None):
    """y_e[R, H] bf16 -> out[T, H] bf16 = sum_j topk_weights[t, j] * y_e[row_of_slot[t, j]]
    (+ shared[t]), accumulated in fp32 in slot order."""
    if compiling():
        return graph("tkreg.moe_combine", None, y_e, mapping.row_of_slot, topk_weights, shared)
    return OPS["tkreg.moe_combine"](y_e, mapping.row_of_slot, topk_weights, shared)


def expert_counts(topk_idx, num_experts: int):
    """topk_idx[T, k] -> int32[E] tokens routed to each expert (ids outside [0, E) skipped): the
    f_i term of the auxiliary load-balancing loss."""
    op = "tkreg.expert_counts"
    topk_idx = _ids(op, topk_idx, num_experts)
    if compiling():
        return graph(op, None, topk_idx, num_experts)
    return OPS[op](topk_idx, num_experts)


# ---- autograd (the specs' backward=): expand and combine are each other's transpose ------------
def _combine_raw(y_e, row_of_slot, w, shared=None):
    """moe_combine through its torch op: a backward is traced by AOTAutograd under torch.compile
    with no Dynamo frame (compiling() is False there), and only the op takes fake tensors."""
    from ._route import op
    return op("tkreg.moe_combine")(y_e, row_of_slot, w, shared)


class ExpandBackward:
    """d x[t] = sum_j d x_e[row_of_slot[t, j]]: a combine with weights 1."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[1])

    @staticmethod
    def backward(ctx, grad_xe):
        import torch
        (rows,) = ctx.saved_tensors
        ones = torch.ones(rows.shape, dtype=torch.float32, device=rows.device)
        return _combine_raw(grad_xe.contiguous(), rows, ones), None, None, None, None


class CombineBackward:
    """d y_e[row(t, j)] = w[t, j] * d out[t] (padding rows 0); d w[t, j] = <d out[t], y_e[row(t, j)]>
    in fp32; d shared = d out."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        y_e, rows, w, shared = inputs
        ctx.has_shared = shared is not None
        ctx.save_for_backward(y_e, rows, w)

    @staticmethod
    def backward(ctx, grad_out):
        import torch
        y_e, rows, w = ctx.saved_tensors
        t, k = rows.shape
        r = rows.long()
        ok = r >= 0
        tok = torch.arange(t, device=r.device).unsqueeze(1).expand(t, k)[ok]
        g = grad_out.float()
        grad_y = grad_w = None
        if ctx.needs_input_grad[0]:
            gy = torch.zeros(y_e.shape, dtype=torch.float32, device=y_e.device)
            gy[r[ok]] = g[tok] * w[ok].float().unsqueeze(1)
            grad_y = gy.to(y_e.dtype)
        if ctx.needs_input_grad[2]:
            grad_w = torch.zeros(t, k, dtype=torch.float32, device=w.device)
            grad_w[ok] = (g[tok] * y_e[r[ok]].float()).sum(-1)
        grad_s = grad_out if ctx.has_shared and ctx.needs_input_grad[3] else None
        return grad_y, None, grad_w, grad_s
