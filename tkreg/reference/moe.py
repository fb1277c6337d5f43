"""Torch references for the MoE routing family (the test oracle; TKREG_FALLBACK=reference).

Semantics, as kernels_src/moe/ computes them (fp32 math):
  scoring 0 none, 1 softmax (exp(x - max) / sum), 2 sigmoid (1 / (1 + exp(-x)), torch.sigmoid's
  CUDA formula), 3 sqrtsoftplus (sqrt(x > 20 ? x : log1p(exp(x)))).
  key = score + bias; top-k by a stable descending sort (ties -> the lower expert id).
  group-limited: group score = the sum of the group's two largest keys; the topk_groups best
  groups (ties -> the lower group) stay, other keys become -inf.
  weights: the unbiased scores of the chosen ids; renormalize divides by max(sum in slot order,
  1e-20); then times routed_scaling_factor.  Shared experts: ids E.., weight 1.  mask False:
  ids -1, weights 0.
  mapping: counts per expert, segments aligned up to `alignment`, rows inside a segment in
  ascending token * K + slot, -1 padding; R = T*K + min(E, T*K) * (alignment - 1).
  expand: x_e[r] = x[slot_of_row[r] // K], zero where slot_of_row[r] < 0 (the kernel leaves rows
  past expert_offsets[E] unwritten: compare x_e[:expert_offsets[E]]).
  combine: out[t] = bf16(sum_j w[t, j] * y_e[row_of_slot[t, j]] + shared[t]), fp32, each product
  and sum rounded (no FMA), in slot order; rows of -1 skipped.
"""
from __future__ import annotations

from .quant import GROUP

# The limits and codes the kernels share with this reference (kernels_src/moe/ imports them):
MAX_EXPERTS = 512       # the largest expert count the kernels serve (gate lanes: 16 experts a lane)
MAX_K = 16              # the largest top-k (routed slots a token held in registers)
# scoring name -> the int code the kernels take
SCORINGS = {"none": 0, "softmax": 1, "sigmoid": 2, "sqrtsoftplus": 3}


def padded_rows(t: int, k: int, e: int, alignment: int) -> int:
    """R, the rows moe_mapping allocates: T*K + min(E, T*K) * (alignment - 1)."""
    n = t * k
    return n + min(e, n) * (alignment - 1)


def score(x, scoring: int):
    """fp32 scores from fp32 logits x[T, E]."""
    import torch
    if scoring == 1:
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return torch.div(e, e.sum(-1, keepdim=True))
    if scoring == 2:
        return torch.div(torch.ones_like(x), 1 + torch.exp(-x))
    if scoring == 3:
        return torch.sqrt(torch.where(x > 20, x, torch.log1p(torch.exp(x))))
    if scoring != 0:
        raise ValueError(f"scoring code {scoring}: expected 0 none, 1 softmax, 2 sigmoid, 3 sqrtsoftplus")
    return x


def _topk_stable(key, k: int):
    import torch
    return torch.sort(key, dim=-1, descending=True, stable=True).indices[:, :k]


def _weights(sc, idx, renormalize: bool, scale: float):
    import torch
    w = sc.gather(1, idx)
    if renormalize and w.shape[1]:
        tot = torch.zeros_like(w[:, 0])
        for j in range(w.shape[1]):        # slot order, as the kernel
            tot = tot + w[:, j]
        w = torch.div(w, tot.clamp_min(1e-20).unsqueeze(1))
    return w * torch.tensor(scale, dtype=torch.float32, device=w.device)


def topk_gate(scores, bias=None, k=1, scoring=1, renormalize=False, routed_scaling_factor=1.0):
    """scores[T, E] -> (topk_idx[T, k] int32, topk_weights[T, k] fp32)."""
    import torch
    sc = score(scores.float(), int(scoring))
    key = sc if bias is None else sc + bias.float()
    idx = _topk_stable(key, int(k))
    return idx.to(torch.int32), _weights(sc, idx, bool(renormalize), float(routed_scaling_factor))


