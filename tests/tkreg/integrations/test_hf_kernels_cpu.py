"""tkreg's layers under Hugging Face `kernels` (tkreg.integrations.hf_kernels) on the CPU, where
TKREG_FALLBACK=reference runs the ops' torch references: the mapping resolves to tkreg's classes
with no download (kernels' loaders are made to fail), kernels accepts the classes, tiny random
Llama / Mistral / Qwen2 / Qwen3 models kernelized by `kernels.kernelize` give the stock logits,
what tkreg does not serve keeps the stock forward, and importing the module imports neither
`kernels` nor transformers.  Skipped without `kernels`."""
from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
kernels = pytest.importorskip("kernels")

import tkreg  # noqa: E402
import tkreg.integrations.hf_kernels as tk  # noqa: E402
from kernels import Device, Mode, kernelize, use_kernel_mapping  # noqa: E402

from .conftest import FAMILIES, batch, hf_kernelize, logits, pair, rel  # noqa: E402

# kernels warns for each declared layer name it has no mapping for (transformers' SiLU activation)
pytestmark = [pytest.mark.filterwarnings("ignore:\\s*No kernel mapping found for layer `SiLU`:UserWarning"),
              pytest.mark.usefixtures("reference_ops", "no_kernel_downloads")]


def norms(model):
    return [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]


def rotary_funcs(model):
    return [f for m in model.modules() for n, f in getattr(m, "_kernel_funcs", {}).items() if n == "rotary_pos_emb"]


def on_tkreg(module, layer) -> bool:
    return getattr(module.forward, "__func__", None) is layer.forward


