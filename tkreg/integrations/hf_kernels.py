"""tkreg's layers for Hugging Face `kernels` (huggingface/kernels): `kernels.kernelize` puts the
layer names transformers' models declare (`@use_kernel_forward_from_hub("RMSNorm")`, ...) on
tkreg's ops, served from the installed wheel: no Hub download, nothing built at run time.

    from kernels import kernelize, Mode
    import tkreg.integrations.hf_kernels as tk
    tk.register()                      # or: with tk.use_tkreg(): model = kernelize(...)
    model = kernelize(model, mode=Mode.INFERENCE, device="cuda")

What maps (layer name -> tkreg op, kernels modes):
- "RMSNorm" -> tkreg.rms_norm (Mode.INFERENCE and Mode.TRAINING: rms_norm has a backward kernel);
- "rotary_pos_emb" (transformers' apply_rotary_pos_emb, attached with use_kernelized_func) ->
  tkreg.rotary_embedding over a per-token cos/sin table (Mode.INFERENCE; no backward).
Modes with Mode.TORCH_COMPILE stay on the stock forwards (Inductor fuses those into neighbours).
What does not map: transformers 5.17 declares no layer name on the MLP, attention or decoder layer
of Llama / Mistral / Qwen2 / Qwen3, so `kernels` cannot reach them; `tkreg.kernelize(model)` packs
and replaces those (and fuses the residual adds).  Each forward keeps the stock forward for what
tkreg does not serve: a dtype other than bf16/fp16, a CPU tensor without TKREG_FALLBACK=reference,
a head dim other than 64/128, and any class whose stock forward is not Llama's math (GPT-OSS,
OLMo-2 and a few others round differently).

The repositories (`TkregLayerRepository`) follow kernels' repository protocol (`layer_name`,
`load()`) and load this module's `layers` namespace, the shape a kernels Hub repository has.  The
CUDA entries carry the compute capabilities of the installed packs (so another GPU keeps the stock
forward); a "cpu" entry is added only under TKREG_FALLBACK=reference (the torch references, for
tests).  Importing this module imports neither `kernels`, transformers nor torch.
"""
from __future__ import annotations

# layer name transformers declares -> (name in `layers`, the tkreg op it runs, kernels modes)
LAYERS = {
    "RMSNorm": ("RMSNorm", "tkreg.rms_norm", ("INFERENCE", "TRAINING")),
    "rotary_pos_emb": ("RotaryPosEmb", "tkreg.rotary_embedding", ("INFERENCE",)),
}
ROTARY_HEAD_DIMS = (64, 128)


class TkregLayerRepository:
    """A `kernels` layer repository whose layer is one of this module's `layers` classes:
    `load()` downloads nothing and builds nothing."""

    def __init__(self, layer_name: str):
        if layer_name not in {v[0] for v in LAYERS.values()}:
            raise ValueError(f"tkreg.integrations.hf_kernels: no layer `{layer_name}`; "
                             f"tkreg serves {', '.join(v[0] for v in LAYERS.values())}")
        self.layer_name = layer_name

    def load(self):
        return getattr(_layers(), self.layer_name)

    def __eq__(self, other):
        return isinstance(other, TkregLayerRepository) and other.layer_name == self.layer_name

    def __hash__(self):
        return hash(("tkreg", self.layer_name))

    def __str__(self) -> str:
        return f"tkreg (installed wheel), layer `{self.layer_name}`"

    __repr__ = __str__


def mapping() -> dict:
    """The kernel mapping for `kernels.register_kernel_mapping` / `use_kernel_mapping`:
    {layer name: {Device: {Mode: TkregLayerRepository}}}."""
    k = _kernels()
    from .. import env
    out = {}
    for name, (layer, op, modes) in LAYERS.items():
        repo = TkregLayerRepository(layer)
        by_mode = {getattr(k.Mode, m): repo for m in modes}
        devices = {k.Device(type="cuda", properties=k.CUDAProperties(min_capability=c, max_capability=c)):
                   dict(by_mode) for c in _capabilities(op)}
        if env.fallback_reference():
            devices[k.Device(type="cpu")] = dict(by_mode)
        out[name] = devices
    return out


def register() -> None:
    """Add tkreg's layers to kernels' global mapping (`kernels.register_kernel_mapping`)."""
    _kernels().register_kernel_mapping(mapping())


def use_tkreg(*, inherit_mapping: bool = True):
    """A context manager (`kernels.use_kernel_mapping`) with tkreg's layers in the mapping;
    `inherit_mapping=False`: tkreg's layers only."""
    return _kernels().use_kernel_mapping(mapping(), inherit_mapping=inherit_mapping)


def _kernels():
    try:
        import kernels
    except ImportError as e:
        raise ImportError("tkreg.integrations.hf_kernels needs Hugging Face `kernels` (`pip install "
                          "'kernels>=0.16,<0.17'` for transformers 5.17); `tkreg.kernelize(model)` needs "
                          f"no extra package ({e})") from None
    return kernels


