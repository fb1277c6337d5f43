"""tkreg.kernelize: put a loaded transformers model (Llama, Mistral, Qwen2, Qwen3) on tkreg's ops.

Weights are packed once (q/k/v into one weight, gate/up into one weight); the original
Linear weights become views of the packed ones, so memory is not doubled.  Kernelize after
loading weights and moving the model to its GPU: a later `.to()` or `load_state_dict` breaks
the sharing (the packed weights would go stale).
"""
from __future__ import annotations

import types

import torch

from . import attention, layers, rope
from ._support import Unsupported
from .report import KernelizeReport

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3")
MODES = ("inference", "training")
NORM_OPS = ("tkreg.rms_norm", "tkreg.fused_add_rms_norm")
MLP_OPS = ("tkreg.gemm", "tkreg.silu_and_mul")
ATTN_OPS = ("tkreg.gemm", "tkreg.qk_norm_rope_cache", "tkreg.flash_attention",
            "tkreg.flash_attention_varlen", "tkreg.paged_decode_attention")


def kernelize(model, *, mode: str = "inference", fp8: bool = False, max_positions: int | None = None):
    """Patch `model` in place and return it; `model.tkreg_report` says what runs on tkreg and what
    stays on torch (and why).  mode="inference": forwards run without autograd.  mode="training":
    only RMSNorm (tkreg.rms_norm has a backward kernel); GEMMs and attention stay on torch.
    `max_positions`: rows of the rotary table (default: config.max_position_embeddings).
    fp8=True (inference): the decoder layers' dense Linears run FP8 GEMMs on weights quantized once
    (DeepSeek-V3's recipe; fp8.py); the report gets one "fp8_linear" row a projection."""
    if mode not in MODES:
        raise ValueError(f"tkreg.kernelize: mode must be one of {MODES}, got {mode!r}")
    attention.register()
    report = KernelizeReport(mode)
    model.tkreg_report = report
    cfg = model.config
    base = getattr(model, "model", model)
    if cfg.model_type not in FAMILIES or not hasattr(base, "layers"):
        report.notes.append(f"model type {cfg.model_type!r}: tkreg.kernelize serves {', '.join(FAMILIES)}; "
                            "nothing replaced")
        return model
    p = next(model.parameters())
    device_reason = _device_reason(p.device)
    report.notes.append("embedding and lm_head stay on torch (a lookup and one GEMM the stock module runs well)")
    with torch.no_grad():
        norms = _norms(base, report, mode, device_reason)
        if mode == "training":
            why = "mode='training': tkreg.gemm and the attention kernels have no backward"
            if fp8:
                report.notes.append("fp8=True ignored: mode='training' keeps the GEMMs on torch")
            for i, layer in enumerate(base.layers):
                report.add(f"model.layers.{i}.mlp", "moe" if _is_moe(layer.mlp) else "mlp", False, why)
                report.add(f"model.layers.{i}.self_attn", "attention", False, why)
            return model
        for i, layer in enumerate(base.layers):
            name = f"model.layers.{i}.mlp"
            part = "moe" if _is_moe(layer.mlp) else "mlp"
            try:
                _reason(device_reason, MLP_OPS)
                if part == "moe":
                    from .moe import patch_moe_block      # the sparse-MoE blocks (routing + grouped GEMM)
                    layer.mlp = patch_moe_block(layer.mlp, cfg)
                    detail = "tkreg routing + grouped_gemm (experts used in place)"
                else:
                    detail = _mlp(layer.mlp, cfg)
                report.add(name, part, True, detail)
            except Unsupported as e:
                report.add(name, part, False, str(e))
        _attention(model, base, cfg, report, device_reason, max_positions)
        _decoder_layers(base, norms, report)
        if fp8:
            from . import fp8 as fp8_mode
            fp8_mode.apply(base, cfg, report, lambda: _reason(device_reason, fp8_mode.OPS))
    return model


def _device_reason(device) -> str | None:
    from ... import env
    if device.type == "cpu":
        return None if env.fallback_reference() else ("model on the CPU: tkreg kernels run on CUDA "
                                                       "(TKREG_FALLBACK=reference runs the torch references)")
    if device.type != "cuda":
        return f"model on {device.type}: tkreg kernels run on CUDA"
    return None


