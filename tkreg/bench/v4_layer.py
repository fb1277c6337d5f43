"""A DeepSeek-V4-style layer written twice with the same weights: plain torch (TileKernels' torch
semantics) under torch.compile against tkreg.blocks, forward (inference) and forward + backward.

`python -m tkreg.bench.v4_layer [--tokens 4096] [--hidden 4096] [--quick] [--json OUT]`

The layer, on a residual stream of m = 4 hyper-connections (residual [T, 4, H] bf16):
    x, (post, comb) = mhc_pre(residual, fn_a, scale_a, base_a)     norm_fn, split, Sinkhorn, pre mix
    residual = mhc_post(attention(rms_norm(x)), residual, post, comb)
    residual = engram_gate(residual, k, v, wh, we)                  k [T, 4, H], v [T, H]: embeddings
    x, (post, comb) = mhc_pre(residual, fn_m, scale_m, base_m)
    residual = mhc_post(mlp(rms_norm(x)), residual, post, comb)
attention: one packed qkv projection, causal attention over 32 heads of 128, o projection; mlp:
SwiGLU (gate/up one packed weight, I = 2H), down.  Projections are F.linear (cuBLAS) in both.
torch   F.rms_norm, SDPA, F.silu; mHC and engram as TileKernels' torch references compute them
        (fp32 math); the whole layer under torch.compile (AOTAutograd for the backward).
tkreg   tkreg.blocks (mhc_pre: the fused mhc_pre_big_fuse under no grad, the differentiable op
        chain otherwise; mhc_post; engram_gate), tkreg.ops.rms_norm and silu_and_mul (each with
        its backward kernel); attention: tkreg.ops.flash_attention in inference, SDPA in training
        (tkreg's attention has no backward kernel).
Reported: each layer time (CUDA-event medians of whole calls, `timing.gpu_ms`), the time split by
op (each op alone at the layer's shapes, forward and forward + backward, tkreg beside the
compiled reference of the same op), and the relative error of the tkreg layer's output and of
every gradient against torch autograd of the reference layer (eager).  Bar: error <= 1e-2 and
faster than torch.compile.
"""
from __future__ import annotations

import argparse
import time

from .timing import gpu_ms

V4 = dict(hidden=4096, mult=4, heads=32, head_dim=128, eps=1e-6, post_mult=2.0, pre_eps=1e-6, sinkhorn_eps=1e-6,
          repeat=10, clamp=1e-6, engram_eps=1e-20)
INPUTS = ("residual", "k", "v")


class Weights:
    """Random weights (scaled so activations stay O(1)) shared by both layers; bf16 projections,
    fp32 mHC parameters, bf16 engram and norm weights."""

    def __init__(self, torch, c, seed=0, device="cuda"):
        g = torch.Generator(device=device).manual_seed(seed)
        h, m, d, nh = c["hidden"], c["mult"], c["head_dim"], c["heads"]
        inter, rows = 2 * h, m * (m + 2)

        def rnd(*shape, scale=1.0, dtype=torch.bfloat16):
            return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)

        def near_one(*shape):
            return (1 + 0.1 * torch.randn(*shape, generator=g, device=device)).to(torch.bfloat16)
        self.p = dict(qkv=rnd(3 * nh * d, h, scale=h ** -0.5), o=rnd(h, nh * d, scale=0.25 * (nh * d) ** -0.5),
                      gate_up=rnd(2 * inter, h, scale=h ** -0.5), down=rnd(h, inter, scale=0.25 * inter ** -0.5),
                      attn_norm=near_one(h), mlp_norm=near_one(h), wh=near_one(m, h), we=near_one(m, h))
        for s in ("a", "m"):
            self.p[f"fn_{s}"] = rnd(rows, m * h, scale=(m * h) ** -0.5, dtype=torch.float32)
            self.p[f"scale_{s}"] = torch.tensor([0.5, 0.5, 1.0], device=device)
            self.p[f"base_{s}"] = rnd(rows, scale=0.1, dtype=torch.float32)

    def leaves(self):
        """Copies of every weight that require grad (the training case's parameters)."""
        return {k: v.detach().clone().requires_grad_() for k, v in self.p.items()}


def inputs(torch, c, t, seed=1, device="cuda"):
    g = torch.Generator(device=device).manual_seed(seed)
    m, h = c["mult"], c["hidden"]
    r = lambda *s: torch.randn(*s, generator=g, device=device).to(torch.bfloat16)  # noqa: E731
    return dict(residual=r(t, m, h), k=r(t, m, h), v=r(t, h))


