"""The native launcher module, initialised once with the torch objects it needs.

tkreg never links libtorch: the launcher gets torch's dtype objects, `torch.empty` and the
current-stream query as plain Python callables here, and reads tensors through torch's
ABI-stable C shim (`aoti_torch_*`) when this torch exports it and a self-check agrees with the
tensor attributes.  The shim's functions are found here with ctypes in the libtorch that
`import torch` already loaded (never loaded anew), and handed to C as addresses.
"""
from __future__ import annotations

import ctypes
import functools
import os
import warnings

from . import env
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
    _launcher.init(dtypes, torch.empty, get_stream, LaunchError, PackError,
                   (describe, torch.empty_like, torch.Tensor.new_empty, torch.is_grad_enabled))
    enable_shim(_launcher, torch)
    return _launcher


_CODE: dict = {}   # torch dtype -> tkreg dtype code


def describe(x):
    """A tensor's facts through its Python attributes, where the shim does not apply (subclasses,
    other devices, no shim): (dtype code, sizes, strides, contiguous, data_ptr, device); None
    when `x` is no tensor; (-1,) when its dtype is none tkreg names."""
    dtype = getattr(x, "dtype", None)
    if dtype is None or not hasattr(x, "stride"):
        return None
    if dtype not in _CODE:
        return (-1,)
    return (_CODE[dtype], tuple(x.shape), tuple(x.stride()), int(x.is_contiguous()), x.data_ptr(), x.get_device())


def _shim_functions(torch):
    """(function addresses, dtype codes, cpu code, cuda code) from the loaded libtorch, or None."""
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
    addrs = tuple(ctypes.cast(f, ctypes.c_void_p).value or 0 if f is not None else 0 for f in fns)
    return addrs, tuple(codes[:-2]), codes[-2], codes[-1]


def enable_shim(_launcher, torch) -> None:
    """Read tensors through torch's C shim when it is there and agrees with the attributes."""
    _launcher.set_shim(None)
    if env.shim_disabled():
        SHIM_STATE.update(active=False, why="TKREG_DISABLE_SHIM=1")
        return
    found = _shim_functions(torch)
    types = (torch.Tensor, torch.nn.Parameter)
    if found is None or not _launcher.set_shim(*found, types, False):
        SHIM_STATE.update(active=False, why="this torch exports no aoti_torch_* shim")
        return
    probes = [torch.randn(3, 5)[:, 1:], torch.zeros(0, 4, dtype=torch.bfloat16), torch.ones(2, 3, 4, dtype=torch.float16),
              torch.nn.Parameter(torch.randn(7)), torch.arange(10, dtype=torch.int64)[2:].view(2, 4)]
    if torch.cuda.is_available():
        probes.append(torch.empty(5, 8, dtype=torch.bfloat16, device="cuda")[1:])
    for t in probes:
        if _launcher.shim_probe(t) != attributes(t):
            _launcher.set_shim(None)
            SHIM_STATE.update(active=False, why=f"self-check failed on {t.dtype} {tuple(t.shape)}")
            warnings.warn("tkreg: torch's C shim disagreed with the tensor attributes; using the slower "
                          "attribute path", RuntimeWarning, stacklevel=3)
            return
    direct = all(direct_read_ok(t) for t in probes)
    _launcher.set_shim(*found, types, direct)
    SHIM_STATE.update(active=True, why="aoti_torch_* shim, self-checked" + (", direct TensorImpl read" if direct else ""))


def direct_read_ok(t) -> bool:
    """Is the TensorImpl* the word after PyObject_HEAD, as `_cdata` says?  Then the launcher reads it
    there (~60 ns a tensor less than the attribute).  Older torch keeps a MaybeOwned<Tensor> there."""
    return ctypes.c_void_p.from_address(id(t) + object.__basicsize__).value == t._cdata


def attributes(t) -> tuple:
    """What the shim must read from `t`, from its Python attributes."""
    return (tuple(t.shape), tuple(t.stride()), int(t.is_contiguous()), t.data_ptr(),
            DTYPES.index(str(t.dtype)[6:]), t.get_device())


def driver_info() -> tuple[int, list]:
    """(driver version, [(major, minor)] per device) through libcuda, for `tkreg doctor`."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise LaunchError(f"cannot load libcuda.so.1 ({e}): is the NVIDIA driver installed?") from None
    ver, n = ctypes.c_int(), ctypes.c_int()
    for what, r in (("cuInit", cu.cuInit(0)), ("cuDriverGetVersion", cu.cuDriverGetVersion(ctypes.byref(ver))),
                    ("cuDeviceGetCount", cu.cuDeviceGetCount(ctypes.byref(n)))):
        if r:
            raise LaunchError(f"{what} failed with CUDA error {r}")
    caps = []
    for i in range(n.value):
        d, ma, mi = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if cu.cuDeviceGet(ctypes.byref(d), i) or cu.cuDeviceGetAttribute(ctypes.byref(ma), 75, d) \
                or cu.cuDeviceGetAttribute(ctypes.byref(mi), 76, d):
            raise LaunchError(f"cannot read the compute capability of device {i}")
        caps.append((ma.value, mi.value))
    return ver.value, caps