def group_limited_topk_gate(scores, bias=None, mask=None, k=1, n_groups=1, topk_groups=1, scoring=2,
                            renormalize=True, routed_scaling_factor=1.0, n_out=None):
    """DeepSeek-V3 routing; n_out - k shared experts appended.  -> (topk_idx, topk_weights) [T, n_out]."""
    import torch
    t, e = scores.shape
    k, g, tg = int(k), int(n_groups), int(topk_groups)
    n_out = k if n_out is None else int(n_out)
    sc = score(scores.float(), int(scoring))
    key = sc if bias is None else sc + bias.float()
    top2 = torch.sort(key.view(t, g, e // g), dim=-1, descending=True).values[..., :2]
    gscore = top2[..., 0] + top2[..., 1]
    keep = torch.zeros(t, g, dtype=torch.bool, device=scores.device)
    keep.scatter_(1, _topk_stable(gscore, tg), True)
    key = torch.where(keep.repeat_interleave(e // g, dim=1), key, torch.full_like(key, float("-inf")))
    idx = _topk_stable(key, k)
    w = _weights(sc, idx, bool(renormalize), float(routed_scaling_factor))
    idx = idx.to(torch.int32)
    s = n_out - k
    if s:
        idx = torch.cat([idx, torch.arange(e, e + s, dtype=torch.int32, device=idx.device).expand(t, s)], 1)
        w = torch.cat([w, torch.ones(t, s, dtype=w.dtype, device=w.device)], 1)
    if mask is not None:
        m = mask.bool().unsqueeze(1)
        idx = torch.where(m, idx, torch.full_like(idx, -1))
        w = torch.where(m, w, torch.zeros_like(w))
    return idx, w


def expert_counts(topk_idx, E):
    import torch
    flat = topk_idx.reshape(-1).long()
    flat = flat[(flat >= 0) & (flat < E)]
    return torch.bincount(flat, minlength=E)[:E].to(torch.int32)


def moe_mapping(topk_idx, E, alignment=1, R=None):
    """-> (expert_offsets[E + 1], counts[E], slot_of_row[R], row_of_slot[T, K]), all int32."""
    import torch
    t, kk = topk_idx.shape
    n, a, dev = t * kk, int(alignment), topk_idx.device
    r = padded_rows(t, kk, E, a) if R is None else int(R)
    flat = topk_idx.reshape(-1).long()
    valid = (flat >= 0) & (flat < E)
    counts = expert_counts(topk_idx, E).long()
    offsets = torch.zeros(E + 1, dtype=torch.long, device=dev)
    offsets[1:] = torch.cumsum((counts + a - 1) // a * a, 0)
    keys = torch.where(valid, flat, torch.full_like(flat, E))
    order = torch.sort(keys, stable=True).indices          # by expert, then ascending slot
    nv = int(valid.sum())
    order = order[:nv]
    e_sorted = keys[order]
    starts = torch.cumsum(counts, 0) - counts
    rows = offsets[e_sorted] + (torch.arange(nv, device=dev) - starts[e_sorted])
    row_of_slot = torch.full((n,), -1, dtype=torch.long, device=dev)
    row_of_slot[order] = rows
    slot_of_row = torch.full((r,), -1, dtype=torch.long, device=dev)
    slot_of_row[rows] = order
    i32 = torch.int32
    return offsets.to(i32), counts.to(i32), slot_of_row.to(i32), row_of_slot.view(t, kk).to(i32)


def _gather_rows(x, slot_of_row, k):
    import torch
    s = slot_of_row.long()
    ok = (s >= 0).unsqueeze(1)
    rows = x[(s.clamp_min(0) // k)] if x.shape[0] else x.new_zeros(s.shape[0], x.shape[1])
    return torch.where(ok, rows, torch.zeros_like(rows))


def moe_expand(x, row_of_slot, slot_of_row, expert_offsets, counts):
    """x[T, H] -> x_e[R, H]: x_e[r] = x[slot_of_row[r] // K], zero padding."""
    return _gather_rows(x, slot_of_row, row_of_slot.shape[1])


def _expand_fp8(x, x_scale, row_of_slot, slot_of_row):
    k = row_of_slot.shape[1]
    xe = _gather_rows(x.view(__import__("torch").uint8), slot_of_row, k).view(x.dtype)
    se = _gather_rows(x_scale.float(), slot_of_row, k)
    return xe, se


def moe_expand_fp8(x, x_scale, row_of_slot, slot_of_row, expert_offsets, counts):
    """x[T, H] e4m3, x_scale[T, H // 128] -> (x_e[R, H], s_e[R, H // 128]); padding rows zero."""
    return _expand_fp8(x, x_scale, row_of_slot, slot_of_row)


def moe_expand_fp8_colmajor(x, x_scale, row_of_slot, slot_of_row, expert_offsets, counts):
    """As moe_expand_fp8, s_e as the column-major buffer [H // 128, ceil(R / 4) * 4] (padding 0)."""
    xe, se = _expand_fp8(x, x_scale, row_of_slot, slot_of_row)
    r, g = se.shape
    out = se.new_zeros(g, (r + 3) // 4 * 4)
    out[:, :r] = se.t()
    return xe, out


def moe_combine(y_e, row_of_slot, topk_weights, shared=None):
    """-> out[T, H] bf16 = sum_j w[t, j] * y_e[row_of_slot[t, j]] (+ shared[t]), fp32 in slot order."""
    import torch
    t, k = row_of_slot.shape
    acc = torch.zeros(t, y_e.shape[1], dtype=torch.float32, device=y_e.device)
    for j in range(k):
        r = row_of_slot[:, j].long()
        ok = (r >= 0).unsqueeze(1)
        if y_e.shape[0]:
            y = y_e[r.clamp_min(0)].float()
        else:
            y = torch.zeros_like(acc)
        acc = torch.where(ok, acc + topk_weights[:, j:j + 1].float() * y, acc)
    if shared is not None:
        acc = acc + shared.float()
    return acc.to(y_e.dtype)