# ---- the two implementations of each op ---------------------------------------------------------
def torch_ops(torch, c):
    """mHC and engram in plain torch with TileKernels' torch semantics (fp32 math, bf16 out)."""
    F, m = torch.nn.functional, c["mult"]

    def mhc_pre(residual, fn, scale, base):
        t, _, h = residual.shape
        r = residual.reshape(t, m * h).float()
        mixes = (r @ fn.t()) * torch.rsqrt(r.square().mean(-1, keepdim=True) + c["eps"])
        mixes = mixes * torch.cat([scale[0].expand(m), scale[1].expand(m), scale[2].expand(m * m)]) + base
        pre = torch.sigmoid(mixes[:, :m]) + c["pre_eps"]
        post = torch.sigmoid(mixes[:, m:2 * m]) * c["post_mult"]
        comb = mixes[:, 2 * m:].reshape(t, m, m).softmax(-1) + c["sinkhorn_eps"]
        comb = comb / (comb.sum(-2, keepdim=True) + c["sinkhorn_eps"])
        for _ in range(c["repeat"] - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + c["sinkhorn_eps"])
            comb = comb / (comb.sum(-2, keepdim=True) + c["sinkhorn_eps"])
        x = (residual.float() * pre[..., None]).sum(1).to(torch.bfloat16)
        return x, (post[..., None], comb)

    def mhc_post(x, residual, post, comb):
        mixed = torch.einsum("tmn,tmc->tnc", comb, residual.float())
        return (x.float()[:, None] * post + mixed).to(torch.bfloat16)

    def engram_gate(x, k, v, wh, we):
        h = x.shape[-1]
        xf, kf = x.float(), k.float()
        rx = torch.rsqrt(xf.square().mean(-1) + c["engram_eps"])
        rk = torch.rsqrt(kf.square().mean(-1) + c["engram_eps"])
        s = (xf * wh.float() * kf * we.float()).sum(-1) * rx * rk * h ** -0.5
        gate = torch.sigmoid(s.abs().clamp_min(c["clamp"]).sqrt() * s.sign())
        return (xf + gate[..., None] * v.float()[:, None]).to(torch.bfloat16)

    def norm(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, c["eps"])

    def swiglu(gu):
        g_, u_ = gu.chunk(2, -1)
        return F.silu(g_) * u_

    return dict(mhc_pre=mhc_pre, mhc_post=mhc_post, engram_gate=engram_gate, norm=norm, swiglu=swiglu,
                attention=sdpa(torch))


def sdpa(torch):
    def attention(q, k, v):          # [T, heads, d] each, one causal sequence
        a = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(0, 1)[None] for t in (q, k, v)),
                                                            is_causal=True)
        return a[0].transpose(0, 1)
    return attention


def tkreg_ops(torch, c):
    import tkreg.blocks as B
    import tkreg.ops as K
    torch_attention = sdpa(torch)
    kw = dict(norm_eps=c["eps"], mhc_mult=c["mult"], post_mult_value=c["post_mult"], pre_eps=c["pre_eps"],
              sinkhorn_eps=c["sinkhorn_eps"], sinkhorn_repeat=c["repeat"])

    def attention(q, k, v):
        if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
            return torch_attention(q, k, v)
        return K.flash_attention(q[None], k[None], v[None], causal=True)[0][0]

    return dict(mhc_pre=lambda r, fn, scale, base: B.mhc_pre(r, fn, scale, base, **kw), mhc_post=B.mhc_post,
                engram_gate=lambda x, k, v, wh, we: B.engram_gate(x, k, v, wh, we, c["clamp"], c["engram_eps"]),
                norm=lambda x, w: K.rms_norm(x, w, c["eps"]), swiglu=K.silu_and_mul, attention=attention)


# ---- the layer ----------------------------------------------------------------------------------
def sublayers(ops, c):
    """(attention sublayer, mlp sublayer): x [T, H], weights dict -> [T, H]."""
    import torch.nn.functional as F
    nh, d = c["heads"], c["head_dim"]

    def attention(x, p):
        q, k, v = F.linear(ops["norm"](x, p["attn_norm"]), p["qkv"]).view(x.shape[0], 3, nh, d).unbind(1)
        return F.linear(ops["attention"](q, k, v).reshape(x.shape[0], nh * d), p["o"])

    def mlp(x, p):
        return F.linear(ops["swiglu"](F.linear(ops["norm"](x, p["mlp_norm"]), p["gate_up"])), p["down"])

    return attention, mlp


