"""The training-step bench's time split by op (tkreg.bench.train_layer): each op of the layer
alone at the layer's shapes, forward + backward, tkreg beside the torch op a user would write
(F.linear / torch._grouped_mm: cuBLAS; the elementwise ops and the rotary under torch.compile;
SDPA with the cuDNN backend)."""
from __future__ import annotations

import sys

from .timing import gpu_ms


def fwd_bwd(torch, f, make):
    """A timed callable: f(*inputs) then the gradient of every floating input that requires it."""
    inputs = make()
    leaves = [t for t in inputs if getattr(t, "requires_grad", False)]
    y = f(*inputs)
    y = y[0] if isinstance(y, tuple) else y
    dy = torch.randn_like(y)

    def run():
        out = f(*inputs)
        out = out[0] if isinstance(out, tuple) else out
        torch.autograd.grad(out, leaves, dy)
    return run


def _timed(torch, f, make, reps):
    """fwd_bwd's median time, or None (with a note) if building or running it fails."""
    try:
        return gpu_ms(fwd_bwd(torch, f, make), [()], reps=reps)
    except Exception as e:  # noqa: BLE001
        print(f"tkreg bench: case skipped: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
        return None


def dense_cases(torch, c, t):
    import torch.nn.functional as F

    from .. import ops
    h, hq, hk, d, i = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c["inter"]
    bf = dict(device="cuda", dtype=torch.bfloat16)

    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, **bf) * scale).requires_grad_()

    from ..nn.attention import rope_cache
    cache = rope_cache(d, t, c["theta"], "cuda", torch.bfloat16)
    pos = torch.arange(t, device="cuda")
    half = d // 2
    cos, sin = cache[:, None, :half], cache[:, None, half:]

    def torch_rope(q, k):
        def r(x):
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).view(t, -1)
        return torch.cat((r(q.view(t, hq, d)), r(k.view(t, hk, d))), dim=1)

    def tk_rope(q, k):
        q, k = ops.rotary_embedding(pos, q * 1, k * 1, cache)
        return torch.cat((q, k), dim=1)

    def gemm(n, kk):
        return (lambda a, w: ops.gemm(a, w), lambda a, w: F.linear(a, w),
                lambda: [leaf(t, kk), leaf(n, kk, scale=kk ** -0.5)])

    def sdpa(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True, enable_gqa=True)

    comp = torch.compile
    return [
        ("rms_norm", lambda x, w: ops.rms_norm(x, w, c["eps"]), comp(lambda x, w: F.rms_norm(x, (h,), w, c["eps"])),
         lambda: [leaf(t, h), leaf(h)]),
        ("qkv GEMM", *gemm((hq + 2 * hk) * d, h)),
        ("rotary", tk_rope, comp(torch_rope), lambda: [leaf(t, hq * d), leaf(t, hk * d)]),
        ("attention", lambda q, k, v: ops.flash_attention(q, k, v, causal=True)[0], sdpa,
         lambda: [leaf(1, t, hq, d), leaf(1, t, hk, d), leaf(1, t, hk, d)]),
        ("o GEMM", *gemm(h, hq * d)),
        ("gate_up GEMM", *gemm(2 * i, h)),
        ("silu_and_mul", ops.silu_and_mul, comp(lambda x: F.silu(x[:, :i]) * x[:, i:]), lambda: [leaf(t, 2 * i)]),
        ("down GEMM", *gemm(h, i)),
    ]


def moe_cases(torch, c, t, layer):
    """The routed part's ops at the layer's routing (its weights, one random batch)."""
    import torch.nn.functional as F

    from .. import ops
    moe = layer.moe
    e, k = moe.num_experts, moe.top_k
    x = torch.randn(t, c["hidden"], device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        idx, w = moe.route(x)
    m = ops.moe_mapping(idx, e, alignment=128)
    flat = idx.flatten().long()
    order = flat.argsort(stable=True)
    tok = order // k
    offs = torch.bincount(flat, minlength=e).cumsum(0).to(torch.int32)
    rows_t, rows_k = t * k, m.slot_of_row.shape[0]

    def leaf(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16).requires_grad_()

    def weights(name):
        return getattr(moe, name).detach().clone().requires_grad_()

    def gg(name, kk):
        return (lambda a, b: ops.grouped_gemm(a, b, m.expert_offsets),
                lambda a, b: torch._grouped_mm(a[:rows_t], b.transpose(-2, -1), offs=offs),
                lambda: [leaf(rows_k, kk), weights(name)])

    wf = w.float().requires_grad_()
    return [
        ("expand", lambda a: ops.moe_expand(a, m), lambda a: a[tok], lambda: [leaf(t, c["hidden"])]),
        ("gate_up grouped GEMM", *gg("gate_up", c["hidden"])),
        ("silu_and_mul", ops.silu_and_mul, torch.compile(lambda a: F.silu(a[:, :c["inter"]]) * a[:, c["inter"]:]),
         lambda: [leaf(rows_k, 2 * c["inter"])]),
        ("down grouped GEMM", *gg("down", c["inter"])),
        ("combine", lambda y, ww: ops.moe_combine(y, m, ww),
         lambda y, ww: torch.zeros(t, c["hidden"], device="cuda").index_add(0, tok, y[:rows_t].float()
                                                                             * ww.flatten()[order, None]),
         lambda: [leaf(rows_k, c["hidden"]), wf]),
    ]


def by_op(torch, family, c, tokens, quick, log, layer=None) -> list:
    cases = dense_cases(torch, c, tokens) if family == "dense" else moe_cases(torch, c, tokens, layer)
    reps = 5 if quick else 20
    rows = []
    for name, ours, theirs, make in cases:
        tk, th = (_timed(torch, f, make, reps) for f in (ours, theirs))
        rows.append(dict(op=name, tkreg_ms=tk, torch_ms=th))
        log(f"  {family} {name}: tkreg {tk} ms, torch {th} ms")
    return rows
