"""What the integration tests share: random models built from configs (no download), padded
batches, the error measures, and the Hugging Face `kernels` fixtures.  Plain helpers are imported
by the test modules (`from .conftest import ...`); torch, transformers and kernels are imported
where used, so a test module's importorskip decides whether it runs."""
from __future__ import annotations

import pytest

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")      # the dense families tkreg.kernelize serves
# CPU tests: a tiny dense model; GPU tests: one with real head dims and a longer batch
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, vocab_size=128, max_position_embeddings=256)
GPU = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
           num_key_value_heads=2, head_dim=128, vocab_size=1024, max_position_embeddings=1024)
L, PAD = 24, 9          # CPU tests' prompt length; pads before the second prompt
GPU_L, GPU_PAD = 333, 77


@pytest.fixture
def reference_ops(monkeypatch):
    """The ops run their torch references (the CPU tests)."""
    monkeypatch.setenv("TKREG_FALLBACK", "reference")


def dense_config(family, size=TINY, **kw):
    import transformers
    cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
           "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[family]
    extra = {"sliding_window": None} if family == "mistral" else {}
    if family == "qwen2":
        extra["attention_bias"] = True            # Qwen2 has q/k/v biases: packed with the weights
    return cls(**{**size, **extra, **kw})


def twins(cfg, dtype=None, seed=0, device="cpu", init=None, attn="sdpa"):
    """(stock, copy) of a random model of cfg with the same weights, in eval mode; init(stock), if
    given, redraws the stock weights (on the device) before they are copied."""
    import torch
    import transformers
    dtype = dtype or torch.bfloat16
    kw = {} if attn is None else {"attn_implementation": attn}
    torch.manual_seed(seed)
    stock = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype, **kw).to(device).eval()
    if init is not None:
        init(stock)
    other = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype, **kw).to(device).eval()
    other.load_state_dict(stock.state_dict())
    return stock, other


def pair(family, dtype=None, seed=0, **kw):
    """(stock, copy to kernelize) of a tiny dense model (TINY, `kw` over it), same random weights."""
    return twins(dense_config(family, **kw), dtype, seed)


def o1_weights(model):
    """Every matrix redrawn with std K^-0.5: each layer's output as large as its input."""
    for p in model.parameters():
        if p.dim() >= 2:
            p.data.normal_(0, p.shape[-1] ** -0.5)


def batch(length=L, pad=PAD, vocab=TINY["vocab_size"], device="cpu", seed=1):
    """Two prompts of `length` random ids, the second left-padded by `pad` (mask 0)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (2, length), generator=g).to(device)
    mask = torch.ones(2, length, dtype=torch.long, device=device)
    mask[1, :pad] = 0
    return ids, mask


def gpu_batch():
    """batch() for the GPU tests' models, on the GPU."""
    return batch(GPU_L, GPU_PAD, GPU["vocab_size"], "cuda")


def logits(model, ids, mask):
    import torch
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float()


def rel(a, b, where=None):
    """max |a - b| / max |a| (over `where`, a bool mask of the leading dims), in fp32."""
    d, r = (a.float() - b.float()).abs(), a.float().abs()
    if where is not None:
        d, r = d[where], r[where]
    return (d.max() / r.max()).item()


