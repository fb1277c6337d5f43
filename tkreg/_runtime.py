"""The native launcher module, initialised once with the torch objects it needs.

tkreg never links libtorch: the launcher gets torch's dtype objects, `torch.empty` and the
current-stream query as plain Python callables here.
"""
from __future__ import annotations

import functools

from .errors import LaunchError
from .spec import DTYPES


class _Missing:
    """Stands in for a dtype this torch lacks; no tensor ever has it."""


@functools.lru_cache(maxsize=None)
def launcher():
    import torch

    from . import _launcher
    get_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get_stream is None:
        def get_stream(dev):
            raise LaunchError("this torch build has no CUDA support")
    dtypes = tuple(getattr(torch, n, None) or _Missing() for n in DTYPES)
    _launcher.init(dtypes, torch.empty, get_stream, LaunchError)
    return _launcher
