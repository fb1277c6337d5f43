"""transformers models on tkreg (`tkreg.kernelize`) beside stock transformers, same GPU, same process.

`python -m tkreg.bench.models [--family dense|moe] [--layers 8] [--quick] [--json OUT]`

Models are built from configs with random weights (no download), bf16, on the GPU:
  dense  Qwen3-8B-shaped slice: hidden 4096, 32 / 8 heads of 128, qk-norm, MLP 12288, vocab 151936
  moe    Qwen3-30B-A3B-shaped slice: hidden 2048, 32 / 4 heads of 128, 128 experts top-8 of 768
Three ways to run each:
  stock eager      attn_implementation="sdpa", DynamicCache: what most users run
  stock compiled   prefill: torch.compile(model); decode: StaticCache + torch.compile(forward,
                   mode="reduce-overhead", fullgraph=True), i.e. CUDA graphs: transformers' fastest path
  tkreg            tkreg.kernelize(model); prefill eager; decode through TkregPagedCache with one
                   CUDA graph a step (capture_decode): tkreg's documented best mode
Cases: prefill 1 x 4096 and 8 x 2048 tokens (dense; moe: 1 x 4096), no cache, logits of the last
token only (as generate asks); decode one token a sequence for B = 1 / 32 / 128 (moe: 64) after
4096 tokens of context (the caches are filled with random K/V, the same context for every way).
Times are CUDA-event medians; tok/s counts the tokens a call processes.  Setup: compile time
(stock compiled) or graph capture (tkreg) for that shape.  The prefill logits of tkreg are
compared with stock eager's (relative Frobenius error).
"""
from __future__ import annotations

import argparse
import json
import time

from .timing import gpu_ms, result_table, write_json

DENSE = dict(hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
             vocab_size=151936, rope_theta=1e6, max_position_embeddings=40960, tie_word_embeddings=False)
MOE = dict(hidden_size=2048, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
           num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936, rope_theta=1e6,
           max_position_embeddings=40960, tie_word_embeddings=False, intermediate_size=6144)
CONTEXT = 4096


def build(torch, family, layers):
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig
    cfg = (Qwen3Config(**DENSE) if family == "dense" else Qwen3MoeConfig(**MOE))
    cfg.num_hidden_layers = layers
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    for p in model.parameters():      # init's std 0.02 makes activations vanish: scale to O(1)
        if p.dim() >= 2:
            p.data.normal_(0, p.shape[-1] ** -0.5)
    return model.eval(), cfg


def prefill_case(torch, model, b, s, runs, compiled):
    ids = torch.randint(0, model.config.vocab_size, (b, s), device="cuda")

    def call(m):
        return lambda: m(input_ids=ids, use_cache=False, logits_to_keep=1).logits
    eager = call(model)
    ref = eager().float()
    runs["stock eager"] = (gpu_ms(eager, [()], reps=10), 0.0)

    def comp():
        t0 = time.perf_counter()
        fn = call(compiled)
        fn()
        torch.cuda.synchronize()
        setup = time.perf_counter() - t0
        return gpu_ms(fn, [()], reps=10), setup
    guarded(runs, "stock compiled", comp)
    return ids, ref


def fill(torch, cache, cfg, b, layers, ctx, kind):
    """ctx tokens of random K/V in every layer of `cache` (a DynamicCache, StaticCache or TkregPagedCache)."""
    hk, d = cfg.num_key_value_heads, cfg.head_dim
    g = torch.Generator(device="cuda").manual_seed(2)
    for i in range(layers):
        k = torch.randn(b, hk, ctx, d, generator=g, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, hk, ctx, d, generator=g, device="cuda", dtype=torch.bfloat16)
        if kind == "tkreg":
            mp, ps = cache.pages_per_seq, cache.page_size
            pages = k.new_zeros(b, mp * ps, hk, d)
            pages[:, :ctx] = k.transpose(1, 2)
            cache.k[i][: b * mp].copy_(pages.view(b * mp, ps, hk, d))
            pages[:, :ctx] = v.transpose(1, 2)
            cache.v[i][: b * mp].copy_(pages.view(b * mp, ps, hk, d))
        else:
            cache.update(k, v, i)
    if kind == "tkreg":
        cache.seq_lens.fill_(ctx)
        cache.seen = ctx


