"""The CUDA driver through ctypes: libcuda.so.1 loaded and initialised once, its entry points
packed for the C launcher, error names and device facts.  Nothing here imports torch."""
from __future__ import annotations

import ctypes
import functools
from array import array

from .errors import LaunchError


@functools.lru_cache(maxsize=None)
def libcuda():
    """libcuda.so.1, initialised; LaunchError saying what is missing (tried again on each call)."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise LaunchError(f"cannot load libcuda.so.1 ({e}): is the NVIDIA driver installed?") from None
    r = cu.cuInit(0)
    if r:
        raise LaunchError(f"cuInit failed: {cu_error(r, cu)}")
    return cu


def driver(names: str) -> bytes:
    """The driver entry points `names` (space-separated), packed as the launcher's table of
    function pointers; asked for at its first launch."""
    cu = libcuda()
    missing = [n for n in names.split() if not hasattr(cu, n)]
    if missing:
        raise LaunchError(f"libcuda.so.1 lacks {missing[0]}: tkreg needs a driver for CUDA 13.0 (R580 or newer)")
    return pointers(getattr(cu, n) for n in names.split())


def pointers(fns) -> bytes:
    """C function pointers in a row (a struct of them), from ctypes functions; 0 for None."""
    return array("Q", (ctypes.cast(f, ctypes.c_void_p).value or 0 if f is not None else 0 for f in fns)).tobytes()


def cu_error(code: int, cu=None) -> str:
    """`NAME (code): description` of a CUresult."""
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    cu = cu or libcuda()
    cu.cuGetErrorName(code, ctypes.byref(name)), cu.cuGetErrorString(code, ctypes.byref(text))
    return f"{(name.value or b'CUDA error').decode()} ({code}): {(text.value or b'unknown').decode()}"


def driver_info() -> tuple[int, list]:
    """(driver version, [(major, minor)] per device) through libcuda, for `tkreg doctor`."""
    cu = libcuda()
    ver, n = ctypes.c_int(), ctypes.c_int()
    for what, r in (("cuDriverGetVersion", cu.cuDriverGetVersion(ctypes.byref(ver))),
                    ("cuDeviceGetCount", cu.cuDeviceGetCount(ctypes.byref(n)))):
        if r:
            raise LaunchError(f"{what} failed: {cu_error(r, cu)}")
    caps = []
    for i in range(n.value):
        d, ma, mi = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if cu.cuDeviceGet(ctypes.byref(d), i) or cu.cuDeviceGetAttribute(ctypes.byref(ma), 75, d) \
                or cu.cuDeviceGetAttribute(ctypes.byref(mi), 76, d):
            raise LaunchError(f"cannot read the compute capability of device {i}")
        caps.append((ma.value, mi.value))
    return ver.value, caps
