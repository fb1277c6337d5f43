"""tkreg.kernelize and the "tkreg" attention on tiny random dense models (Llama, Mistral, Qwen2,
Qwen3) on the CPU, where TKREG_FALLBACK=reference runs the ops' torch references: the patching
and its report, logits against the stock model, the configs tkreg does not serve (kept on torch
with a reason), generate() through TkregPagedCache with a left-padded batch, and the import
boundary (`import tkreg` never imports transformers)."""
from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tkreg  # noqa: E402
from tkreg.integrations.transformers import TkregPagedCache, greedy_generate  # noqa: E402

from .conftest import FAMILIES, L, PAD, batch, dense_config, logits, pair, rel  # noqa: E402

PARTS = {"rms_norm", "mlp", "attention", "rotary", "decoder_layer"}
pytestmark = pytest.mark.usefixtures("reference_ops")


def test_import_tkreg_does_not_import_transformers():
    code = ("import sys, tkreg, tkreg.ops\nassert 'transformers' not in sys.modules, 'import tkreg imported transformers'\n"
            "assert callable(tkreg.kernelize) and 'transformers' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_kernelize_report_and_logits(family):
    stock, model = pair(family)
    assert tkreg.kernelize(model) is model
    rep = model.tkreg_report
    assert rep.parts(True) == PARTS and not rep.kept, str(rep)
    assert model.config._attn_implementation == "tkreg"
    assert set(model.state_dict()) == set(stock.state_dict())          # packing adds no state
    a = model.model.layers[0].self_attn
    assert a.q_proj.weight.data_ptr() == a._tkreg_qkv.data_ptr()        # q/k/v are views of the packed weight
    ids, mask = batch()
    assert rel(logits(stock, ids, mask), logits(model, ids, mask), mask.bool()) < 2e-2


def first_divergence_is_a_near_tie(stock, ids, mask, got, want):
    """True if `got` equals `want`, or differs first where the stock model's top-1 logit beats the
    token `got` chose by under 2% of the logits' range (random weights make near-ties)."""
    if torch.equal(got, want):
        return True
    full_mask = torch.cat([mask, torch.ones_like(got[:, L:])], 1)
    with torch.no_grad():
        lg = stock(got, attention_mask=full_mask).logits.float()
    for t in range(L, got.shape[1]):
        for b in range(got.shape[0]):
            if got[b, t] != want[b, t]:
                row = lg[b, t - 1]
                margin = (row.max() - row[got[b, t]]).item()
                return margin <= 2e-2 * (row.max() - row.min()).item()
        if not torch.equal(got[:, t], want[:, t]):
            return False
    return False


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_paged_cache_left_padded(family):
    stock, model = pair(family)
    tkreg.kernelize(model)
    ids, mask = batch()
    kw = dict(attention_mask=mask, max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)
    want = stock.generate(ids, **kw)
    cache = TkregPagedCache(model.config, max_cache_len=L + 10)
    got = model.generate(ids, past_key_values=cache, **kw)
    assert first_divergence_is_a_near_tie(stock, ids, mask, got, want), (got[:, L:], want[:, L:])
    assert cache.seq_lens.tolist() == [L + 9, L - PAD + 9]       # pads are never stored
    assert torch.equal(greedy_generate(model, ids, mask, max_new_tokens=10, cuda_graph=False), got)


@pytest.mark.parametrize("family", ("llama", "qwen3"))
def test_attn_implementation_tkreg_without_kernelize(family):
    torch.manual_seed(0)
    cfg = dense_config(family)
    stock = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="tkreg").eval()
    model.load_state_dict(stock.state_dict())
    ids, mask = batch()
    assert rel(logits(stock, ids, mask), logits(model, ids, mask), mask.bool()) < 1e-2
    kw = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    want = stock.generate(ids, **kw)
    for cache in (None, TkregPagedCache(cfg, max_cache_len=L + 6), transformers.StaticCache(cfg, max_cache_len=40)):
        got = model.generate(ids, past_key_values=cache, **kw)
        assert first_divergence_is_a_near_tie(stock, ids, mask, got, want), (type(cache).__name__, got[:, L:], want[:, L:])


def test_head_dim_96_keeps_attention_on_torch():
    stock, model = pair("qwen3", head_dim=96)
    tkreg.kernelize(model)
    rep = model.tkreg_report
    kept = {e.part: e.detail for e in rep.kept}
    assert set(kept) == {"attention", "rotary"} and "head dim 96" in kept["attention"], str(rep)
    assert {"mlp", "rms_norm", "decoder_layer"} <= rep.parts(True)
    assert model.config._attn_implementation == "sdpa"
    ids, mask = batch()
    assert rel(logits(stock, ids, mask), logits(model, ids, mask), mask.bool()) < 2e-2


def test_float32_stays_on_torch_with_identical_logits():
    stock, model = pair("llama", dtype=torch.float32)
    tkreg.kernelize(model)
    rep = model.tkreg_report
    assert not rep.replaced and all("float32" in e.detail for e in rep.kept if e.part != "decoder_layer"), str(rep)
    ids, mask = batch()
    assert torch.equal(logits(stock, ids, mask), logits(model, ids, mask))


def test_cpu_without_fallback_stays_on_torch(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK")
    stock, model = pair("qwen2")
    tkreg.kernelize(model)
    rep = model.tkreg_report
    assert not rep.replaced and all("CPU" in e.detail for e in rep.kept if e.part != "decoder_layer"), str(rep)
    ids, mask = batch()
    assert torch.equal(logits(stock, ids, mask), logits(model, ids, mask))


def test_output_hidden_states_are_not_overwritten():
    stock, model = pair("qwen3")
    tkreg.kernelize(model)
    ids, mask = batch()
    with torch.no_grad():
        hs = model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        ref = stock(ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for a, b in zip(ref, hs):
        assert rel(a, b, mask.bool()) < 2e-2


def test_training_mode_replaces_norms_only():
    stock, model = pair("llama")
    tkreg.kernelize(model, mode="training")
    rep = model.tkreg_report
    assert rep.parts(True) == {"rms_norm"} and {"mlp", "attention"} <= rep.parts(False), str(rep)
    ids, mask = batch()
    model.train()
    model(ids, attention_mask=mask, labels=ids).loss.backward()
    assert model.model.layers[0].input_layernorm.weight.grad is not None


def test_bad_mode_raises():
    _, model = pair("llama")
    with pytest.raises(ValueError, match="mode"):
        tkreg.kernelize(model, mode="serving")


def test_unknown_family_is_left_alone():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=64, n_layer=1, n_head=2, vocab_size=128)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    tkreg.kernelize(model)
    assert not model.tkreg_report.entries and "gpt2" in str(model.tkreg_report)


def test_sliding_window_mistral_keeps_attention():
    stock, model = pair("mistral", sliding_window=16)
    tkreg.kernelize(model)
    kept = {e.part: e.detail for e in model.tkreg_report.kept}
    assert "sliding window 16" in kept["attention"]
    ids, mask = batch()
    assert rel(logits(stock, ids, mask), logits(model, ids, mask), mask.bool()) < 2e-2
