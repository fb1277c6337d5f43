"""tkreg's sparse-MoE blocks on a real GPU against the stock transformers blocks: the tiny configs
of the CPU tests, whole models, a Qwen3-30B-A3B-shaped block (128 experts, top-8, hidden 2048,
expert intermediate 768) at prefill and decode sizes, torch.compile and CUDA-graph capture.

`bench_moe_block(torch, tokens)` times the stock block (eager and torch.compile'd, transformers'
default grouped_mm experts) against the tkreg block at that shape; run this file as a script for
the prefill 4096 / decode 64 table.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tkreg.integrations.transformers import moe  # noqa: E402

try:
    from .conftest import MOE_FAMILIES, MOE_H, close, close_tokens, moe_blocks, moe_model, swap_moe_blocks
    from .conftest import tie_free_ids, tie_free_input
except ImportError:     # run as a script (main): this folder is sys.path[0]
    from conftest import MOE_FAMILIES, MOE_H, close, close_tokens, moe_blocks, moe_model, swap_moe_blocks
    from conftest import tie_free_ids, tie_free_input

pytestmark = pytest.mark.gpu

QWEN3_30B = dict(hidden_size=2048, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                 norm_topk_prob=True)


@pytest.fixture(autouse=True)
def _kernels(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)


def qwen3_30b_block(experts_implementation="grouped_mm", seed=0):
    """A Qwen3-30B-A3B-shaped Qwen3MoeSparseMoeBlock on the GPU, random bf16 weights."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
    cfg = transformers.Qwen3MoeConfig(**QWEN3_30B)
    cfg._experts_implementation = experts_implementation
    torch.manual_seed(seed)
    with torch.device("cuda"):
        blk = Qwen3MoeSparseMoeBlock(cfg).to(torch.bfloat16).eval()
    h, i = cfg.hidden_size, cfg.moe_intermediate_size
    with torch.no_grad():
        blk.gate.weight.normal_(0, h ** -0.5)
        blk.experts.gate_up_proj.normal_(0, h ** -0.5)
        blk.experts.down_proj.normal_(0, i ** -0.5)
    return blk, cfg


def untied_rows(router, x):
    """Rows of x [T, H] whose stock top-k has no tie at its boundary (either order is right)."""
    with torch.no_grad():
        v = router(x)[0].float().sort(-1, descending=True).values
    return v[:, router.top_k - 1] != v[:, router.top_k]


@pytest.mark.parametrize("family", MOE_FAMILIES)
@pytest.mark.parametrize("tokens", [1, 9, 300])
def test_block_matches_stock(family, tokens):
    m = moe_model(family).cuda()
    blk = moe_blocks(m)[0]
    x = tie_free_input(blk.gate, (1, tokens, MOE_H)).cuda()
    with torch.no_grad():
        ref = blk(x)
        out = moe.patch_moe_block(blk, m.config)(x)
    assert type(out) is torch.Tensor and out.shape == x.shape and out.dtype == torch.bfloat16
    close(out, ref)


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_whole_model_logits(family):
    m = moe_model(family).cuda()
    ids, ref = tie_free_ids(m, (2, 33), "cuda")
    swap_moe_blocks(m)
    with torch.no_grad():
        close_tokens(m(ids).logits, ref)


@pytest.mark.parametrize("tokens", [4096, 64])
def test_qwen3_30b_shaped_block(tokens):
    blk, cfg = qwen3_30b_block("eager")   # the stock expert loop: the plainest oracle
    x = torch.randn(1, tokens, cfg.hidden_size, device="cuda").to(torch.bfloat16)
    with torch.no_grad():
        ref = blk(x)[0]
        out = moe.patch_moe_block(blk, cfg)(x)[0]
    ok = untied_rows(blk.gate, x[0])
    assert ok.float().mean() > 0.8
    close(out[ok], ref[ok])


def test_compiled_and_graph_captured_block_match_eager():
    blk, cfg = qwen3_30b_block()
    p = moe.patch_moe_block(blk, cfg)
    x = torch.randn(1, 64, cfg.hidden_size, device="cuda").to(torch.bfloat16)
    with torch.no_grad():
        eager = p(x)
        assert torch.equal(torch.compile(p, fullgraph=True)(x), eager)
        static = x.clone()
        p(static)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = p(static)
        y = torch.randn_like(x)
        static.copy_(y)
        g.replay()
        assert torch.equal(out, p(y))


def test_unsupported_fp16_on_gpu():
    blk, cfg = qwen3_30b_block()
    with pytest.raises(moe.Unsupported, match="float16"):
        moe.patch_moe_block(blk.half(), cfg)


# ---- bench --------------------------------------------------------------------------------------
def bench_moe_block(torch, tokens, reps=20, warmup=3, compile_modes=("default",)) -> dict:
    """Median CUDA-event ms of one Qwen3-30B-A3B-shaped MoE block over `tokens` tokens:
    {"stock eager": ..., "stock compiled (<mode>)": ..., "tkreg": ..., "tkreg + CUDA graph": ...}
    (stock = transformers' Qwen3MoeSparseMoeBlock with its default grouped_mm experts; a peer that
    fails to run is left out).  Compile time is not timed; inputs rotate past L2."""
    from tkreg.bench.timing import gpu_ms, rotations
    blk, cfg = qwen3_30b_block("grouped_mm")
    h = cfg.hidden_size
    sets = rotations(lambda: (torch.randn(1, tokens, h, device="cuda").to(torch.bfloat16),), tokens * h * 2)
    out = {}
    with torch.no_grad():
        out["stock eager"] = gpu_ms(blk, sets, reps=reps, warmup=warmup)
        for mode in compile_modes:
            try:
                f = torch.compile(blk, mode=None if mode == "default" else mode, dynamic=False)
                out[f"stock compiled ({mode})"] = gpu_ms(f, sets, reps=reps, warmup=warmup)
            except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
                print(f"stock compiled ({mode}) failed: {type(e).__name__}: {str(e)[:200]}")
        p = moe.patch_moe_block(blk, cfg)
        out["tkreg"] = gpu_ms(p, sets, reps=reps, warmup=warmup)
        static = sets[0][0].clone()
        p(static)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            p(static)

        def replay(x):
            static.copy_(x)
            g.replay()
        out["tkreg + CUDA graph"] = gpu_ms(replay, sets, reps=reps, warmup=warmup)
    del blk, p, g
    torch.cuda.empty_cache()
    return out


def main():
    for name, tokens in (("prefill", 4096), ("decode", 64)):
        modes = ("default",) if tokens > 256 else ("default", "reduce-overhead")
        r = bench_moe_block(torch, tokens, compile_modes=modes)
        best = min(v for k, v in r.items() if k.startswith("stock"))
        for k, v in r.items():
            print(f"Qwen3-30B-A3B MoE block, {name} {tokens} tokens | {k:34s} {v:8.3f} ms | "
                  f"{tokens / v * 1e3:12.0f} tok/s | best stock / this {best / v:5.2f}x")


if __name__ == "__main__":
    main()
