"""Tests run against the *installed* tkreg (the wheel), never the source tree's `tkreg/`.

The source folder has no compiled launcher and no packs; importing it would test nothing real.
So the repo root leaves sys.path before `tkreg` is imported, and comes back (at the end) only
for `build_tools` and `kernels_src`, which are build-time code and are never installed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _is_root(p: str) -> bool:
    try:
        return Path(p or os.getcwd()).resolve() == ROOT
    except OSError:
        return False


_saved = list(sys.path)
sys.path[:] = [p for p in sys.path if not _is_root(p)]
try:
    import tkreg  # noqa: E402
except ImportError as e:  # pragma: no cover - the message is the point
    raise pytest.UsageError(f"tkreg is not installed ({e}); build and install the wheel first "
                            "(README, command 1)") from None
finally:
    if any(_is_root(p) for p in _saved) or (ROOT / "build_tools").is_dir():
        sys.path.append(str(ROOT))

if Path(tkreg.__file__).resolve().is_relative_to(ROOT / "tkreg"):
    raise pytest.UsageError(f"tests imported the source tree's tkreg ({tkreg.__file__}), not the wheel")


def _cuda_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


HAS_GPU = _cuda_available()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def seed(request):
    """A per-test seed derived from the test id, so failures reproduce."""
    import zlib
    import torch
    s = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(s)
    return s
