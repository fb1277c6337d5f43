"""One training step (forward + backward) of a transformer layer through tkreg.nn, beside the same
layer in plain torch, both under torch.compile(fullgraph=True), with the same weights.

`python -m tkreg.bench.train_layer [--layer dense|moe|all] [--tokens 4096] [--fp8] [--flash] [--quick] [--json OUT]`

dense  Llama-3-8B's layer: H 4096, 32 query / 8 KV heads of 128, SwiGLU I 14336, causal, one
       sequence of T tokens.  x + attn(rms_norm(x)), then h + mlp(rms_norm(h)).
       tkreg: tkreg.nn.RMSNorm / Attention / SwiGLUMLP (tkreg.gemm + gradient GEMMs, rotary,
       flash attention forward and backward, silu_and_mul).  torch: F.rms_norm, F.linear, the
       rotary in torch ops, SDPA with the cuDNN backend (with --flash also the flash backend).
moe    DeepSeek-V3's MoE layer: H 7168, 256 experts top-8 (8 groups, 4 kept, sigmoid, scaling
       2.5), expert I 2048, one shared expert.  h + moe(rms_norm(h)).  tkreg: tkreg.nn.MoE
       (topk gate, expand, grouped GEMMs with grouped dgrad / k-grouped wgrad, combine).  torch:
       the routing in torch ops, an argsort permutation, torch._grouped_mm (its autograd), the
       weighted index_add back.
--fp8   the dense layer's four projections become tkreg.nn.Fp8Linear (DeepSeek-V3's recipe: FP8
        forward, dgrad and wgrad; the bf16 master weights shared), against the same bf16 torch
        layer; its error bar against fp32 is 1e-1 (e4m3 rounds in steps of 2^-4; 3-7e-2 seen on
        the CPU reference path at tiny sizes).  The MoE layer has no FP8
        path here (no FP8 grouped gradients yet).
Reported: the step time of each (CUDA-event medians, parameter .grad set to None before each
step), the speedup, and the time split by op (each op alone, forward + backward, tkreg beside
torch's compiled op).  Correctness: the output, the input gradient and every parameter gradient
of the tkreg layer against torch autograd of the same layer in fp32 (relative norm error; bar
1e-2).  The MoE check runs at 32 experts (fp32 copies of 256 experts' weights and gradients do
not fit beside the bf16 ones), with the tkreg layer's expert choices.
"""
from __future__ import annotations

import argparse
import contextlib

from .timing import gpu_ms, try_ms

DENSE = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=14336, eps=1e-5, theta=500000.0)
MOE = dict(hidden=7168, experts=256, inter=2048, k=8, groups=8, topk_groups=4, scaling=2.5, eps=1e-6)
CHECK_EXPERTS = 32
DENSE_CASE, MOE_CASE = "dense (Llama-3-8B layer)", "MoE (DeepSeek-V3 layer)"
BARS = {DENSE_CASE: 1.05, DENSE_CASE + " FP8": 1.05, MOE_CASE: 1.5}     # speedup over the best torch step
ERROR_BARS = {DENSE_CASE: 1e-2, DENSE_CASE + " FP8": 1e-1, MOE_CASE: 1e-2}   # FP8: e4m3 steps of 2^-4


def rel_err(a, b) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# ---- the layers --------------------------------------------------------------------------------
def fp8_projections(torch, layer):
    """Every tkreg.nn.Linear inside `layer` replaced by an Fp8Linear holding the same weight."""
    import tkreg.nn as tnn
    for parent in list(layer.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, tnn.Linear):
                new = tnn.Fp8Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                    device=child.weight.device)
                new.weight, new.bias = child.weight, child.bias
                setattr(parent, name, new)
    return layer