# ---- the mapping ------------------------------------------------------------------------------
def test_import_is_light():
    code = ("import sys; import tkreg.integrations.hf_kernels as tk; "
            "print(sorted(m for m in ('kernels', 'transformers', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_without_kernels_the_error_says_what_to_install():
    code = ("import sys; sys.modules['kernels'] = None; import tkreg.integrations.hf_kernels as tk\n"
            "try:\n    tk.register()\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "needs Hugging Face `kernels`" in out and "pip install" in out


def test_mapping_resolves_to_tkreg_layers():
    m = tk.mapping()
    assert set(m) == {"RMSNorm", "rotary_pos_emb"}
    archs = {o["op"]: o["archs"] for o in tkreg.list_ops()}
    from tkreg.registry import ARCHS
    for name, (layer, op, modes) in tk.LAYERS.items():
        caps = sorted(ARCHS[a][0] * 10 + ARCHS[a][1] for a in archs[op])
        cuda = sorted(d.properties.min_capability for d in m[name] if d.type == "cuda")
        assert cuda == caps and all(d.properties.max_capability == d.properties.min_capability
                                    for d in m[name] if d.type == "cuda")
        assert Device(type="cpu") in m[name]                    # TKREG_FALLBACK=reference
        for by_mode in m[name].values():
            assert set(by_mode) == {getattr(Mode, x) for x in modes}
            for repo in by_mode.values():
                assert repo == tk.TkregLayerRepository(layer) and "tkreg" in str(repo)
                assert repo.load() is getattr(tk.layers, layer)


def test_no_cpu_entry_without_reference(monkeypatch):
    monkeypatch.delenv("TKREG_FALLBACK")
    assert all(d.type == "cuda" for devices in tk.mapping().values() for d in devices)


def test_kernels_accepts_the_layers():
    """kernels' own check of a layer class against the class it replaces (stateless, same arguments)."""
    from kernels.layer.layer import _validate_layer
    from transformers.models.llama import modeling_llama as llama
    _validate_layer(check_cls=llama.LlamaRMSNorm, cls=tk.layers.RMSNorm, repo=tk.TkregLayerRepository("RMSNorm"))
    _validate_layer(check_cls=type(llama.apply_rotary_pos_emb), cls=tk.layers.RotaryPosEmb,
                    repo=tk.TkregLayerRepository("RotaryPosEmb"))
    with pytest.raises(ValueError, match="no layer `MLP`"):
        tk.TkregLayerRepository("MLP")


# ---- kernelize ----------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_kernelize_matches_stock(family, calls, funcs):
    stock, other = pair(family)
    ids, mask = batch()
    ref = logits(stock, ids, mask)
    hf_kernelize(other, funcs)
    assert norms(other) and all(on_tkreg(n, tk.layers.RMSNorm) for n in norms(other))
    assert rotary_funcs(other) and all(on_tkreg(f, tk.layers.RotaryPosEmb) for f in rotary_funcs(other))
    out = logits(other, ids, mask)
    n_layers = other.config.num_hidden_layers
    qk = 2 * n_layers if family == "qwen3" else 0               # Qwen3's q_norm / k_norm
    assert calls == {"rms_norm": 2 * n_layers + 1 + qk, "rotary_embedding": n_layers}
    assert rel(ref, out, mask.bool()) < 2e-2, family
    assert out[mask.bool()].argmax(-1).eq(ref[mask.bool()].argmax(-1)).float().mean() >= 0.95


def test_register_adds_to_the_global_mapping(calls, funcs):
    stock, other = pair("llama")
    ids, mask = batch()
    with use_kernel_mapping({}):                                # a sandbox: the global mapping comes back after
        tk.register()
        kernelize(other, mode=Mode.INFERENCE, device="cpu")
    funcs.extend(rotary_funcs(other))
    assert all(on_tkreg(n, tk.layers.RMSNorm) for n in norms(other))
    assert rel(logits(stock, ids, mask), logits(other, ids, mask), mask.bool()) < 2e-2
    assert calls["rms_norm"] and calls["rotary_embedding"]


def test_training_mode_norms_only(calls, funcs):
    """Mode.TRAINING: RMSNorm on tkreg (rms_norm has a backward), rotary on torch (no backward)."""
    stock, other = pair("qwen3")
    ids, mask = batch()
    hf_kernelize(other, funcs, mode=Mode.TRAINING)
    assert all(on_tkreg(n, tk.layers.RMSNorm) for n in norms(other))
    assert not any(on_tkreg(f, tk.layers.RotaryPosEmb) for f in rotary_funcs(other))
    for m in (stock, other):
        m(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    assert calls["rms_norm"] and not calls["rotary_embedding"]
    a, b = stock.model.norm.weight.grad.float(), other.model.norm.weight.grad.float()
    assert ((a - b).abs().max() / a.abs().max()).item() < 5e-2


def test_torch_compile_modes_stay_stock(funcs):
    _, other = pair("llama")
    hf_kernelize(other, funcs, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
    assert not any(on_tkreg(n, tk.layers.RMSNorm) for n in norms(other))
    assert not any(on_tkreg(f, tk.layers.RotaryPosEmb) for f in rotary_funcs(other))


# ---- what tkreg does not serve keeps the stock forward -----------------------------------------
def test_float32_runs_stock(calls, funcs):
    stock, other = pair("llama", dtype=torch.float32)
    ids, mask = batch()
    ref = logits(stock, ids, mask)
    hf_kernelize(other, funcs)
    assert torch.equal(logits(other, ids, mask), ref)
    assert calls == {"rms_norm": 0, "rotary_embedding": 0}


def test_head_dim_96_rotary_stays_stock(calls, funcs):
    stock, other = pair("llama", head_dim=96)
    ids, mask = batch()
    ref = logits(stock, ids, mask)
    hf_kernelize(other, funcs)
    out = logits(other, ids, mask)
    assert calls["rms_norm"] and not calls["rotary_embedding"]
    assert rel(ref, out, mask.bool()) < 2e-2


def test_cpu_without_reference_runs_stock(monkeypatch, calls, funcs):
    stock, other = pair("llama")
    ids, mask = batch()
    ref = logits(stock, ids, mask)
    hf_kernelize(other, funcs)                                  # mapped while TKREG_FALLBACK=reference ...
    monkeypatch.delenv("TKREG_FALLBACK")                        # ... then run without it: the stock forwards
    assert torch.equal(logits(other, ids, mask), ref)
    assert calls == {"rms_norm": 0, "rotary_embedding": 0}


def test_other_norm_math_stays_stock():
    """An RMSNorm class whose stock forward is not Llama's (the weight applied before the cast)."""
    class OtherRMSNorm(torch.nn.Module):
        kernel_layer_name = "RMSNorm"

        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(64, dtype=torch.bfloat16))
            self.variance_epsilon = 1e-6

        def forward(self, hidden_states):
            x = hidden_states.float()
            return (self.weight.float() * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    m = OtherRMSNorm()
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    ref = m(x)
    with tk.use_tkreg():
        kernelize(m, mode=Mode.INFERENCE, device="cpu")
    assert on_tkreg(m, tk.layers.RMSNorm) and torch.equal(m(x), ref)
