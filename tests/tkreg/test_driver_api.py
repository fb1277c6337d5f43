"""tkreg/driver_api.py without a GPU: libcuda's entry points, and what the launcher reports
(tkreg/diagnose.py, in the driver's words) when the driver or a pack fails."""
from __future__ import annotations

import ctypes

import pytest

from tkreg import diagnose, driver_api, native
from tkreg.errors import LaunchError, PackError


@pytest.fixture
def fresh_libcuda():
    driver_api.libcuda.cache_clear()
    yield
    driver_api.libcuda.cache_clear()


class FakeCuda:
    """libcuda.so.1 as ctypes shows it: functions by name, cuInit's result chosen."""
    def __init__(self, init=0, lacks=()):
        self._init, self._lacks = init, lacks
        self._keep = {}

    def __getattr__(self, name):
        if name.startswith("_") or name in self._lacks:
            raise AttributeError(name)
        if name == "cuInit":
            return lambda flags: self._init
        if name in ("cuGetErrorName", "cuGetErrorString"):
            def text(code, out):
                ctypes.cast(out, ctypes.POINTER(ctypes.c_char_p))[0] = b"CUDA_ERROR_NO_DEVICE" if name == "cuGetErrorName" \
                    else b"no CUDA-capable device is detected"
                return 0
            return text
        f = self._keep.setdefault(name, ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0))
        return f


def test_no_driver_says_to_install_one(monkeypatch, fresh_libcuda):
    def missing(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(driver_api.ctypes, "CDLL", missing)
    with pytest.raises(LaunchError, match=r"cannot load libcuda.so.1 .*is the NVIDIA driver installed\?"):
        driver_api.driver("cuLaunchKernel")


def test_an_old_driver_names_the_missing_entry_point_and_the_driver_needed(monkeypatch, fresh_libcuda):
    monkeypatch.setattr(driver_api.ctypes, "CDLL", lambda name, *a, **k: FakeCuda(lacks=("cuFuncGetParamInfo",)))
    with pytest.raises(LaunchError, match=r"lacks cuFuncGetParamInfo: .*CUDA 13.0 \(R580 or newer\)"):
        driver_api.driver("cuLaunchKernel cuFuncGetParamInfo")


def test_cuinit_failure_gives_the_drivers_own_words(monkeypatch, fresh_libcuda):
    monkeypatch.setattr(driver_api.ctypes, "CDLL", lambda name, *a, **k: FakeCuda(init=100))
    with pytest.raises(LaunchError, match=r"cuInit failed: CUDA_ERROR_NO_DEVICE \(100\): no CUDA-capable device"):
        driver_api.driver("cuLaunchKernel")


def test_entry_points_are_packed_as_the_launchers_table(monkeypatch, fresh_libcuda):
    names = native.launcher().DRIVER_FUNCS   # initialised before libcuda is faked
    cu = FakeCuda()
    monkeypatch.setattr(driver_api.ctypes, "CDLL", lambda name, *a, **k: cu)
    table = driver_api.driver(names)
    assert len(table) == 8 * len(names.split())
    first = int.from_bytes(table[:8], "little")
    assert first == ctypes.cast(getattr(cu, names.split()[0]), ctypes.c_void_p).value != 0


@pytest.mark.parametrize("kind, facts, exc, match", [
    ("param_size", ("k0", 2, 4, 8), PackError, r"t.op\[v\]: kernel k0 parameter 2 is 4 bytes in the cubin, the plan gives 8 bytes: the pack is broken, rebuild it"),
    ("param_count", ("k0", 5, 4), PackError, r"t.op\[v\]: kernel k0 takes 5 parameters in the cubin, the plan lists 4: the pack is broken"),
    ("param_bytes", ("k0", 9000), PackError, r"t.op\[v\]: kernel k0 parameters take 9000 bytes"),
    ("no_kernel", ("k1", 500), PackError, r"t.op\[v\]: the cubin has no kernel k1 \(CUDA_ERROR_NO_DEVICE \(500\).*rebuild it"),
    ("cuda", (700, "cuLaunchKernel"), LaunchError, r"t.op\[v\]: cuLaunchKernel failed: CUDA_ERROR_NO_DEVICE \(700\)"),
])
def test_failures_the_launcher_reports_are_written_here(monkeypatch, fresh_libcuda, kind, facts, exc, match):
    monkeypatch.setattr(driver_api.ctypes, "CDLL", lambda name, *a, **k: FakeCuda())
    with pytest.raises(exc, match=match):
        diagnose.failure(kind, "t.op", "v", *facts)
    with pytest.raises(exc, match=r"^t.op: "):
        diagnose.failure(kind, "t.op", None, *facts)