def dense_layer(torch, c, tokens, device="cuda"):
    """(tkreg module, torch function of (x, params), params) sharing one set of weights."""
    import tkreg.nn as tnn

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            h = c["hidden"]
            self.norm1, self.norm2 = (tnn.RMSNorm(h, c["eps"], device=device) for _ in range(2))
            self.attn = tnn.Attention(h, c["heads"], c["kv_heads"], c["head_dim"], rope_theta=c["theta"],
                                      max_positions=max(tokens, 1), device=device)
            self.mlp = tnn.SwiGLUMLP(h, c["inter"], device=device)

        def forward(self, x):
            h = x + self.attn(self.norm1(x))
            return h + self.mlp(self.norm2(h))

    layer = Layer()
    with torch.no_grad():
        for n in (layer.norm1, layer.norm2):
            n.weight.uniform_(0.5, 1.5)
    return layer, torch_dense(torch, c, layer.attn.cos_sin_cache)


def torch_dense(torch, c, cache):
    """The same layer in plain torch: f(x, params) with params named as the tkreg module's."""
    import torch.nn.functional as F
    hq, hk, d, eps = c["heads"], c["kv_heads"], c["head_dim"], c["eps"]
    half = d // 2

    def rope(x, cos, sin):
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def f(x, p):
        b, s, hidden = x.shape
        pos = torch.arange(s, device=x.device)
        cos, sin = cache[pos, None, :half].to(x.dtype), cache[pos, None, half:].to(x.dtype)
        a = F.rms_norm(x, (hidden,), p["norm1.weight"], eps)
        q, k, v = F.linear(a, p["attn.qkv.weight"]).split([hq * d, hk * d, hk * d], dim=-1)
        q = rope(q.view(b, s, hq, d), cos, sin).transpose(1, 2)
        k = rope(k.view(b, s, hk, d), cos, sin).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v.view(b, s, hk, d).transpose(1, 2), is_causal=True, enable_gqa=True)
        h = x + F.linear(o.transpose(1, 2).reshape(b, s, hq * d), p["attn.o.weight"])
        g, u = F.linear(F.rms_norm(h, (hidden,), p["norm2.weight"], eps), p["mlp.gate_up.weight"]).chunk(2, dim=-1)
        return h + F.linear(F.silu(g) * u, p["mlp.down.weight"])
    return f


def moe_layer(torch, c, experts, device="cuda"):
    import tkreg.nn as tnn

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = tnn.RMSNorm(c["hidden"], c["eps"], device=device)
            self.moe = tnn.MoE(c["hidden"], c["inter"], experts, c["k"], scoring="sigmoid",
                               routed_scaling_factor=c["scaling"], n_groups=c["groups"], topk_groups=c["topk_groups"],
                               shared_intermediate=c["inter"], device=device)

        def forward(self, x):
            return x + self.moe(self.norm(x))

    layer = Layer()
    with torch.no_grad():
        layer.moe.bias.uniform_(0, 0.1)
    return layer, torch_moe(torch, c, layer.moe)


def recording_choices(moe) -> dict:
    """Make `moe` record its last expert choices in the returned dict (key "idx")."""
    seen, route = {}, moe.route

    def recorded(x):
        idx, w = route(x)
        seen["idx"] = idx
        return idx, w
    moe.route = recorded
    return seen


