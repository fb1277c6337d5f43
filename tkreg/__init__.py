"""tkreg: TileLang kernels compiled ahead of time, dispatched by op, dtype and shape.

`import tkreg` reads no pack and imports no torch; both happen on the first call.
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import errors, ops  # noqa: E402  (ops only imports the registry, which is lazy)
from .api import call, explain, list_ops, register_pack  # noqa: E402
from .errors import LaunchError, NoKernelError, PackError, SpecError, UnsupportedDeviceError  # noqa: E402

__all__ = ["ops", "call", "explain", "list_ops", "register_pack", "errors", "LaunchError",
           "NoKernelError", "PackError", "SpecError", "UnsupportedDeviceError", "__version__"]
