"""MoE routing beside torch eager and torch.compile of the references.

Bytes per call (GB/s against the copy ceiling):
  gating     T*E*e (scores) + 4*E (bias) + 8*T*k (ids, weights)
  mapping    4*T*k (ids) + 4*T*k (row_of_slot) + 4*R (slot_of_row)
  expand     T*H*e (x, read once) + U*H*e (the U = expert_offsets[E] rows written), fp8 + scales
  combine    T*k*H*2 (the routed rows) + T*H*2 (out) + 8*T*k
Prefill sizes queue their calls behind a spin kernel (timing.queued_ms), peers too: events around
one call would also time the host's launch work, tens of µs on a slow VM against kernels of 2-500 µs.
Decode sizes (T = 1..64) are host-bound: per-call wall time of a loop against the eager reference.
"""
from __future__ import annotations

from .timing import Row, bandwidth_rows, compiled, host_us, need_torch, queued_ms, rotations, try_ms

V3 = dict(e=256, g=8, tg=4, k=8)      # DeepSeek-V3: sigmoid + bias, scaling 2.5


def _peers(eager, comp, sets):
    return {"eager": queued_ms(eager, sets), "torch.compile": comp and try_ms(comp, sets, queued_ms)}


def cases(quick, ceiling, progress):
    torch = need_torch()
    import tkreg
    from tkreg.reference import moe as ref
    ops = tkreg.ops
    BF16 = torch.bfloat16
    rows = []
    tokens = (4096, 16384)

    # ---- gating ----
    c_gl, c_tk = compiled(ref.group_limited_topk_gate), compiled(ref.topk_gate)
    for t in tokens:
        e, g, tg, k = V3["e"], V3["g"], V3["tg"], V3["k"]
        bias = torch.randn(e, device="cuda") * 0.1
        nbytes = t * e * 4 + 4 * e + 8 * t * k
        sets = rotations(lambda: (torch.randn(t, e, device="cuda"),), nbytes)
        ours = queued_ms(lambda s: ops.group_limited_topk_gate(s, k, g, tg, bias=bias, routed_scaling_factor=2.5), sets)
        peers = _peers(lambda s: ref.group_limited_topk_gate(s, bias, None, k, g, tg, 2, True, 2.5, k),
                       c_gl and (lambda s: c_gl(s, bias, None, k, g, tg, 2, True, 2.5, k)), sets)
        rows += bandwidth_rows("group_limited_topk_gate", f"T={t} E=256 g8/4 k=8 sigmoid+bias fp32", nbytes,
                               ceiling, ours, peers)
        e, k = 128, 8
        nbytes = t * e * 4 + 8 * t * k
        sets = rotations(lambda: (torch.randn(t, e, device="cuda"),), nbytes)
        ours = queued_ms(lambda s: ops.topk_gate(s, k, scoring="softmax", renormalize=True), sets)
        peers = _peers(lambda s: ref.topk_gate(s, None, k, 1, True), c_tk and (lambda s: c_tk(s, None, k, 1, True)), sets)
        rows += bandwidth_rows("topk_gate", f"T={t} E=128 k=8 softmax fp32", nbytes, ceiling, ours, peers)
        progress()

    # ---- mapping ----
    c_map = compiled(ref.moe_mapping)
    for t in tokens:
        e, k, a = 256, 8, 128
        r = ref.padded_rows(t, k, e, a)
        nbytes = 8 * t * k + 4 * r
        sets = rotations(lambda: (torch.rand(t, e, device="cuda").topk(k, -1).indices.to(torch.int32),), nbytes)
        ours = queued_ms(lambda i: ops.moe_mapping(i, e, a), sets)
        peers = _peers(lambda i: ref.moe_mapping(i, e, a), c_map and (lambda i: c_map(i, e, a)), sets)
        rows += bandwidth_rows("moe_mapping", f"T={t} k=8 E=256 align 128", nbytes, ceiling, ours, peers)
    progress()

    # ---- expand / combine ----
    c_ex, c_co = compiled(ref.moe_expand), compiled(ref.moe_combine)
    c_f8 = compiled(ref.moe_expand_fp8)
    shapes = [(16384, 7168)] + ([] if quick else [(4096, 7168), (16384, 4096)])
    for t, h in shapes:
        e, k, a = 256, 8, 128
        idx = torch.rand(t, e, device="cuda").topk(k, -1).indices.to(torch.int32)
        m = ops.moe_mapping(idx, e, a)
        used = int(m.expert_offsets[-1])
        margs = (m.row_of_slot, m.slot_of_row, m.expert_offsets, m.counts)
        nbytes = (t + used) * h * 2
        sets = rotations(lambda: (torch.randn(t, h, device="cuda").to(BF16),), nbytes)
        ours = queued_ms(lambda x: ops.moe_expand(x, m), sets)
        peers = _peers(lambda x: ref.moe_expand(x, *margs), c_ex and (lambda x: c_ex(x, *margs)), sets)
        rows += bandwidth_rows("moe_expand", f"T={t} H={h} k=8 E=256 bf16", nbytes, ceiling, ours, peers)

        for col in (False, True):
            nbytes = (t + used) * h + (t + used) * (h // 128) * 4
            sets = rotations(lambda: ops.per_token_group_quant_fp8(torch.randn(t, h, device="cuda").to(BF16),
                                                                   column_major_scales=col), nbytes)
            ours = queued_ms(lambda q, s: ops.moe_expand(q, m, scales=s), sets)
            peers = _peers(lambda q, s: ref.moe_expand_fp8(q, s, *margs),
                           c_f8 and (lambda q, s: c_f8(q, s, *margs)), sets)
            rows += bandwidth_rows("moe_expand", f"T={t} H={h} k=8 E=256 fp8 {'col' if col else 'row'}-scales",
                                   nbytes, ceiling, ours, peers)

        w = torch.rand(t, k, device="cuda")
        nbytes = t * k * h * 2 + t * h * 2 + 8 * t * k
        sets = rotations(lambda: (torch.randn(used, h, device="cuda").to(BF16),), nbytes)
        ours = queued_ms(lambda y: ops.moe_combine(y, m, w), sets)
        peers = _peers(lambda y: ref.moe_combine(y, m.row_of_slot, w),
                       c_co and (lambda y: c_co(y, m.row_of_slot, w)), sets)
        rows += bandwidth_rows("moe_combine", f"T={t} H={h} k=8 E=256", nbytes, ceiling, ours, peers)
        progress()

    # ---- decode: per-call wall time (host-bound), against eager ----
    for t in ([1, 64] if quick else [1, 8, 16, 64]):
        s = torch.randn(t, 256, device="cuda")
        bias = torch.randn(256, device="cuda")
        s128 = torch.randn(t, 128, device="cuda")
        idx = s.topk(8, -1).indices.to(torch.int32)
        for op, case, mine, peer in (
                ("group_limited_topk_gate", f"T={t} E=256 (per call, loop)",
                 lambda: ops.group_limited_topk_gate(s, 8, 8, 4, bias=bias, routed_scaling_factor=2.5),
                 lambda: ref.group_limited_topk_gate(s, bias, None, 8, 8, 4, 2, True, 2.5, 8)),
                ("topk_gate", f"T={t} E=128 softmax (per call, loop)",
                 lambda: ops.topk_gate(s128, 8, renormalize=True), lambda: ref.topk_gate(s128, None, 8, 1, True)),
                ("moe_mapping", f"T={t} k=8 E=256 align 128 (per call, loop)",
                 lambda: ops.moe_mapping(idx, 256, 128), lambda: ref.moe_mapping(idx, 256, 128))):
            ours = host_us(mine, 3000) / 1e3
            eager = host_us(peer, 500) / 1e3
            rows.append(Row(op, case, "tkreg", ours, vs={"eager": eager / ours}))
            rows.append(Row(op, case, "eager", eager))
        progress()
    return rows
