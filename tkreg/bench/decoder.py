"""A decoder stack written as a user would, twice with the same weights: plain torch under
torch.compile (CUDA graphs for decode) against tkreg's ops (CUDA graphs for decode).

`python -m tkreg.bench.decoder [--layers 8] [--quick] [--fp8] [--json OUT]`

The stack is Qwen3-8B-shaped: hidden 4096, 32 query / 8 KV heads of 128, qk-norm, rotary (neox),
SwiGLU MLP 12288, bf16.  A layer:
    h = x + o_proj(attention(rope(q_norm(q)), rope(k_norm(k)), v))    qkv = one packed projection
    y = h + down(silu(gate(norm2(h))) * up(norm2(h)))                    gate/up = one packed weight
torch   F.rms_norm, F.linear (cuBLAS), rotary in bf16 as transformers writes it, SDPA over a
        contiguous KV cache [B, HK, L, D] written by index (prefill: enable_gqa; decode: each KV
        head's query heads as query rows, so no backend expands K/V); the whole stack under
        torch.compile.
tkreg   fused_add_rms_norm (the residual add folded into the next norm), gemm, qk_norm_rope_cache
        (qk-norm + rotary + the paged K/V write in one kernel, reading the qkv output in place),
        flash_attention (prefill) / paged_decode_attention (decode; pages of 64 tokens),
        gemm_swiglu where the wheel has it (else gemm + silu_and_mul).
--fp8    the tkreg stack on FP8 GEMMs (DeepSeek-V3's recipe, what `tkreg.kernelize(fp8=True)` runs):
        the four weights of a layer quantized once to e4m3 with 128 x 128 block scales,
        fp8_gemm on activations with 1 x 128 scales made by the kernel before each GEMM --
        (fused_add_)rms_norm_quant_fp8 before qkv and gate_up, silu_and_mul_quant_fp8 before
        down, per_token_group_quant_fp8 of the attention output before o_proj (a separate
        kernel).  The baseline stays the bf16 torch.compile stack; the error column is the FP8
        output's against it.
Cases: prefill 1 x 4096 and 4 x 2048 (a fresh cache), decode B = 1 / 32 / 128 with 4096 tokens of
context (one token a sequence).  Times are CUDA-event medians of whole stack calls; setup is
torch.compile's compile time or tkreg's graph capture for that shape.  Outputs of the two stacks
are compared (relative Frobenius error).
"""
from __future__ import annotations

import argparse
import time

from .timing import gpu_ms, result_table, write_json

QWEN3_8B = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=12288, eps=1e-6, theta=1e6)
PAGE = 64
CONTEXT = 4096
PREFILL = ((1, 4096), (4, 2048))
DECODE = (1, 32, 128)


def has_op(name: str) -> bool:
    import tkreg
    return any(o["op"] == name for o in tkreg.list_ops())


# The o / down projections write into the residual stream at a quarter of its scale, as in trained
# models, where each layer adds a small update (at gain 1 a random stack's every layer replaces
# its input, and each layer's rounding compounds at full weight).
RESIDUAL_GAIN = 0.25


