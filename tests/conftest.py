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


@pytest.fixture(autouse=True, scope="session")
def _test_device():
    """TKREG_TEST_DEVICE=1 makes cuda:1 the current device for the whole session, so every "cuda"
    tensor of the GPU tests lands there (the suite's second-device run)."""
    index = os.environ.get("TKREG_TEST_DEVICE")
    if index and HAS_GPU:
        import torch
        torch.cuda.set_device(int(index))
    yield


@pytest.fixture
def seed(request):
    """A per-test seed derived from the test id, so failures reproduce."""
    import zlib
    import torch
    s = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(s)
    return s


def _captured(fn):
    """fn() captured into a CUDA graph after a warm-up on a side stream: (graph, its outputs)."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


@pytest.fixture(scope="session")
def captured():
    """`captured(fn)`: fn() captured into a CUDA graph after a side-stream warm-up -> (graph, outputs)."""
    return _captured


@pytest.fixture(scope="session")
def c_eval():
    """`c_eval(prog, values, want)`: does the launcher's evaluator give `want` for the program over
    int64 slots M, N, K?  Run through the real dispatch path: a one-variant op whose rule is
    `prog == want`, explained on the CPU.  want=None: the program must fail to evaluate (it then
    rejects both `== 0` and `!= 0`)."""
    import torch

    from tkreg import assemble
    from tkreg.codes import REJECTS
    from tkreg.native import launcher
    from tkreg.launch_plan import Constraint, Launch, Plan
    from tkreg.spec import OpSpec, Scalar, Tensor
    spec = OpSpec("t.eval", (Tensor("x", ("L",), dtypes=("int8",)),),
                  tuple(Scalar(n, "int64", 0) for n in ("M", "N", "K")))
    L = launcher()
    op = L.Op(spec.name, *assemble.op_args(spec), (None,) * 4)
    x = torch.empty(1, dtype=torch.int8)
    kernel = Launch("k", ([1], [1], [1]), (1, 1, 1), [0])

    def accepts(prog):
        plan = Plan({"x": "int8"}, (Constraint("rule", tuple(prog)),), (kernel,))
        v = L.Variant("v", *assemble.variant_args(spec, {}, plan, "t.eval"), None)
        return lambda values: op.check((x, *values), {}, (v,))[3][0][1] == REJECTS["accepted"]

    def run(prog, values, want):
        if want is None:
            return not accepts(list(prog) + [0, "=="])(values) and not accepts(list(prog) + [0, "!="])(values)
        return accepts(list(prog) + [int(want), "=="])(values)
    return run
