"""A DeepSeek-V3 MoE layer built from tkreg ops, beside the best torch layer.

The layer: hidden H = 7168, E = 256 routed experts, top-8 of them by DeepSeek-V3's group-limited
rule (8 groups, 4 kept, sigmoid + bias, routed scaling 2.5), expert intermediate I = 2048 (SwiGLU:
gate_up [2I, H], down [H, I]), plus one shared expert.  The router's logits are one torch.matmul
(x @ w_gate^T) in every implementation.

tkreg   group_limited_topk_gate -> moe_mapping (128-row segments) -> moe_expand -> grouped_gemm
        (gate_up) -> silu_and_mul -> grouped_gemm (down) -> moe_combine, which adds the shared
        expert (tkreg.gemm, silu_and_mul, tkreg.gemm).  FP8: per_token_group_quant_fp8 before the
        expand, fp8_grouped_gemm with 128x128 block-scaled weights, silu_and_mul_quant_fp8 between
        the GEMMs; the shared expert through fp8_gemm.
torch   the routing of tkreg.reference.moe under torch.compile, a stable argsort permutation,
        torch._grouped_mm (bf16; FP8: torch._scaled_grouped_mm with rowwise scales where the
        installed torch has it), the weighting and the index_add_ back under torch.compile.
loop    the straightforward layer: a Python loop over experts (the correctness oracle; FP8: the
        same activation quantization, through tkreg.reference.quant, and the dequantized weights).
"""
from __future__ import annotations

from .timing import Row, gpu_ms, need_torch, try_ms

V3 = dict(hidden=7168, experts=256, inter=2048, k=8, groups=8, topk_groups=4, scaling=2.5)
ALIGN = 128


def make_weights(torch, hidden, experts, inter, fp8=False, seed=0):
    """Random layer weights (scaled so activations stay O(1)); FP8 adds block-quantized copies."""
    import tkreg
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(*shape, fan_in):
        return (torch.randn(*shape, device="cuda", generator=g) * fan_in ** -0.5).to(torch.bfloat16)
    w = dict(gate=rnd(experts, hidden, fan_in=hidden), bias=torch.rand(experts, device="cuda", generator=g) * 0.1,
             w13=rnd(experts, 2 * inter, hidden, fan_in=hidden), w2=rnd(experts, hidden, inter, fan_in=inter),
             s13=rnd(2 * inter, hidden, fan_in=hidden), s2=rnd(hidden, inter, fan_in=inter))
    if fp8:
        def blocks(t):   # expert by expert: E x N x K elements exceed the op's int32 indexing
            qs = [tkreg.ops.per_block_quant_fp8(m) for m in (t if t.dim() == 3 else t[None])]
            q, s = torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])
            return (q, s) if t.dim() == 3 else (q[0], s[0])
        for name in ("w13", "w2", "s13", "s2"):
            w[name + "_q"], w[name + "_s"] = blocks(w[name])
    return w


def _route(torch, x, w, cfg, gate):
    logits = torch.matmul(x, w["gate"].t()).float()
    return gate(logits, cfg["k"], cfg["groups"], cfg["topk_groups"], bias=w["bias"], routed_scaling_factor=cfg["scaling"])