def _reason(device_reason, ops_needed) -> None:
    """Unsupported if the device cannot run these ops (no pack for its architecture)."""
    if device_reason:
        raise Unsupported(device_reason)
    from ... import env
    if env.fallback_reference():
        return
    import tkreg
    dev = torch.cuda.current_device()
    from ...runtime import RUNTIME
    arch = RUNTIME.arch_of(dev)
    have = {o["op"]: o["archs"] for o in tkreg.list_ops()}
    for op in ops_needed:
        if arch not in have.get(op, ()):
            cap = "%d.%d" % torch.cuda.get_device_capability(dev)
            raise Unsupported(f"cuda:{dev} (compute capability {cap}): the installed packs hold no {op} for it")


def _dtype(t) -> None:
    if t.dtype not in (torch.bfloat16, torch.float16):
        raise Unsupported(f"dtype {str(t.dtype).replace('torch.', '')}: tkreg kernels serve bfloat16 and float16")


def _bind(module, fn, grad: bool = False) -> None:
    module.forward = types.MethodType(fn if grad else torch.no_grad()(fn), module)


# ---- parts ------------------------------------------------------------------------------------
def _is_norm(m) -> bool:
    return type(m).__name__.endswith("RMSNorm") and hasattr(m, "weight") and hasattr(m, "variance_epsilon")


def _norms(base, report, mode, device_reason) -> set:
    """Patch every decoder-level RMSNorm; returns the ids of those on tkreg."""
    done = set()
    names = [(f"model.layers.{i}.{n}", getattr(layer, n)) for i, layer in enumerate(base.layers)
             for n in ("input_layernorm", "post_attention_layernorm")] + [("model.norm", base.norm)]
    for name, m in names:
        try:
            if not _is_norm(m):
                raise Unsupported(f"{type(m).__name__} is not an RMSNorm tkreg knows")
            _reason(device_reason, NORM_OPS)
            _dtype(m.weight)
            if mode == "training":
                _bind(m, layers.rms_norm_train_forward, grad=True)
                report.add(name, "rms_norm", True, "tkreg.rms_norm (autograd: tkreg.rms_norm_backward)")
            else:
                _bind(m, layers.rms_norm_forward)
                m._tkreg_norm = True
                report.add(name, "rms_norm", True, "tkreg.rms_norm / fused_add_rms_norm")
            done.add(id(m))
        except Unsupported as e:
            report.add(name, "rms_norm", False, str(e))
    return done


def _is_moe(mlp) -> bool:
    return hasattr(mlp, "experts") or hasattr(mlp, "gate") and not hasattr(mlp, "gate_proj")


def _act_is_silu(mlp, cfg) -> bool:
    act = getattr(cfg, "hidden_act", None)
    return act in ("silu", "swish") or type(getattr(mlp, "act_fn", None)).__name__ in ("SiLU", "SiLUActivation")


def _pack(linears, dim: int = 0):
    """One weight (and bias) for several Linears; each Linear's weight becomes a view of it."""
    w = torch.cat([l.weight.detach() for l in linears], dim).contiguous()
    has_bias = [l.bias is not None for l in linears]
    if any(has_bias) and not all(has_bias):
        raise Unsupported("some of the packed projections have a bias and some do not")
    b = torch.cat([l.bias.detach() for l in linears]).contiguous() if all(has_bias) else None
    off = 0
    for l in linears:
        n = l.weight.shape[0]
        l.weight.data = w[off:off + n]
        if b is not None:
            l.bias.data = b[off:off + n]
        off += n
    return w, b


def _mlp(mlp, cfg) -> str:
    if not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
        raise Unsupported(f"{type(mlp).__name__} is not a gate/up/down MLP")
    if not _act_is_silu(mlp, cfg):
        raise Unsupported(f"activation {getattr(cfg, 'hidden_act', '?')!r}: tkreg serves SiLU (silu_and_mul)")
    _dtype(mlp.gate_proj.weight)
    I, H = mlp.gate_proj.weight.shape
    if H % 8 or I % 8:
        raise Unsupported(f"hidden {H} / intermediate {I}: tkreg.gemm needs multiples of 8")
    w, b = _pack([mlp.gate_proj, mlp.up_proj])
    mlp.register_buffer("_tkreg_gate_up", w, persistent=False)
    mlp._tkreg_gate_up_bias = b
    _bind(mlp, layers.mlp_forward)
    return f"gate/up packed [{2 * I}, {H}]: tkreg.gemm -> silu_and_mul -> gemm"


