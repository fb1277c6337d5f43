"""tkreg under transformers models (Llama, Mistral, Qwen2, Qwen3).

    import tkreg
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16).cuda()
    tkreg.kernelize(model)                 # patches in place; print(model.tkreg_report)
    cache = TkregPagedCache(model.config, max_cache_len=4096)
    out = model.generate(**batch, past_key_values=cache, max_new_tokens=64)

Importing this package registers the "tkreg" attention implementation (and its mask function)
with transformers, so `from_pretrained(..., attn_implementation="tkreg")` works after
`import tkreg.integrations.transformers` (transformers has no lazy lookup: import it first).
"""
from __future__ import annotations

from . import attention as _attention
from ._support import Unsupported
from .cache import TkregPagedCache
from .graphs import DecodeGraph, capture_decode, greedy_generate
from .kernelize import kernelize
from .report import KernelizeReport


def register_attention() -> None:
    """Register "tkreg" with transformers' AttentionInterface / AttentionMaskInterface (done on import)."""
    _attention.register()


register_attention()

__all__ = ["kernelize", "KernelizeReport", "TkregPagedCache", "register_attention", "Unsupported",
           "capture_decode", "DecodeGraph", "greedy_generate"]