def tkreg_stages(w, cfg, fp8=False):
    """The tkreg layer as named stages over a state dict (the benchmark times each one alone)."""
    import torch

    import tkreg
    ops, E = tkreg.ops, cfg["experts"]

    def gate(s):
        s["idx"], s["wts"] = _route(torch, s["x"], w, cfg, ops.group_limited_topk_gate)

    def mapping(s):
        s["map"] = ops.moe_mapping(s["idx"], E, ALIGN)

    def quant(s):
        s["q"], s["qs"] = ops.per_token_group_quant_fp8(s["x"])

    def shared(s):
        if fp8:
            q, sc = ops.silu_and_mul_quant_fp8(ops.fp8_gemm(s["q"], s["qs"], w["s13_q"], w["s13_s"]))
            s["shared"] = ops.fp8_gemm(q, sc, w["s2_q"], w["s2_s"])
        else:
            s["shared"] = ops.gemm(ops.silu_and_mul(ops.gemm(s["x"], w["s13"])), w["s2"])

    def expand(s):
        if fp8:
            s["xe"], s["se"] = ops.moe_expand(s["q"], s["map"], scales=s["qs"])
        else:
            s["xe"] = ops.moe_expand(s["x"], s["map"])

    def gate_up(s):
        offs = s["map"].expert_offsets
        s["h"] = (ops.fp8_grouped_gemm(s["xe"], s["se"], w["w13_q"], w["w13_s"], offs) if fp8
                  else ops.grouped_gemm(s["xe"], w["w13"], offs))

    def act(s):
        if fp8:
            s["a"], s["as"] = ops.silu_and_mul_quant_fp8(s["h"])
        else:
            s["a"] = ops.silu_and_mul(s["h"])

    def down(s):
        offs = s["map"].expert_offsets
        s["y"] = (ops.fp8_grouped_gemm(s["a"], s["as"], w["w2_q"], w["w2_s"], offs) if fp8
                  else ops.grouped_gemm(s["a"], w["w2"], offs))

    def combine(s):
        s["out"] = ops.moe_combine(s["y"], s["map"], s["wts"], shared=s["shared"])

    return ([("gate", gate), ("mapping", mapping)] + ([("quant x", quant)] if fp8 else [])
            + [("shared expert", shared), ("expand", expand), ("gate_up GEMM", gate_up), ("activation", act),
               ("down GEMM", down), ("combine", combine)])


def tkreg_layer(x, w, cfg=V3, fp8=False):
    s = {"x": x}
    for _, stage in tkreg_stages(w, cfg, fp8):
        stage(s)
    return s["out"]


def torch_layer(w, cfg=V3, fp8=False):
    """The best torch layer we could write: compiled routing and glue around torch._grouped_mm.
    FP8 adds torch's rowwise-quantized expert weights to `w` (`w13_rq`, `w13_rs`, ...)."""
    import torch
    import torch.nn.functional as F

    from ..reference import moe as ref
    E, k = cfg["experts"], cfg["k"]

    def gate(logits, k, g, tg, bias, routed_scaling_factor):
        return ref.group_limited_topk_gate(logits, bias, None, k, g, tg, 2, True, routed_scaling_factor, k)

    @torch.compile(dynamic=False)
    def permute(idx):
        flat = idx.flatten().long()
        order = flat.argsort(stable=True)
        counts = torch.zeros(E, dtype=torch.int64, device=idx.device).scatter_add_(0, flat, torch.ones_like(flat))
        return order, order // k, counts.cumsum(0).to(torch.int32)

    @torch.compile(dynamic=False)
    def silu_mul(h):
        a, b = h.chunk(2, dim=-1)
        return F.silu(a.float()).mul(b.float()).to(torch.bfloat16)

    @torch.compile(dynamic=False)
    def rowwise(t):
        s = t.abs().amax(-1, keepdim=True).float().clamp_min(1e-12) / 448.0
        return (t.float() / s).to(torch.float8_e4m3fn), s.squeeze(-1)

    @torch.compile(dynamic=False)
    def finish(y, wts, order, tok, shared):
        y = y.float() * wts.flatten()[order, None]
        return shared.float().index_add_(0, tok, y).to(torch.bfloat16)

    def gmm(a, which, offs):
        if not fp8:
            return torch._grouped_mm(a, w[which].transpose(-2, -1), offs=offs)
        qa, sa = rowwise(a)
        qb, sb = w[which + "_rq"], w[which + "_rs"]
        return torch._scaled_grouped_mm(qa, qb.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16)

    if fp8:
        for name in ("w13", "w2"):
            w[name + "_rq"], w[name + "_rs"] = rowwise(w[name])

    def layer(x):
        idx, wts = _route(torch, x, w, cfg, compiled_gate)
        order, tok, offs = permute(idx)
        h = gmm(x[tok], "w13", offs)
        y = gmm(silu_mul(h), "w2", offs)
        shared = torch.matmul(silu_mul(torch.matmul(x, w["s13"].t())), w["s2"].t())
        return finish(y, wts, order, tok, shared)

    compiled_gate = torch.compile(gate, dynamic=False)
    return layer