# ---- Hugging Face `kernels` -------------------------------------------------------------------
@pytest.fixture
def no_kernel_downloads(monkeypatch):
    """Offline; any download or local-kernel load by `kernels` fails the test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import kernels.layer.layer as kl

    def fetch(*args, **kwargs):
        raise AssertionError(f"kernels tried to load a kernel ({args}, {kwargs})")
    monkeypatch.setattr(kl, "get_kernel", fetch)
    monkeypatch.setattr(kl, "get_local_kernel", fetch)


@pytest.fixture
def calls(monkeypatch):
    """Counts of the tkreg ops the layers run."""
    import tkreg
    n = {"rms_norm": 0, "rotary_embedding": 0}
    for name in n:
        fn = getattr(tkreg.ops, name)

        def spy(*a, _fn=fn, _name=name, **k):
            n[_name] += 1
            return _fn(*a, **k)
        monkeypatch.setattr(tkreg.ops, name, spy)
    return n


@pytest.fixture
def funcs():
    """kernels replaces the forward of transformers' apply_rotary_pos_emb, one module-level object
    per modeling file shared by every model of the family: put the stock forward back after the test."""
    seen = []
    yield seen
    for f in seen:
        f.__dict__.pop("forward", None)


def hf_kernelize(model, funcs, mode=None, device="cpu"):
    """kernels.kernelize with tkreg's mapping (mode: Mode.INFERENCE unless given); the replaced
    functions go to `funcs` (the fixture) to be restored."""
    import tkreg.integrations.hf_kernels as tk
    from kernels import Mode, kernelize
    with tk.use_tkreg():
        kernelize(model, mode=Mode.INFERENCE if mode is None else mode, device=device)
    funcs.extend({id(f): f for m in model.modules() for f in getattr(m, "_kernel_funcs", {}).values()}.values())
    return model


# ---- sparse MoE -------------------------------------------------------------------------------
MOE_FAMILIES = ("qwen3", "mixtral", "deepseek_v3")
MOE_H, MOE_I, MOE_E, MOE_K = 64, 64, 8, 2            # hidden, expert intermediate, experts, top-k


def moe_config(family, **kw):
    import transformers
    common = dict(vocab_size=96, hidden_size=MOE_H, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_experts_per_tok=MOE_K, max_position_embeddings=256)
    if family == "qwen3":
        return transformers.Qwen3MoeConfig(**{**common, "num_key_value_heads": 2, "head_dim": 16, "num_experts": MOE_E,
                                              "moe_intermediate_size": MOE_I, "norm_topk_prob": True, **kw})
    if family == "mixtral":
        return transformers.MixtralConfig(**{**common, "num_key_value_heads": 2, "head_dim": 16,
                                             "intermediate_size": MOE_I, "num_local_experts": MOE_E, **kw})
    return transformers.DeepseekV3Config(**{**common, "num_key_value_heads": 4, "n_routed_experts": MOE_E, "n_group": 4,
                                            "topk_group": 2, "moe_intermediate_size": MOE_I, "n_shared_experts": 1,
                                            "first_k_dense_replace": 0, "q_lora_rank": None, "kv_lora_rank": 32,
                                            "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
                                            "routed_scaling_factor": 2.5, **kw})


def moe_model(family, dtype=None, seed=0, **kw):
    """A random model whose MoE weights are scaled to O(1) activations and a decisive router."""
    import torch
    import transformers
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(moe_config(family, **kw), dtype=dtype or torch.bfloat16).eval()
    H, I = MOE_H, MOE_I  # noqa: E741
    with torch.no_grad():
        for blk in moe_blocks(m):
            # softmax routers: logits ~ N(0, 8^2), decisive; DeepSeek's sigmoid would saturate
            # there (keys tie at 1.0), so its logits stay ~ N(0, 2^2)
            blk.gate.weight.normal_(0, 2 * H ** -0.5 if hasattr(blk.gate, "e_score_correction_bias") else 1.0)
            blk.experts.gate_up_proj.normal_(0, H ** -0.5)
            blk.experts.down_proj.normal_(0, I ** -0.5)
            if hasattr(blk.gate, "e_score_correction_bias"):
                blk.gate.e_score_correction_bias.uniform_(-0.05, 0.05)
    return m


def moe_blocks(m):
    from tkreg.integrations.transformers import moe
    return [mod for mod in m.modules() if type(mod).__name__ in moe.MOE_BLOCKS]


def swap_moe_blocks(m):
    """Every MoE block of m replaced by its tkreg block, as kernelize does."""
    from tkreg.integrations.transformers import moe
    for name, mod in list(m.named_modules()):
        if type(mod).__name__ in moe.MOE_BLOCKS:
            parent, _, attr = name.rpartition(".")
            setattr(m.get_submodule(parent), attr, moe.patch_moe_block(mod, m.config))


def boundary_ties(router, logits) -> int:
    """Tokens whose stock routing is a tie at the top-k boundary (either order is right, so the
    test must avoid them): equal bf16 logits (softmax), or fp32 keys within 1e-5 (DeepSeek)."""
    import torch
    if not hasattr(router, "e_score_correction_bias"):
        v = logits.float().sort(-1, descending=True).values
        return int((v[:, router.top_k - 1] == v[:, router.top_k]).sum())
    key = logits.sigmoid() + router.e_score_correction_bias.float()
    g, tg = router.num_group, router.topk_group
    gs = key.view(key.shape[0], g, -1).topk(2, -1).values.sum(-1).sort(-1, descending=True).values
    ties = (gs[:, tg - 1] - gs[:, tg]).abs() < 1e-5 if tg < g else torch.zeros(key.shape[0], dtype=torch.bool)
    keep = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, key.view(key.shape[0], g, -1).topk(2, -1).values
                                                            .sum(-1).topk(tg, -1).indices, True)
    masked = key.masked_fill(~keep.repeat_interleave(key.shape[1] // g, 1), float("-inf"))
    v = masked.sort(-1, descending=True).values
    return int((ties | ((v[:, router.top_k - 1] - v[:, router.top_k]).abs() < 1e-5)).sum())


def tie_free_input(router, shape, seed=0):
    import torch
    for s in range(seed, seed + 50):
        g = torch.Generator().manual_seed(s)
        x = torch.randn(*shape, generator=g).to(torch.bfloat16).to(router.weight.device)
        with torch.no_grad():
            if not boundary_ties(router, router(x.view(-1, shape[-1]))[0]):
                return x
    raise AssertionError("no tie-free input in 50 seeds")


def tie_free_ids(m, shape, device="cpu"):
    """(ids, stock logits): random ids (of 96) whose stock routing has no tie at any MoE layer."""
    import torch
    seen = []
    hooks = [b.gate.register_forward_hook(lambda mod, a, o: seen.append(boundary_ties(mod, o[0])))
             for b in moe_blocks(m)]
    try:
        for s in range(20):
            ids = torch.randint(0, 96, shape, generator=torch.Generator().manual_seed(s)).to(device)
            seen.clear()
            with torch.no_grad():
                ref = m(ids).logits
            if not any(seen):
                return ids, ref
    finally:
        for h in hooks:
            h.remove()
    raise AssertionError("no tie-free input in 20 seeds")


def close(out, ref, rel=2e-2):
    """Within bf16 noise: 2e-2 relative in the 2-norm, 5e-2 of the largest |ref| elementwise."""
    d, r = out.float() - ref.float(), ref.float()
    assert d.norm() <= rel * r.norm(), f"relative 2-norm error {(d.norm() / r.norm()).item():.4f}"
    assert d.abs().max() <= 2.5 * rel * r.abs().max(), f"max |diff| {d.abs().max().item()}, max |ref| {r.abs().max().item()}"


def close_tokens(out, ref, rel=2e-2, frac=0.95):
    """Whole models: `close` over all but the worst 5% of the tokens (at least one left out):
    bf16 rounding in layer l moves layer l+1's router logits, which flips a near-tie now and then,
    and either choice is right."""
    out, ref = out.reshape(-1, out.shape[-1]).float(), ref.reshape(-1, ref.shape[-1]).float()
    d = (out - ref).norm(dim=-1) / ref.norm(dim=-1)
    keep = d.argsort()[: d.numel() - max(1, int((1 - frac) * d.numel()))]
    close(out[keep], ref[keep], rel)