class Weights:
    """Random weights (scaled so activations stay O(1)) shared by both stacks."""

    def __init__(self, torch, layers, c, seed=0, device="cuda"):
        g = torch.Generator(device=device).manual_seed(seed)
        h, d, i = c["hidden"], c["head_dim"], c["inter"]
        nqkv = (c["heads"] + 2 * c["kv_heads"]) * d

        def w(*shape, gain=1.0):
            t = torch.randn(*shape, generator=g, device=device, dtype=torch.float32)
            return (t * gain * shape[-1] ** -0.5).to(torch.bfloat16)

        def norm(n):
            return (1 + 0.1 * torch.randn(n, generator=g, device=device)).to(torch.bfloat16)
        self.layers = [dict(in_norm=norm(h), qkv=w(nqkv, h), q_norm=norm(d), k_norm=norm(d),
                            o=w(h, c["heads"] * d, gain=RESIDUAL_GAIN), post_norm=norm(h), gate_up=w(2 * i, h),
                            down=w(h, i, gain=RESIDUAL_GAIN))
                       for _ in range(layers)]
        inv = 1.0 / (c["theta"] ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
        f = torch.outer(torch.arange(CONTEXT + PAGE, device=device, dtype=torch.float32), inv)
        self.cos_sin = torch.cat((f.cos(), f.sin()), -1).to(torch.bfloat16)   # [P, D]: cos | sin


def torch_stack(torch, W, c):
    """The plain-torch stack: f(x[B, S, H], pos[B, S], kc, vc, start) -> x, with caches
    [layers, B, HK, L, D] written at start .. start + S - 1; prefill when S > 1 (causal), else
    decode over start + 1 tokens."""
    F = torch.nn.functional
    hq, hk, d, eps = c["heads"], c["kv_heads"], c["head_dim"], c["eps"]

    def rope(x, cos, sin):   # x [B, S, H, D]; cos/sin [B, S, 1, D]
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat((-x2, x1), -1) * sin

    def stack(x, pos, kc, vc, start: int):
        b, s, _ = x.shape
        cs = W.cos_sin[pos]                                       # [B, S, D]
        cos = torch.cat((cs[..., : d // 2],) * 2, -1)[:, :, None]
        sin = torch.cat((cs[..., d // 2:],) * 2, -1)[:, :, None]
        for li, L in enumerate(W.layers):
            r = x
            y = F.rms_norm(x, (x.shape[-1],), L["in_norm"], eps)
            qkv = F.linear(y, L["qkv"]).view(b, s, hq + 2 * hk, d)
            q = rope(F.rms_norm(qkv[:, :, :hq], (d,), L["q_norm"], eps), cos, sin)
            k = rope(F.rms_norm(qkv[:, :, hq:hq + hk], (d,), L["k_norm"], eps), cos, sin)
            v = qkv[:, :, hq + hk:]
            kc[li, :, :, start:start + s] = k.transpose(1, 2)
            vc[li, :, :, start:start + s] = v.transpose(1, 2)
            keys, vals = kc[li, :, :, :start + s], vc[li, :, :, :start + s]
            if s == 1:   # decode: a KV head's G query heads as G query rows (no GQA expansion of K/V)
                a = F.scaled_dot_product_attention(q.reshape(b, hk, hq // hk, d), keys, vals).reshape(b, hq, 1, d)
            else:
                a = F.scaled_dot_product_attention(q.transpose(1, 2), keys, vals, is_causal=True, enable_gqa=True)
            x = r + F.linear(a.transpose(1, 2).reshape(b, s, hq * d), L["o"])
            r = x
            gu = F.linear(F.rms_norm(x, (x.shape[-1],), L["post_norm"], eps), L["gate_up"])
            g_, u_ = gu.chunk(2, -1)
            x = r + F.linear(F.silu(g_) * u_, L["down"])
        return x
    return stack


FP8_OPS = ("tkreg.fp8_gemm", "tkreg.per_block_quant_fp8", "tkreg.per_token_group_quant_fp8",
           "tkreg.rms_norm_quant_fp8", "tkreg.fused_add_rms_norm_quant_fp8", "tkreg.silu_and_mul_quant_fp8")


def tkreg_stack(torch, W, c, swiglu: bool, fp8: bool = False):
    """The same stack on tkreg ops: f(x[T, H], pos[T], slots[T], pages, bt, lens, shape) -> x,
    the caches paged ([layers][NP, PAGE, HK, D]); `shape` = (B, S): prefill when S > 1.
    fp8: every projection on fp8_gemm (weights block-quantized here, once), the 1x128 activation
    scales made by the kernel that feeds each GEMM (the norms, silu_and_mul; the attention output
    by per_token_group_quant_fp8); attention and the residual stream stay bf16."""
    import tkreg.ops as K
    hq, hk, d, eps = c["heads"], c["kv_heads"], c["head_dim"], c["eps"]
    names = ("qkv", "o", "gate_up", "down")
    w8 = [{n: K.per_block_quant_fp8(L[n]) for n in names} if fp8 else None for L in W.layers]
    packed = [K.pack_gate_up(*L["gate_up"].chunk(2, 0)) if swiglu and not fp8 else None for L in W.layers]

    def linear(li, name, a):     # a: bf16 rows, or (e4m3 rows, scales) in fp8 mode
        return K.fp8_gemm(*a, *w8[li][name]) if fp8 else K.gemm(a, W.layers[li][name])

    def norm(x, res, w):         # (the next GEMM's input, residual); res None: the first layer's x
        if res is None:          # the residual is updated in place later: not the caller's x
            return (K.rms_norm_quant_fp8(x, w, eps) if fp8 else K.rms_norm(x, w, eps)), x.clone()
        if fp8:
            return K.fused_add_rms_norm_quant_fp8(x, res, w, eps), res
        return K.fused_add_rms_norm(x, res, w, eps)

    def stack(x, pos, slots, kp, vp, bt, lens, shape):
        b, s = shape
        t = x.shape[0]
        res = None
        for li, L in enumerate(W.layers):
            y, res = norm(x, res, L["in_norm"])
            q, k, v = linear(li, "qkv", y).view(t, hq + 2 * hk, d).split([hq, hk, hk], 1)
            q, k = K.qk_norm_rope_cache(q, k, v, pos, W.cos_sin, q_weight=L["q_norm"], k_weight=L["k_norm"],
                                        eps=eps, k_cache=kp[li], v_cache=vp[li], slot_mapping=slots)
            if s > 1:
                a, _ = K.flash_attention(q.view(b, s, hq, d), k.view(b, s, hk, d), v.view(b, s, hk, d), causal=True)
            else:
                a = K.paged_decode_attention(q, kp[li], vp[li], bt, lens)
            a = a.reshape(t, hq * d)
            x = linear(li, "o", K.per_token_group_quant_fp8(a) if fp8 else a)
            y, res = norm(x, res, L["post_norm"])
            if fp8:
                h = K.silu_and_mul_quant_fp8(linear(li, "gate_up", y))
            else:
                h = K.gemm_swiglu(y, packed[li]) if swiglu else K.silu_and_mul(linear(li, "gate_up", y))
            x = linear(li, "down", h)
        return x + res
    return stack


def graphed(torch, fn):
    """(replay, capture seconds) of fn captured in a CUDA graph after a warm-up on a side stream."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g.replay, time.perf_counter() - t0


def inputs(torch, W, c, b, s, ctx, device="cuda"):
    """One step's inputs for both stacks: torch's (x[B, S, H], pos, kc, vc, start) and tkreg's
    (x[T, H], pos[T], slots, pages, block table, lens, (B, S)), the two caches holding the same
    random context (ctx tokens; prefill: ctx = 0)."""
    hk, d, layers = c["kv_heads"], c["head_dim"], len(W.layers)
    g = torch.Generator(device=device).manual_seed(1)
    bf16 = torch.bfloat16
    x = torch.randn(b, s, c["hidden"], generator=g, device=device, dtype=bf16)
    pos = (ctx + torch.arange(s, device=device)).expand(b, s).contiguous()
    L = ctx + s
    cap = -(-L // PAGE) * PAGE
    kc = torch.randn(layers, b, hk, cap, d, generator=g, device=device, dtype=bf16)
    vc = torch.randn(layers, b, hk, cap, d, generator=g, device=device, dtype=bf16)
    mp = cap // PAGE    # pages a sequence; the paged cache holds the contiguous one's tokens
    kp = [kc[i].permute(0, 2, 1, 3).reshape(b * mp, PAGE, hk, d).contiguous() for i in range(layers)]
    vp = [vc[i].permute(0, 2, 1, 3).reshape(b * mp, PAGE, hk, d).contiguous() for i in range(layers)]
    bt = torch.arange(b * mp, device=device, dtype=torch.int32).view(b, mp)
    lens = torch.full((b,), L, device=device, dtype=torch.int32)
    slots = (torch.arange(b, device=device)[:, None] * cap + pos).reshape(-1)
    return (x, pos, kc, vc, ctx), (x.view(b * s, -1), pos.reshape(-1), slots, kp, vp, bt, lens, (b, s))


def run_case(torch, W, c, b, s, ctx, comp, tk, rows, log):
    """One (B, S) case: prefill (ctx = 0, S tokens) or decode (S = 1 after ctx tokens)."""
    torch_args, tkreg_args = inputs(torch, W, c, b, s, ctx)

    def ours():
        return tk(*tkreg_args)

    def theirs():
        return comp(*torch_args)
    t0 = time.perf_counter()
    ref = theirs()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    out = ours()
    err = float((out.float() - ref.view(b * s, -1).float()).norm() / ref.float().norm())
    case = f"prefill {b} x {s}" if s > 1 else f"decode B={b}, {ctx} context"
    if s == 1:
        their_fn, _ = graphed(torch, theirs)
        our_fn, capture_s = graphed(torch, ours)
    else:
        their_fn, our_fn, capture_s = theirs, ours, 0.0
    t_ours, t_theirs = gpu_ms(our_fn, [()], reps=20, warmup=3), gpu_ms(their_fn, [()], reps=20, warmup=3)
    tokens = b * s
    rows.append(dict(case=case, tkreg_ms=t_ours, torch_compile_ms=t_theirs, speedup=t_theirs / t_ours,
                     tkreg_tok_s=tokens / t_ours * 1e3, torch_tok_s=tokens / t_theirs * 1e3, rel_err=err,
                     torch_compile_s=compile_s, tkreg_capture_s=capture_s))
    log(f"{case:32s} tkreg {t_ours:8.3f} ms  torch.compile {t_theirs:8.3f} ms  {t_theirs / t_ours:5.2f}x  "
        f"err {err:.1e}  compile {compile_s:5.1f} s  capture {capture_s:4.2f} s")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="prefill 1 x 4096 and decode B = 1 only")
    p.add_argument("--no-swiglu", action="store_true", help="gemm + silu_and_mul even if gemm_swiglu ships")
    p.add_argument("--fp8", action="store_true", help="the tkreg stack on FP8 GEMMs (block-scaled weights "
                   "quantized once); baseline and error reference: the bf16 torch.compile stack")
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args(argv)
    a.module = "tkreg.bench.decoder"
    import torch
    import tkreg
    c = dict(QWEN3_8B)
    W = Weights(torch, a.layers, c)
    swiglu = not a.no_swiglu and not a.fp8 and has_op("tkreg.gemm_swiglu")
    missing = [o for o in FP8_OPS if a.fp8 and not has_op(o)]
    if missing:
        raise SystemExit(f"--fp8: the installed tkreg has no {', '.join(missing)}")
    comp = torch.compile(torch_stack(torch, W, c), dynamic=False)
    tk = tkreg_stack(torch, W, c, swiglu, a.fp8)
    rows = []
    with torch.no_grad():
        for b, s in PREFILL[:1] if a.quick else PREFILL:
            run_case(torch, W, c, b, s, 0, comp, tk, rows, print)
        for b in DECODE[:1] if a.quick else DECODE:
            run_case(torch, W, c, b, 1, CONTEXT, comp, tk, rows, print)
    table = result_table(
        f"Qwen3-8B-shaped {a.layers}-layer decoder stack: tkreg ops{' with FP8 GEMMs' if a.fp8 else ''} vs plain "
        "torch (bf16) under torch.compile", a, torch,
        [[r["case"], f"{r['tkreg_tok_s']:,.0f}", f"{r['torch_tok_s']:,.0f}", f"**{r['speedup']:.2f}×**",
          f"{r['rel_err']:.1e}", f"{r['torch_compile_s']:.1f} s compile", f"{r['tkreg_capture_s']:.2f} s capture"]
         for r in rows],
        ["case", "tkreg FP8 tok/s" if a.fp8 else "tkreg tok/s", "torch.compile tok/s", "tkreg speedup",
         "rel. error vs bf16 torch" if a.fp8 else "rel. error", "torch.compile setup", "tkreg setup"],
        dict(layers=a.layers, gemm_swiglu=swiglu, fp8=a.fp8, config=c, raw=rows))
    return write_json(table, a.json)


if __name__ == "__main__":
    main()
