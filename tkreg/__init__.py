"""tkreg: TileLang kernels compiled ahead of time, dispatched by op, dtype and shape.

`import tkreg` reads the pack manifests (not the cubins: those load on a device's first call)
and registers every op with torch as `torch.ops.<namespace>.<op>`.
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import errors, ops  # noqa: E402  (ops only imports the registry, which is lazy)
from .api import call, explain, list_ops, register_pack  # noqa: E402
from .errors import LaunchError, NoKernelError, PackError, SpecError, UnsupportedDeviceError  # noqa: E402



def _register_torch_ops():
    """torch.ops.<ns>.<op> for every op, so torch.compile can trace tkreg calls from the start."""
    import warnings
    try:
        from . import torch_library
        torch_library.register_all()
    except Exception as e:  # noqa: BLE001 - eager calls still work; compiled code graph-breaks
        warnings.warn(f"tkreg: torch custom ops not registered ({type(e).__name__}: {e}); torch.compile "
                      "will graph-break at tkreg calls", RuntimeWarning, stacklevel=2)


_register_torch_ops()

__all__ = ["ops", "call", "explain", "list_ops", "register_pack", "errors", "LaunchError",
           "NoKernelError", "PackError", "SpecError", "UnsupportedDeviceError", "__version__"]