def _capabilities(op: str) -> list:
    """Compute capabilities (major * 10 + minor) the installed packs hold `op` for."""
    import tkreg
    from ..registry import ARCHS
    archs = next((o["archs"] for o in tkreg.list_ops() if o["op"] == op), [])
    return sorted(ARCHS[a][0] * 10 + ARCHS[a][1] for a in archs if a in ARCHS)


# ---- the layers -------------------------------------------------------------------------------
# kernels requires a layer class with no constructor and no members beyond nn.Module's (and the
# flags has_backward / can_torch_compile), its forward's arguments matching the stock forward's;
# the forward runs bound to the stock module, reading its weight and eps.
_LAYERS = None
_SAME_MATH: dict = {}


def __getattr__(name):
    if name == "layers":
        return _layers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _layers():
    """The `layers` namespace (built on first use: it imports torch)."""
    global _LAYERS
    if _LAYERS is None:
        import types

        import torch

        class RMSNorm(torch.nn.Module):
            """tkreg.rms_norm over the last dim with the module's weight and variance_epsilon."""
            forward = _rms_norm_forward

        class RotaryPosEmb(torch.nn.Module):
            """transformers' apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim) on tkreg.rotary_embedding."""
            has_backward = False
            forward = _rotary_forward

        _LAYERS = types.SimpleNamespace(RMSNorm=RMSNorm, RotaryPosEmb=RotaryPosEmb)
    return _LAYERS


def _rms_norm_forward(self, hidden_states):
    w = getattr(self, "weight", None)
    if not (_served(hidden_states) and w is not None and w.dtype == hidden_states.dtype
            and hasattr(self, "variance_epsilon") and _same_math(type(self), "norm")):
        return type(self).forward(self, hidden_states)
    from .transformers import layers
    return layers.rms_norm_train_forward(self, hidden_states)


def _rotary_forward(self, q, k, cos, sin, unsqueeze_dim=1):
    D = q.shape[-1]
    if not (_served(q) and q.dim() == 4 and k.dim() == 4 and D in ROTARY_HEAD_DIMS and k.dtype == q.dtype
            and cos.dtype == q.dtype and cos.dim() == 3 and cos.shape[-1] == D and unsqueeze_dim in (1, 2)
            and _same_math(type(self), "rotary")):
        return type(self).forward(self, q, k, cos, sin, unsqueeze_dim)
    import torch

    from .. import ops
    qs, ks = (q.transpose(1, 2), k.transpose(1, 2)) if unsqueeze_dim == 1 else (q, k)     # [B, S, H, D]
    B, S, HQ, _ = qs.shape
    HK, T = ks.shape[2], B * S
    # rows of a table indexed by token: transformers' cos/sin repeat their first half (cat(freqs, freqs))
    table = torch.cat([cos[..., :D // 2], sin[..., :D // 2]], -1).expand(B, S, D).reshape(T, D)
    qc = qs.clone(memory_format=torch.contiguous_format)         # a copy: q and k stay as the caller had them
    kc = ks.clone(memory_format=torch.contiguous_format)
    ops.rotary_embedding(torch.arange(T, device=q.device), qc.view(T, HQ * D), kc.view(T, HK * D), table, True)
    return (qc.transpose(1, 2), kc.transpose(1, 2)) if unsqueeze_dim == 1 else (qc, kc)


def _served(x) -> bool:
    import torch
    if x.dtype not in (torch.bfloat16, torch.float16):
        return False
    if x.is_cuda:
        return True
    from .. import env
    return x.device.type == "cpu" and env.fallback_reference()


def _same_math(cls, what: str) -> bool:
    """Whether `cls`'s stock forward is Llama's (same bytecode): RMSNorm with the weight applied
    after the cast, or apply_rotary_pos_emb with rotate_half.  Asked once per class."""
    ok = _SAME_MATH.get(cls)
    if ok is None:
        try:
            from transformers.models.llama import modeling_llama as llama
        except ImportError:
            ok = False
        else:
            ref = llama.LlamaRMSNorm.forward if what == "norm" else _wrapped(type(llama.apply_rotary_pos_emb))
            fn = cls.forward if what == "norm" else _wrapped(cls)
            ok = fn is not None and ref is not None and _code_key(fn) == _code_key(ref)
        _SAME_MATH[cls] = ok
    return ok


def _wrapped(func_cls):
    """The function a kernels function layer (`use_kernel_forward_from_hub` on a function) calls."""
    for cell in getattr(func_cls.forward, "__closure__", None) or ():
        if callable(cell.cell_contents) and hasattr(cell.cell_contents, "__code__"):
            return cell.cell_contents
    return None


def _code_key(fn) -> tuple:
    c = fn.__code__
    return c.co_code, c.co_consts, c.co_names, c.co_varnames
