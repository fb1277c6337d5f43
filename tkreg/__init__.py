"""tkreg: TileLang kernels compiled ahead of time, dispatched by op, dtype and shape.

`import tkreg` reads nothing: the packs load on the first op call (or `tkreg.list_ops()`...),
and an op becomes the torch custom op `torch.ops.<namespace>.<op>` when something needs it as
one: `torch.compile` tracing a typed op (no tkreg call needed before), autograd, or
`tkreg.register_torch_ops()`, which registers every op.  Build tools import `tkreg.spec`
without loading any pack.
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import errors  # noqa: E402
from .errors import LaunchError, NoKernelError, PackError, SpecError, UnsupportedDeviceError  # noqa: E402

_LAZY = {"call": "api", "explain": "api", "list_ops": "api", "register_pack": "api",
         "kernelize": "integrations.transformers"}   # imports transformers on first use only


def __getattr__(name):  # PEP 562: the run time is imported on first use, not by `import tkreg.spec`
    import importlib
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name in ("ops", "nn", "blocks", "runtime", "registry", "api", "torch_library", "reference", "bench", "cli"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tkreg' has no attribute {name!r}")


def register_torch_ops() -> list[str]:
    """Register every op of every pack as `torch.ops.<ns>.<op>` now (compiling a typed op
    registers the ones it needs by itself).  Returns the op names."""
    from .runtime import RUNTIME
    return RUNTIME.register_torch()


__all__ = ["ops", "blocks", "call", "explain", "kernelize", "list_ops", "register_pack", "register_torch_ops", "errors",
           "LaunchError", "NoKernelError", "PackError", "SpecError", "UnsupportedDeviceError", "__version__"]