def layer(ops, c):
    """f(residual, k, v, p) -> residual: the V4-style layer over the weights dict p."""
    attention, mlp = sublayers(ops, c)

    def f(residual, k, v, p):
        x, (post, comb) = ops["mhc_pre"](residual, p["fn_a"], p["scale_a"], p["base_a"])
        residual = ops["mhc_post"](attention(x, p), residual, post, comb)
        residual = ops["engram_gate"](residual, k, v, p["wh"], p["we"])
        x, (post, comb) = ops["mhc_pre"](residual, p["fn_m"], p["scale_m"], p["base_m"])
        return ops["mhc_post"](mlp(x, p), residual, post, comb)
    return f


def rel_err(a, b) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def errors(torch, f_ours, f_ref, W, x, grad):
    """Relative error of the output and of every gradient (inputs and weights), ours against ref;
    forward under no_grad too (tkreg's inference path)."""
    out = {}
    with torch.no_grad():
        out["output (inference)"] = rel_err(f_ours(*[x[n] for n in INPUTS], W.p), f_ref(*[x[n] for n in INPUTS], W.p))
    runs = []
    for f in (f_ours, f_ref):
        leaves = {n: x[n].clone().requires_grad_() for n in INPUTS}
        p = W.leaves()
        y = f(*leaves.values(), p)
        names = list(leaves) + list(p)
        gs = torch.autograd.grad(y, [*leaves.values(), *p.values()], grad, allow_unused=True)
        runs.append((y, dict(zip(names, gs))))
    out["output (training)"] = rel_err(runs[0][0], runs[1][0])
    for n, g in runs[1][1].items():
        if g is not None:
            out[f"grad {n}"] = rel_err(runs[0][1][n], g)
    return out


def train_step(torch, f, W, grad):
    """One forward + backward of f over fresh leaves (gradients returned, never accumulated)."""
    p = W.leaves()
    weights = list(p.values())

    def step(residual, k, v):
        leaves = [t.detach().requires_grad_() for t in (residual, k, v)]
        y = f(*leaves, p)
        return torch.autograd.grad(y, leaves + weights, grad)
    return step


# ---- timing -------------------------------------------------------------------------------------
def op_cases(torch, ours, theirs, W, x, c):
    """name -> (calls per layer, tkreg fn, reference fn, args, grads of the outputs): each op of
    the layer alone at the layer's shapes, its inputs those the layer gives it; every fn returns
    a tuple of outputs, each with its gradient (mhc_pre's post and comb too: their backward is
    part of the op's)."""
    p, (ta, tm), (oa, om) = W.p, sublayers(theirs, c), sublayers(ours, c)
    with torch.no_grad():
        xa, (post, comb) = theirs["mhc_pre"](x["residual"], p["fn_a"], p["scale_a"], p["base_a"])
    rnd = torch.randn_like

    def flat(pre):
        return lambda r, fn, s, b: (lambda o: (o[0], *o[1]))(pre(r, fn, s, b))

    def one(f):
        return lambda *a: (f(*a),)
    return {
        "mhc_pre": (2, flat(ours["mhc_pre"]), flat(theirs["mhc_pre"]),
                    (x["residual"], p["fn_a"], p["scale_a"], p["base_a"]), (rnd(xa), rnd(post), rnd(comb))),
        "mhc_post": (2, one(ours["mhc_post"]), one(theirs["mhc_post"]), (rnd(xa), x["residual"], post, comb),
                     (rnd(x["residual"]),)),
        "engram_gate": (1, one(ours["engram_gate"]), one(theirs["engram_gate"]),
                        (x["residual"], x["k"], x["v"], p["wh"], p["we"]), (rnd(x["residual"]),)),
        "attention sublayer": (1, one(lambda t: oa(t, p)), one(lambda t: ta(t, p)), (xa,), (rnd(xa),)),
        "mlp sublayer": (1, one(lambda t: om(t, p)), one(lambda t: tm(t, p)), (xa,), (rnd(xa),)),
    }


