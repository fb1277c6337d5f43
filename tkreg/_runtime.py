"""The native launcher module, initialised once with the torch objects it needs.

tkreg never links libtorch: the launcher gets torch's dtype objects, `torch.empty` and the
current-stream query as plain Python callables here, and may switch on its fast path over
torch's ABI-stable C shim (see `_enable_shim`).
"""
from __future__ import annotations

import functools
import os
import warnings

from . import env
from .errors import LaunchError
from .spec import DTYPES

SHIM_STATE = {"active": False, "why": "not initialised"}


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
    T = torch.Tensor
    _launcher.init(dtypes, torch.empty, get_stream, LaunchError,
                   (T.data_ptr, T.size, T.is_contiguous, T.get_device, T.stride, torch.empty_like, T.new_empty,
                    torch.is_grad_enabled))
    _enable_shim(_launcher, torch)
    return _launcher


def _enable_shim(_launcher, torch) -> None:
    """Read tensors through torch's C shim when it is there and agrees with the attributes."""
    if env.shim_disabled():
        SHIM_STATE.update(active=False, why="TKREG_DISABLE_SHIM=1")
        return
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    libs = tuple(os.path.join(lib, f) for f in ("libtorch_cuda.so", "libtorch_cpu.so", "libtorch.so")
                 if os.path.exists(os.path.join(lib, f)))
    if not _launcher.enable_shim(libs, DTYPES, (torch.Tensor, torch.nn.Parameter)):
        SHIM_STATE.update(active=False, why="this torch exports no aoti_torch_* shim")
        return
    probes = [torch.randn(3, 5)[:, 1:], torch.zeros(0, 4, dtype=torch.bfloat16), torch.ones(2, 3, 4, dtype=torch.float16),
              torch.nn.Parameter(torch.randn(7)), torch.arange(10, dtype=torch.int64)[2:].view(2, 4)]
    if torch.cuda.is_available():
        probes.append(torch.empty(5, 8, dtype=torch.bfloat16, device="cuda")[1:])
    for t in probes:
        want = (tuple(t.shape), int(t.is_contiguous()), t.data_ptr(), DTYPES.index(str(t.dtype)[6:]), t.get_device())
        if _launcher.shim_probe(t) != want:
            _launcher.disable_shim()
            SHIM_STATE.update(active=False, why=f"self-check failed on {t.dtype} {tuple(t.shape)}")
            warnings.warn("tkreg: torch's C shim disagreed with the tensor attributes; using the slower "
                          "attribute path", RuntimeWarning, stacklevel=3)
            return
    direct = _launcher.enable_direct(tuple(probes))
    SHIM_STATE.update(active=True, why="aoti_torch_* shim, self-checked" + (", direct TensorImpl read" if direct else ""))
