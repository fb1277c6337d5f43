"""tkreg.kernelize(fp8=True) on tiny random dense models on the CPU (TKREG_FALLBACK=reference runs
the ops' torch references): which Linears go FP8 and which stay bf16 (with the reason), the norms
that quantize for the GEMM after them, and logits within 5e-2 of the stock bf16 model."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tkreg  # noqa: E402
from tkreg.integrations.transformers import TkregPagedCache  # noqa: E402

from .conftest import FAMILIES, L, TINY, batch, dense_config, logits, o1_weights, rel, twins  # noqa: E402

PROJ = (".qkv", ".o_proj", ".gate_up", ".down")
pytestmark = pytest.mark.usefixtures("reference_ops")


def o1_stream(model):
    """An O(1) residual stream, each layer adding a fraction of it (as in trained models)."""
    model.model.embed_tokens.weight.data.normal_(0, 1)


def pair(family, dtype=torch.bfloat16, o1=False, **kw):
    """(stock, copy to kernelize): hidden 256 so that 1x128 activation groups exist.  o1: weights
    redrawn with std K^-0.5 (every layer's output as large as its input) instead of init's 0.02."""
    cfg = dense_config(family, {**TINY, "hidden_size": 256, "intermediate_size": 512}, **kw)
    return twins(cfg, dtype, init=o1_weights if o1 else o1_stream)


def fp8_rows(rep, on=True):
    return {e.module: e.detail for e in rep.entries if e.part == "fp8_linear" and e.on_tkreg == on}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_dense_linear_runs_fp8_and_logits_stay_close(family):
    stock, model = pair(family)
    assert tkreg.kernelize(model, fp8=True) is model
    rep = model.tkreg_report
    on = fp8_rows(rep)
    assert set(on) == {f"model.layers.{i}.{p}{s}" for i in range(2) for p, s in
                       [("self_attn", ".qkv"), ("self_attn", ".o_proj"), ("mlp", ".gate_up"), ("mlp", ".down")]}, str(rep)
    assert not fp8_rows(rep, False) and not rep.kept, str(rep)
    assert all("rms_norm_quant_fp8" in d for m, d in on.items() if m.endswith((".qkv", ".gate_up")))
    assert all("silu_and_mul_quant_fp8" in d for m, d in on.items() if m.endswith(".down"))
    assert all("per_token_group_quant_fp8" in d for m, d in on.items() if m.endswith(".o_proj"))
    assert "fp8_gemm" in str(rep) and any("fp8=True" in n for n in rep.notes)
    layer = model.model.layers[0]
    assert layer.input_layernorm._tkreg_fp8 and layer.post_attention_layernorm._tkreg_fp8
    assert not getattr(model.model.norm, "_tkreg_fp8", False)          # lm_head stays bf16
    w = layer.mlp._tkreg_fp8_down
    assert w.q.dtype == torch.float8_e4m3fn and w.s.shape == (2, 4)      # [256, 512]: 128x128 blocks
    assert set(model.state_dict()) == set(stock.state_dict())
    ids, mask = batch()
    want = logits(stock, ids, mask)
    err = rel(want, logits(model, ids, mask), mask.bool())
    assert err < 5e-2, err


def test_fp8_modules_are_the_quantized_math_exactly():
    """Wiring, bit for bit (the references on both sides): the MLP is lin(swiglu(lin(x))) on the
    block-dequantized weights and 1x128-quantized inputs, the flagged norms return the fused
    norm + quant of their input, and o_proj quantizes the attention output it is given."""
    from tkreg.integrations.transformers.fp8 import Fp8Act
    from tkreg.reference.quant import dequant_blocks, dequant_groups, per_token_group_quant_fp8, rms_norm_quant_fp8, \
        swiglu_fp32
    _, model = pair("qwen2", o1=True)
    tkreg.kernelize(model, fp8=True)
    layer = model.model.layers[1]

    def lin(x2, w):
        xq = dequant_groups(*per_token_group_quant_fp8(x2))          # bf16 or the SwiGLU's fp32
        y = (xq.float() @ dequant_blocks(w.q, w.s).t()).to(torch.bfloat16)
        return y if w.bias is None else y + w.bias

    x = torch.randn(2, 5, 256).to(torch.bfloat16)
    m = layer.mlp
    with torch.no_grad():
        want = lin(swiglu_fp32(lin(x.view(10, 256), m._tkreg_fp8_gate_up)), m._tkreg_fp8_down)
        assert torch.equal(m(x).view(10, -1), want)
        n = layer.input_layernorm(x)
        assert isinstance(n, Fp8Act) and n.shape == (2, 5, 256)
        q, s = rms_norm_quant_fp8(x.view(10, 256), layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
        assert torch.equal(n.q.view(torch.uint8), q.view(torch.uint8)) and torch.equal(n.s, s)
    a = layer.self_attn
    o = torch.randn(10, 256).to(torch.bfloat16)
    from tkreg.integrations.transformers import fp8
    assert torch.equal(fp8.linear(o, a._tkreg_fp8_o), lin(o, a._tkreg_fp8_o))


def test_unservable_projections_stay_bf16_with_a_reason():
    # intermediate 320: down's K % 128 != 0 (and silu_and_mul_quant_fp8 needs I % 128): down stays bf16
    stock, model = pair("llama", intermediate_size=320)
    tkreg.kernelize(model, fp8=True)
    rep = model.tkreg_report
    kept = fp8_rows(rep, False)
    assert set(kept) == {"model.layers.0.mlp.down", "model.layers.1.mlp.down"}, str(rep)
    assert all("K % 128 == 0" in d for d in kept.values())
    assert "model.layers.0.mlp.gate_up" in fp8_rows(rep)
    ids, mask = batch()
    assert rel(logits(stock, ids, mask), logits(model, ids, mask), mask.bool()) < 5e-2


def test_hidden_not_a_multiple_of_128_keeps_bf16():
    # hidden 192: qkv and gate_up (K = 192) stay bf16, their norms unflagged; o_proj (K = 256) and down go FP8
    stock, model = pair("qwen3", hidden_size=192)
    tkreg.kernelize(model, fp8=True)
    rep = model.tkreg_report
    assert set(fp8_rows(rep, False)) == {f"model.layers.{i}.{p}" for i in range(2)
                                         for p in ("self_attn.qkv", "mlp.gate_up")}, str(rep)
    assert all("K % 128 == 0" in d for d in fp8_rows(rep, False).values())
    assert {m.rsplit(".", 1)[1] for m in fp8_rows(rep)} == {"o_proj", "down"}
    layer = model.model.layers[0]
    assert not getattr(layer.input_layernorm, "_tkreg_fp8", False)
    assert not getattr(layer.post_attention_layernorm, "_tkreg_fp8", False)
    ids, mask = batch()
    assert rel(logits(stock, ids, mask), logits(model, ids, mask), mask.bool()) < 5e-2


def test_float16_model_keeps_bf16_gemms():
    stock, model = pair("llama", dtype=torch.float16)
    tkreg.kernelize(model, fp8=True)
    rep = model.tkreg_report
    assert not fp8_rows(rep) and all("float16" in d for d in fp8_rows(rep, False).values()), str(rep)
    assert {"mlp", "attention"} <= rep.parts(True)


def test_training_mode_ignores_fp8():
    _, model = pair("llama")
    tkreg.kernelize(model, mode="training", fp8=True)
    rep = model.tkreg_report
    assert not fp8_rows(rep) and any("fp8=True ignored" in n for n in rep.notes)


def test_generate_through_the_paged_cache():
    stock, model = pair("qwen3")
    tkreg.kernelize(model, fp8=True)
    ids, mask = batch()
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    got = model.generate(ids, past_key_values=TkregPagedCache(model.config, max_cache_len=L + 6), **kw)
    assert got.shape == (2, L + 6)
    # the first new token is the argmax of the fp8 prefill's last logits
    assert torch.equal(got[:, L], logits(model, ids, mask)[:, -1].argmax(-1))