def time_ops(torch, cases, reps, log):
    """Forward (no grad) and forward + backward ms of each op, tkreg and the compiled reference."""
    from .timing import compiled
    rows = []
    for name, (calls, ours, ref, args, grad) in cases.items():
        comp = compiled(ref)
        row = dict(op=name, calls_per_layer=calls)
        for impl, f in (("tkreg", ours), ("torch_compile", comp)):
            with torch.no_grad():
                row[f"{impl}_fwd_ms"] = gpu_ms(f, [args], reps=reps, warmup=3)

            def fb(*a, f=f):
                leaves = [t.detach().requires_grad_() if t.is_floating_point() else t for t in a]
                out = f(*leaves)
                return torch.autograd.grad(out, [t for t in leaves if t.requires_grad], grad)
            row[f"{impl}_fwd_bwd_ms"] = gpu_ms(fb, [args], reps=reps, warmup=3)
        rows.append(row)
        log(f"  {name:20s} x{calls}  fwd tkreg {row['tkreg_fwd_ms']:7.3f} / compile {row['torch_compile_fwd_ms']:7.3f} ms"
            f"   fwd+bwd tkreg {row['tkreg_fwd_bwd_ms']:7.3f} / compile {row['torch_compile_fwd_bwd_ms']:7.3f} ms")
    return rows


def run(torch, c, t, quick=False, log=print, device="cuda"):
    """Every number of the bench at T = t: (layer rows, op rows, errors)."""
    from .timing import compiled
    W, x = Weights(torch, c, device=device), inputs(torch, c, t, device=device)
    ref = layer(torch_ops(torch, c), c)
    ours = layer(tkreg_ops(torch, c), c)
    grad = torch.randn_like(x["residual"]) * 0.1
    err = errors(torch, ours, ref, W, x, grad)
    log(f"T={t}: max relative error {max(err.values()):.2e} ({max(err, key=err.get)})")
    comp = compiled(ref)
    args = [tuple(x[n] for n in INPUTS)]
    reps = 5 if quick else 20
    layers = []
    t0 = time.perf_counter()
    with torch.no_grad():
        comp(*args[0], W.p)
    compile_s = time.perf_counter() - t0
    for case in ("inference (forward, no grad)", "training (forward + backward)"):
        if case.startswith("inference"):
            with torch.no_grad():
                ms = [gpu_ms(lambda *a, f=f: f(*a, W.p), args, reps=reps, warmup=3) for f in (ours, comp)]
        else:
            ms = [gpu_ms(train_step(torch, f, W, grad), args, reps=reps, warmup=3) for f in (ours, comp)]
        layers.append(dict(case=f"T={t} {case}", tkreg_ms=ms[0], torch_compile_ms=ms[1], speedup=ms[1] / ms[0]))
        log(f"{case:32s} tkreg {ms[0]:8.3f} ms  torch.compile {ms[1]:8.3f} ms  {ms[1] / ms[0]:5.2f}x")
    ops = time_ops(torch, op_cases(torch, tkreg_ops(torch, c), torch_ops(torch, c), W, x, c), reps, log)
    return layers, ops, dict(err, torch_compile_first_call_s=compile_s)


def by_op_rows(ops) -> list:
    """The layer's time split by op, as rows under the layer's (each op alone, `calls` a layer)."""
    rows = []
    for r in ops:
        for mode, key in (("forward", "fwd_ms"), ("forward + backward", "fwd_bwd_ms")):
            ours, theirs = r[f"tkreg_{key}"], r[f"torch_compile_{key}"]
            rows.append([f"· {r['op']} ×{r['calls_per_layer']}, {mode}", f"{ours:.3f}", f"{theirs:.3f}",
                         f"{theirs / ours:.2f}×", ""])
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=V4["hidden"])
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--json", help="write the table here")
    a = p.parse_args(argv)
    a.module = "tkreg.bench.v4_layer"
    from .timing import need_torch, result_table, write_json
    torch = need_torch()
    c = dict(V4, hidden=a.hidden)
    layers, ops, err = run(torch, c, a.tokens, a.quick)
    worst = max(v for k, v in err.items() if k.startswith(("output", "grad")))
    return write_json(result_table(
        f"DeepSeek-V4-style layer (mHC m={c['mult']} around attention and a SwiGLU MLP, plus engram), H={c['hidden']}: "
        "tkreg.blocks vs plain torch under torch.compile", a, torch,
        [[r["case"], f"{r['tkreg_ms']:.3f}", f"{r['torch_compile_ms']:.3f}", f"**{r['speedup']:.2f}×**", f"{worst:.1e}"]
         for r in layers] + by_op_rows(ops),
        ["case", "tkreg ms", "torch.compile ms", "tkreg speedup", "max rel. error (output, every gradient)"],
        dict(config=c, tokens=a.tokens, raw=layers, by_op=ops, errors=err,
             bar=dict(rel_err_max=1e-2, passed=worst <= 1e-2 and all(r["speedup"] > 1 for r in layers)))), a.json)


if __name__ == "__main__":
    main()