def decode_case(torch, model, cfg, b, layers, kind, compile_fn=None):
    """(ms a step, setup s) of one decode token per sequence after CONTEXT tokens."""
    from transformers.cache_utils import DynamicCache, StaticCache
    ids = torch.randint(0, cfg.vocab_size, (b, 1), device="cuda")
    pos = torch.full((b, 1), CONTEXT, device="cuda", dtype=torch.long)
    if kind == "tkreg":
        from tkreg.integrations.transformers import TkregPagedCache, capture_decode
        cache = TkregPagedCache(cfg, CONTEXT + 64, page_size=64, batch_size=b, dtype=torch.bfloat16, device="cuda")
        fill(torch, cache, cfg, b, layers, CONTEXT, kind)
        t0 = time.perf_counter()
        graph = capture_decode(model, cache)
        setup = time.perf_counter() - t0
        ms = gpu_ms(lambda: graph.step(ids, pos), [()], reps=20)
        return ms, setup
    cache = DynamicCache(config=cfg) if kind == "eager" else StaticCache(config=cfg, max_cache_len=CONTEXT + 64)
    fill(torch, cache, cfg, b, layers, CONTEXT, kind)
    fwd = model if compile_fn is None else compile_fn
    step = [CONTEXT]

    def call():
        p = torch.full((b, 1), step[0], device="cuda", dtype=torch.long)
        step[0] += 1
        return fwd(input_ids=ids, position_ids=p, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
    t0 = time.perf_counter()
    for _ in range(3):      # compile, record the CUDA graph, replay
        call()
    torch.cuda.synchronize()
    setup = time.perf_counter() - t0 if compile_fn is not None else 0.0
    return gpu_ms(call, [()], reps=20, warmup=2), setup


def guarded(runs, name, fn):
    """runs[name] = fn() = (ms, setup s), or (nan, 0) with the error printed: one failing way
    must not end the benchmark."""
    try:
        runs[name] = fn()
    except Exception as e:  # noqa: BLE001
        print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
        runs[name] = (float("nan"), 0.0)
        runs.setdefault("failed", []).append(f"{name}: {type(e).__name__}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", choices=("dense", "moe"), default="dense")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json")
    a = p.parse_args(argv)
    a.module = "tkreg.bench.models"
    import torch

    import tkreg
    import tkreg.integrations.transformers  # noqa: F401  (registers the "tkreg" attention)
    model, cfg = build(torch, a.family, a.layers)
    prefill = [(1, 4096)] + ([] if a.quick or a.family == "moe" else [(8, 2048)])
    decode = [64] if a.family == "moe" else ([1] if a.quick else [1, 32, 128])
    results, refs = [], {}
    with torch.no_grad():
        comp = torch.compile(model)
        for b, s in prefill:
            runs = {}
            ids, refs[(b, s)] = prefill_case(torch, model, b, s, runs, comp)
            results.append((f"prefill {b} x {s}", b * s, runs, ids))
        for b in decode:
            runs = {}
            guarded(runs, "stock eager", lambda: decode_case(torch, model, cfg, b, a.layers, "eager"))
            torch.cuda.empty_cache()
            torch._dynamo.reset()
            fwd = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
            guarded(runs, "stock compiled", lambda: decode_case(torch, model, cfg, b, a.layers, "static", fwd))
            del fwd
            torch._dynamo.reset()
            torch.cuda.empty_cache()
            results.append((f"decode B={b}, {CONTEXT} context", b, runs, None))
            print(results[-1][:3], flush=True)
        tkreg.kernelize(model)
        print(model.tkreg_report, flush=True)
        for case, tokens, runs, ids in results:
            if ids is not None:
                out = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits.float()
                ref = refs[tuple(ids.shape)]
                runs["err"] = float((out - ref).norm() / ref.norm())
                runs["tkreg"] = (gpu_ms(lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1).logits, [()],
                                           reps=10), 0.0)
            else:
                guarded(runs, "tkreg", lambda: decode_case(torch, model, cfg, tokens, a.layers, "tkreg"))
                torch.cuda.empty_cache()
            print(case, runs, flush=True)
    rows = []
    for case, tokens, runs, _ in results:
        tk, eager, comp_ = runs["tkreg"][0], runs["stock eager"][0], runs["stock compiled"][0]
        rows.append([case, f"{tokens / eager * 1e3:,.0f}", f"{tokens / comp_ * 1e3:,.0f}", f"{tokens / tk * 1e3:,.0f}",
                     f"**{eager / tk:.2f}×**", f"**{comp_ / tk:.2f}×**",
                     f"{runs['stock compiled'][1]:.1f} s compile", f"{runs['tkreg'][1]:.2f} s capture",
                     f"{runs['err']:.1e}" if "err" in runs else ""])
    name = "Qwen3-8B" if a.family == "dense" else "Qwen3-30B-A3B"
    table = result_table(
        f"{name}-shaped {a.layers}-layer transformers model: tkreg.kernelize vs stock transformers", a, torch, rows,
        ["case", "stock eager tok/s", "stock compiled tok/s", "tkreg tok/s", "vs eager", "vs compiled",
         "stock setup", "tkreg setup", "logits rel. error"],
        dict(family=a.family, layers=a.layers, report=str(model.tkreg_report),
             experts_implementation=getattr(cfg, "_experts_implementation", None),
             raw={c: {k: v for k, v in r.items()} for c, _, r, _ in results}))
    print(json.dumps(table["rows"], indent=1))
    return write_json(table, a.json, default=str)


if __name__ == "__main__":
    main()