def loop_layer(x, w, cfg=V3, fp8=False):
    """The straightforward layer, expert by expert, fp32 accumulation (the test oracle)."""
    import torch

    from ..reference import activation as act
    from ..reference import quant as r8
    from ..reference import moe as ref

    def quant(t):  # the FP8 layer's activation rounding: 1x128 groups, e4m3
        return r8.dequant_groups(*r8.per_token_group_quant_fp8(t)).to(torch.float32) if fp8 else t.float()

    def weight(name):
        return r8.dequant_blocks(w[name + "_q"], w[name + "_s"]).float() if fp8 else w[name].float()

    def expert(t, w13, w2):   # rounding where the tkreg layer rounds: bf16 GEMM outputs, fused quant
        h = (quant(t) @ w13.t()).to(torch.bfloat16)
        a = r8.dequant_groups(*r8.silu_and_mul_quant_fp8(h)) if fp8 else act.silu_and_mul(h)
        return a.float() @ w2.t()

    def gate(logits, k, g, tg, bias, routed_scaling_factor):
        return ref.group_limited_topk_gate(logits, bias, None, k, g, tg, 2, True, routed_scaling_factor, k)

    idx, wts = _route(torch, x, w, cfg, gate)
    out = expert(x, weight("s13"), weight("s2")).to(torch.bfloat16).float()
    w13 = w["w13_q"] if fp8 else w["w13"]
    for e in range(cfg["experts"]):
        tok, slot = (idx == e).nonzero(as_tuple=True)
        if tok.numel():
            w13e = r8.dequant_blocks(w13[e], w["w13_s"][e]).float() if fp8 else w13[e].float()
            w2e = r8.dequant_blocks(w["w2_q"][e], w["w2_s"][e]).float() if fp8 else w["w2"][e].float()
            y = expert(x[tok], w13e, w2e).to(torch.bfloat16).float()
            out.index_add_(0, tok, y * wts[tok, slot, None])
    return out.to(torch.bfloat16)


def layer_flops(t, cfg=V3) -> float:
    """Useful FLOPs: the routed rows' and the shared expert's GEMMs (not the padding)."""
    h, i = cfg["hidden"], cfg["inter"]
    return 2.0 * t * (cfg["k"] + 1) * (h * 2 * i + i * h)


def cases(quick, ceiling, progress):
    torch = need_torch()
    rows = []
    for fp8 in (False, True):
        w = make_weights(torch, V3["hidden"], V3["experts"], V3["inter"], fp8)
        layers = {"torch (compiled routing + _grouped_mm)": torch_layer(w, V3, False)}
        if fp8:   # torch's FP8 grouped GEMM takes rowwise scales only
            layers = {"torch FP8 (rowwise _scaled_grouped_mm)": torch_layer(w, V3, True), **layers}
        for t in (4096,) if quick else (4096, 16384):
            dt = "FP8" if fp8 else "bf16"
            sets = [(torch.randn(t, V3["hidden"], device="cuda").to(torch.bfloat16),) for _ in range(2)]
            flops = layer_flops(t)
            ours = gpu_ms(lambda x: tkreg_layer(x, w, V3, fp8), sets, reps=10, warmup=3)
            peers = {k: try_ms(f, sets, reps=10, warmup=3) for k, f in layers.items()}
            peers = {k: v for k, v in peers.items() if v}
            case = f"DeepSeek-V3 T={t} {dt}"
            rows.append(Row("moe_layer", case, "tkreg", ours, flops / ours / 1e9, "TFLOP/s", 0.0,
                            {k: v / ours for k, v in peers.items()}))
            rows += [Row("moe_layer", case, k, v, flops / v / 1e9, "TFLOP/s") for k, v in peers.items()]
            # The layer's time split by op: each stage timed alone on the state a full run left.
            state = {"x": sets[0][0]}
            stages = tkreg_stages(w, V3, fp8)
            for _, stage in stages:
                stage(state)
            for name, stage in stages:
                ms = gpu_ms(lambda: stage(dict(state)), [()], reps=10, warmup=2)
                rows.append(Row("moe_layer", f"{case} · {name}", "tkreg", ms, 100 * ms / ours, "% of layer"))
            del sets, state
            torch.cuda.empty_cache()
            progress()
        del w, layers
        torch.cuda.empty_cache()
    return rows
