"""MoE routing: top-k gating (plain and DeepSeek-V3 group-limited), the expert-major mapping,
expand (tokens -> expert-major rows) and combine (weighted sum back), expert counts.

Semantics (TileKernels', made deterministic; shared with tkreg/reference/moe.py):
  scoring (int code, tkreg.reference.moe.SCORINGS; the typed functions take names): 0 none,
    1 softmax over E (exp(x - max) / sum), 2 sigmoid 1 / (1 + exp(-x)), 3 sqrtsoftplus
    sqrt(x > 20 ? x : log1p(exp(x))); fp32 math, IEEE division, precise expf/log1pf/sqrtf (no
    fast math).
  selection key = score + bias[e] (bias shifts selection only); descending, ties -> lower index.
  group-limited: group score = sum of the group's top-2 keys; the topk_groups best groups
    (ties -> lower group) are kept, the others' keys become -inf; then top-k over all E.
  weights = the unbiased scores of the chosen experts; renormalize: w / max(sum_j w_j, 1e-20) with
    the sum in slot order; then * routed_scaling_factor.  Shared experts (group-limited only) are
    appended as ids E .. E+S-1 with weight 1; a token whose mask is False gets ids -1, weights 0.
  mapping: rows of expert e are expert_offsets[e] .. expert_offsets[e] + counts[e] - 1, in
    ascending token * k + slot (the same on every GPU), then -1 padding up to the aligned offset
    expert_offsets[e + 1]; R = T*k + min(E, T*k) * (alignment - 1) rows are allocated (the
    tight bound: only experts that got a token pad).  Ids outside [0, E) are skipped.
  expand: x_e[r] = x[slot_of_row[r] // k]; padding rows inside [0, expert_offsets[E]) are zero
    (scales too); rows past expert_offsets[E] are not written.
  combine: out[t] = bf16(sum_j w[t, j] * y_e[row_of_slot[t, j]] (+ shared[t])), fp32 products and
    sums rounded separately (no FMA), in slot order; rows of -1 are skipped.

Sizes served: E <= 512 (gate, mapping, counts), k <= 16 (gate; expand and combine read K <= 16
slots a token), expand's H % 8 == 0 (bf16) or H % 128 == 0 (fp8), combine's H % 8 == 0.
Thread-level kernels, no tensor cores; each module's docstring gives its layout:
  gate.py      topk_gate, group_limited_topk_gate
  mapping.py   moe_mapping
  expand.py    moe_expand, moe_expand_fp8, moe_expand_fp8_colmajor
  combine.py   moe_combine
  counts.py    expert_counts
  limits.py    the largest E and k served, the move kernels' CTA size
Tuning history: docs/moe-tuning.md.
"""
from .combine import SPECS as _COMBINE
from .counts import SPECS as _COUNTS
from .expand import SPECS as _EXPAND
from .gate import SPECS as _GATE
from .mapping import SPECS as _MAPPING

SPECS = _GATE + _MAPPING + _EXPAND + _COMBINE + _COUNTS