def _attn_check(a, cfg) -> None:
    for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
        if not hasattr(a, n):
            raise Unsupported(f"{type(a).__name__} has no {n}")
    D = a.head_dim
    hq = a.q_proj.weight.shape[0] // D
    hk = a.k_proj.weight.shape[0] // D
    _dtype(a.q_proj.weight)
    attention.servable(a.q_proj.weight.dtype, D, hq, hk)
    window = a.sliding_window if hasattr(a, "sliding_window") else getattr(cfg, "sliding_window", None)
    if window is not None:
        raise Unsupported(f"sliding window {window}: tkreg attention has no window (a config whose window "
                          "never binds can set sliding_window=None)")
    H = a.q_proj.weight.shape[1]
    if H % 8:
        raise Unsupported(f"hidden {H}: tkreg.gemm needs a multiple of 8")
    if hasattr(a, "q_norm") != hasattr(a, "k_norm"):
        raise Unsupported("q_norm without k_norm (or the reverse)")


def _attention(model, base, cfg, report, device_reason, max_positions) -> None:
    mods = [(f"model.layers.{i}.self_attn", layer.self_attn) for i, layer in enumerate(base.layers)]
    try:
        _reason(device_reason, ATTN_OPS)
        rope.check(base.rotary_emb)
        for _, a in mods:
            _attn_check(a, cfg)
    except Unsupported as e:
        for name, _ in mods:
            report.add(name, "attention", False, str(e))
        report.add("model.rotary_emb", "rotary", False, str(e))
        return
    a0 = mods[0][1]
    p = a0.q_proj.weight
    table = rope.cos_sin_cache(base.rotary_emb, max_positions or cfg.max_position_embeddings, p.dtype, p.device)
    for name, a in mods:
        D = a.head_dim
        w, b = _pack([a.q_proj, a.k_proj, a.v_proj])
        a.register_buffer("_tkreg_qkv", w, persistent=False)
        a._tkreg_qkv_bias = b
        a._tkreg_hq, a._tkreg_hk = a.q_proj.weight.shape[0] // D, a.k_proj.weight.shape[0] // D
        a._tkreg_qk_norm = hasattr(a, "q_norm")
        a._tkreg_cos_sin = table
        _bind(a, layers.attention_forward)
        norm = "qk-norm + " if a._tkreg_qk_norm else ""
        report.add(name, "attention", True, f"qkv packed [{w.shape[0]}, {w.shape[1]}] tkreg.gemm, "
                   f"{norm}rotary + paged K/V write in one qk_norm_rope_cache, "
                   "flash_attention(_varlen) / paged_decode_attention, o_proj gemm")
    base.rotary_emb.forward = types.MethodType(lambda self, x, position_ids: (None, None), base.rotary_emb)
    report.add("model.rotary_emb", "rotary", True, f"cos/sin table [{table.shape[0]}, {table.shape[1]}] "
               f"{str(table.dtype).replace('torch.', '')} built once (rope type {rope.rope_type(base.rotary_emb)!r})")
    _set_attn_implementation(model)


def _set_attn_implementation(model) -> None:
    try:
        model.set_attn_implementation(attention.NAME)
    except Exception:   # older/other transformers: set the config fields directly
        for c in {id(model.config): model.config, id(model.config.get_text_config()): model.config.get_text_config()}.values():
            c._attn_implementation_internal = attention.NAME


def _decoder_layers(base, norms, report) -> None:
    ls = list(base.layers)
    for i, layer in enumerate(ls):
        if id(layer.input_layernorm) not in norms or id(layer.post_attention_layernorm) not in norms:
            report.add(f"model.layers.{i}", "decoder_layer", False, "its norms stay on torch: no fused residual add")
            continue
        nxt_norm = ls[i + 1].input_layernorm if i + 1 < len(ls) else base.norm
        # plain attributes (in __dict__), not submodules: state_dict and named_modules stay as they were
        layer.__dict__["_tkreg_next_norm"] = nxt_norm if id(nxt_norm) in norms else None
        layer.__dict__["_tkreg_next_layer"] = ls[i + 1] if i + 1 < len(ls) else None
        _bind(layer, layers.decoder_layer_forward)
        report.add(f"model.layers.{i}", "decoder_layer", True,
                   "residual adds fused into the next RMSNorm (tkreg.fused_add_rms_norm)")