def torch_moe(torch, c, moe, choices=None):
    """The best torch MoE we could write: the routing of tkreg.reference.moe, a stable argsort
    permutation, torch._grouped_mm (segments need no padding), weighted index_add back.
    choices: a recording_choices dict: take the tkreg layer's last choices (the fp32 check: a
    near-tie decided the other way would change which weights get gradients)."""
    import torch.nn.functional as F

    from ..reference import moe as ref
    k, E, eps = c["k"], moe.num_experts, c["eps"]

    def f(x, p):
        b, s, hidden = x.shape
        xn = F.rms_norm(x, (hidden,), p["norm.weight"], eps).view(b * s, hidden)
        logits = torch.matmul(xn.float(), p["moe.router"].float().t())
        if choices is None:
            with torch.no_grad():
                idx = ref.group_limited_topk_gate(logits, moe.bias, None, k, c["groups"], c["topk_groups"], 2,
                                                  True, 1.0, k)[0].long()
        else:
            idx = choices["idx"].long()
        w = torch.sigmoid(logits).gather(1, idx)
        w = w / w.sum(-1, keepdim=True) * c["scaling"]
        flat = idx.flatten()
        order = flat.argsort(stable=True)
        tok = order // k
        counts = torch.zeros(E, dtype=torch.int64, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
        offs = counts.cumsum(0).to(torch.int32)
        xs = xn[tok]
        if xs.dtype == torch.float32:      # the fp32 check: torch._grouped_mm is bf16 only
            h = torch.cat([xs[a:e] @ p["moe.gate_up"][i].t() for i, (a, e) in enumerate(zip([0] + offs.tolist(), offs.tolist()))])
        else:
            h = torch._grouped_mm(xs, p["moe.gate_up"].transpose(-2, -1), offs=offs)
        g, u = h.chunk(2, dim=-1)
        a = F.silu(g) * u
        if xs.dtype == torch.float32:
            y = torch.cat([a[s0:e] @ p["moe.down"][i].t() for i, (s0, e) in enumerate(zip([0] + offs.tolist(), offs.tolist()))])
        else:
            y = torch._grouped_mm(a, p["moe.down"].transpose(-2, -1), offs=offs)
        y = y.float() * w.flatten()[order, None]
        sg, su = F.linear(xn, p["moe.shared.gate_up.weight"]).chunk(2, dim=-1)
        shared = F.linear(F.silu(sg) * su, p["moe.shared.down.weight"])
        return x + shared.float().index_add(0, tok, y).to(x.dtype).view(b, s, hidden)
    return f


# ---- measuring ---------------------------------------------------------------------------------
def step(torch, f, params, x, dy):
    """One forward + backward: gradients of x and every parameter (fresh, never accumulated)."""
    xl = x.detach().requires_grad_()
    y = f(xl)
    return y, torch.autograd.grad(y, [xl, *params], dy)


def check(torch, ours, theirs32, params, x, dy) -> dict:
    """Relative errors of ours against theirs32 (fp32 math on fp32 copies of the weights)."""
    y, g = step(torch, ours, list(params.values()), x, dy)
    p32 = {n: t.detach().float().requires_grad_() for n, t in params.items()}
    y32, g32 = step(torch, lambda xl: theirs32(xl, p32), list(p32.values()), x.float(), dy.float())
    names = ["x"] + list(params)
    out = {"output": rel_err(y, y32)}
    out.update({f"grad {n}": rel_err(a, b) for n, a, b in zip(names, g, g32)})
    return out


def time_layer(torch, name, layer, torch_f, hidden, tokens, quick, log, sdpa_backends=()):
    """Step times: tkreg (compiled fullgraph) and torch (compiled fullgraph, per SDPA backend)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    params = dict(layer.named_parameters())
    x = torch.randn(1, tokens, hidden, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    reps = 5 if quick else 20
    ours_c = torch.compile(layer, fullgraph=True)
    ours = gpu_ms(lambda: step(torch, ours_c, params.values(), x, dy), [()], reps=reps, warmup=3)
    row = dict(case=name, tokens=tokens, tkreg_ms=ours)
    for backend in sdpa_backends or (None,):
        theirs_c = torch.compile(lambda xl: torch_f(xl, params), fullgraph=True)
        ctx = sdpa_kernel([getattr(SDPBackend, backend)]) if backend else contextlib.nullcontext()
        with ctx:
            ms = try_ms(lambda: step(torch, theirs_c, params.values(), x, dy), [()], reps=reps, warmup=3)
        label = f"torch.compile ({backend.lower().replace('_attention', '')} SDPA)" if backend else "torch.compile"
        row[label] = ms
        log(f"{name} T={tokens}: tkreg {ours:.2f} ms, {label} {ms if ms is None else round(ms, 2)} ms")
    return row


def run(torch, which, tokens, quick=False, log=print, fp8=False, flash=False) -> dict:
    from .train_ops import by_op
    out = dict(layers=[], errors={}, by_op={})
    if which in ("dense", "all"):
        layer, tf = dense_layer(torch, DENSE, tokens)
        if fp8:
            fp8_projections(torch, layer)
        params = dict(layer.named_parameters())
        x = torch.randn(1, tokens, DENSE["hidden"], device="cuda", dtype=torch.bfloat16)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel([SDPBackend.MATH]):
            out["errors"]["dense"] = check(torch, layer, tf, params, x, torch.randn_like(x))
        log(f"dense errors: {out['errors']['dense']}")
        out["layers"].append(time_layer(torch, DENSE_CASE + (" FP8" if fp8 else ""), layer, tf, DENSE["hidden"], tokens,
                                        quick, log, ("CUDNN_ATTENTION", "FLASH_ATTENTION") if flash else ("CUDNN_ATTENTION",)))
        if not fp8:
            out["by_op"]["dense"] = by_op(torch, "dense", DENSE, tokens, quick, log)
        del layer, params
    if which in ("moe", "all") and not fp8:
        small, _ = moe_layer(torch, MOE, CHECK_EXPERTS)
        params = dict(small.named_parameters())
        x = torch.randn(1, tokens, MOE["hidden"], device="cuda", dtype=torch.bfloat16)
        tf32 = torch_moe(torch, MOE, small.moe, choices=recording_choices(small.moe))
        out["errors"]["moe"] = check(torch, small, tf32, params, x, torch.randn_like(x))
        log(f"moe errors ({CHECK_EXPERTS} experts): {out['errors']['moe']}")
        del small, params
        layer, tf = moe_layer(torch, MOE, MOE["experts"])
        out["layers"].append(time_layer(torch, MOE_CASE, layer, tf, MOE["hidden"], tokens, quick, log))
        out["by_op"]["moe"] = by_op(torch, "moe", MOE, tokens, quick, log, layer=layer)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layer", choices=("dense", "moe", "all"), default="all")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--fp8", action="store_true", help="the dense layer's projections in FP8 (Fp8Linear)")
    p.add_argument("--flash", action="store_true", help="also time torch with SDPA's flash backend")
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--json", help="write the table here")
    a = p.parse_args(argv)
    a.module = "tkreg.bench.train_layer"
    from .timing import need_torch, result_table, write_json
    torch = need_torch()
    res = run(torch, a.layer, a.tokens, a.quick, fp8=a.fp8, flash=a.flash)
    rows = []
    for r in res["layers"]:
        peers = {k: v for k, v in r.items() if k.startswith("torch.compile") and v}
        best = min(peers.values()) if peers else None
        worst_err = max(res["errors"]["dense" if r["case"].startswith("dense") else "moe"].values())
        rows.append([r["case"], f"{r['tkreg_ms']:.2f}", " / ".join(f"{k}: {v:.2f}" for k, v in peers.items()),
                     f"**{best / r['tkreg_ms']:.2f}×**" if best else "n/a", f"{BARS[r['case']]}×",
                     f"{worst_err:.1e} (bar {ERROR_BARS[r['case']]:.0e})"])
    for fam, ops_ in res["by_op"].items():
        for o in ops_:
            tk, th = o["tkreg_ms"], o["torch_ms"]
            rows.append([f"  {fam}: {o['op']} (fwd + bwd)", f"{tk:.3f}" if tk else "failed", f"{th:.3f}" if th else "failed",
                         f"{th / tk:.2f}×" if tk and th else "n/a", "", ""])
    return write_json(result_table(
        f"Training step (forward + backward, T={a.tokens}) through tkreg.nn vs plain torch, both torch.compile(fullgraph=True)",
        a, torch, rows, ["layer", "tkreg ms", "torch ms", "speedup vs best torch", "bar",
                         "max rel. error vs fp32 (output, every grad)"],
        dict(tokens=a.tokens, raw=res["layers"], by_op=res["by_op"], errors=res["errors"])), a.json)


if __name__ == "__main__":
    main()
