"""The native launcher module, initialised once with the torch objects it needs.

tkreg never links libtorch: the launcher gets torch's dtype objects, `torch.empty` and the
current-stream query as plain Python callables here, and reads tensors through torch's
ABI-stable C shim (`aoti_torch_*`) when this torch exports it and a self-check agrees with the
tensor attributes.  The shim's functions are found here with ctypes in the libtorch that
`import torch` already loaded (never loaded anew), and handed to C as addresses; so are the CUDA
driver's (tkreg/driver_api.py), from libcuda.so.1, loaded at the first launch.
"""
from __future__ import annotations

import ctypes
import functools
import os
import warnings
from array import array

from . import env
from .codes import ERRORS, LIMITS
from .driver_api import driver, pointers
from .errors import LaunchError, PackError
from .spec import DTYPES

SHIM_STATE = {"active": False, "why": "not initialised"}
_SHIM_FUNCS = ("get_data_ptr", "get_sizes", "get_strides", "get_dim", "get_dtype", "get_device_type",
               "get_device_index", "get_current_cuda_stream", "grad_mode_is_enabled")


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
    _CODE.update({d: i for i, d in enumerate(dtypes)})
    from .diagnose import failure
    _launcher.init(dtypes, torch.empty, get_stream, LaunchError, PackError,
                   (describe, torch.empty_like, torch.Tensor.new_empty, torch.is_grad_enabled,
                    functools.partial(driver, _launcher.DRIVER_FUNCS), failure))
    enable_shim(_launcher, torch)
    return _launcher


_CODE: dict = {}   # torch dtype -> tkreg dtype code


def describe(x):
    """A tensor's facts through its Python attributes, where the shim does not apply (subclasses,
    other devices, no shim), packed as the launcher reads them: int64 dtype code, rank, device,
    contiguous, sizes and strides (each padded to MAXRANK), data_ptr.  Or the refusal code when
    `x` is no tensor, has a dtype tkreg does not name, or more dims than any op takes."""
    dtype = getattr(x, "dtype", None)
    if dtype is None or not hasattr(x, "stride"):
        return ERRORS["not_tensor"]
    if dtype not in _CODE:
        return ERRORS["dtype_unknown"]
    if x.dim() > LIMITS["MAXRANK"]:
        return ERRORS["rank"]
    shape, pad = tuple(x.shape), (0,) * (LIMITS["MAXRANK"] - x.dim())
    return array("q", (_CODE[dtype], len(shape), x.get_device(), int(x.is_contiguous()), *shape, *pad,
                       *x.stride(), *pad, x.data_ptr())).tobytes()


def _shim_functions(torch):
    """(function pointers, dtype codes, cpu code, cuda code) from the loaded libtorch, or None."""
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    handles = []
    for f in ("libtorch_cuda.so", "libtorch_cpu.so", "libtorch.so"):
        try:
            handles.append(ctypes.CDLL(os.path.join(lib, f), mode=os.RTLD_NOLOAD | os.RTLD_LAZY))
        except OSError:
            continue

    def find(name):
        for h in handles:
            try:
                return getattr(h, name)
            except AttributeError:
                continue
        return None

    fns = [find("aoti_torch_" + n) for n in _SHIM_FUNCS]
    if any(f is None for f in fns[:7]):
        return None
    codes = []
    for n in DTYPES + ("device_type_cpu", "device_type_cuda"):
        f = find(("aoti_torch_dtype_" if n in DTYPES else "aoti_torch_") + n)
        if f is not None:
            f.restype = ctypes.c_int32
        codes.append(f() if f is not None else -99)
    if -99 in codes[-2:]:
        return None
    return pointers(fns), tuple(codes[:-2]), codes[-2], codes[-1]


def enable_shim(_launcher, torch) -> None:
    """Read tensors through torch's C shim when it is there and agrees with the attributes."""
    _launcher.set_shim(None)
    if env.shim_disabled():
        SHIM_STATE.update(active=False, why="TKREG_DISABLE_SHIM=1")
        return
    found = _shim_functions(torch)
    types = (torch.Tensor, torch.nn.Parameter)
    if found is None or not _launcher.set_shim(*found, types, False, 0):
        SHIM_STATE.update(active=False, why="this torch exports no aoti_torch_* shim")
        return
    probes = [torch.randn(3, 5)[:, 1:], torch.zeros(0, 4, dtype=torch.bfloat16), torch.ones(2, 3, 4, dtype=torch.float16),
              torch.nn.Parameter(torch.randn(7)), torch.arange(10, dtype=torch.int64)[2:].view(2, 4)]
    if torch.cuda.is_available():
        probes.append(torch.empty(5, 8, dtype=torch.bfloat16, device="cuda")[1:])
    for t in probes:
        if _launcher.shim_probe(t) != describe(t):
            _launcher.set_shim(None)
            SHIM_STATE.update(active=False, why=f"self-check failed on {t.dtype} {tuple(t.shape)}")
            warnings.warn("tkreg: torch's C shim disagreed with the tensor attributes; using the slower "
                          "attribute path", RuntimeWarning, stacklevel=3)
            return
    direct = all(direct_read_ok(t) for t in probes)
    grad_off = autograd_meta_offset(torch) if direct else 0
    _launcher.set_shim(*found, types, direct, grad_off)
    SHIM_STATE.update(active=True, why="aoti_torch_* shim, self-checked" + (", direct TensorImpl read" if direct else "")
                      + (", autograd meta read" if grad_off else ""))


def direct_read_ok(t) -> bool:
    """Is the TensorImpl* the word after PyObject_HEAD, as `_cdata` says?  Then the launcher reads it
    there (~60 ns a tensor less than the attribute).  Older torch keeps a MaybeOwned<Tensor> there."""
    return ctypes.c_void_p.from_address(id(t) + object.__basicsize__).value == t._cdata


AUTOGRAD_META = 24   # c10::TensorImpl: vtable, two refcounts, storage_, then autograd_meta_


def autograd_meta_offset(torch) -> int:
    """AUTOGRAD_META when that TensorImpl word is null for tensors that never met autograd and set
    for ones that did, else 0.  Then the launcher's grad-mode check skips the `requires_grad`
    attribute (~0.1 us a tensor) for tensors with no autograd meta: those cannot require grad."""
    def word(t):
        return ctypes.c_void_p.from_address(t._cdata + AUTOGRAD_META).value
    plain = [torch.empty(3), torch.zeros(2, 4, dtype=torch.bfloat16), torch.empty(4, requires_grad=True).detach()]
    grad = [torch.empty(2, requires_grad=True), torch.nn.Parameter(torch.ones(3)), torch.zeros(5).requires_grad_()]
    return AUTOGRAD_META if all(word(t) is None for t in plain) and all(word(t) for t in grad) else 0
