"""The launcher's two ways of reading a tensor (torch's C shim, the Python attributes) agree."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tkreg.native import AUTOGRAD_META, SHIM_STATE, autograd_meta_offset, describe, direct_read_ok, enable_shim, launcher

DT = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.bool]


def test_fast_path_is_active():
    launcher()
    assert SHIM_STATE["active"], SHIM_STATE


@settings(max_examples=200, deadline=None)
@given(shape=st.lists(st.integers(0, 6), min_size=0, max_size=4), dt=st.sampled_from(DT),
       offset=st.integers(0, 3), transpose=st.booleans(), param=st.booleans())
def test_shim_reads_what_the_attributes_say(shape, dt, offset, transpose, param):
    n = 1
    for d in shape:
        n *= d
    t = torch.zeros(n + offset, dtype=dt)[offset:].view(shape)
    if transpose and t.dim() >= 2:
        t = t.transpose(0, 1)
    if param and dt.is_floating_point:
        t = torch.nn.Parameter(t)
    assert launcher().shim_probe(t) == describe(t)


def test_direct_tensorimpl_read_is_checked():
    """The `_cdata`-free read is on only when the object layout matched on the probes, and the
    shim refuses anything that is not an exact Tensor / Parameter."""
    import ctypes
    t = torch.zeros(3)
    layout_ok = ctypes.c_void_p.from_address(id(t) + 16).value == t._cdata  # word after PyObject_HEAD
    assert ("direct" in SHIM_STATE["why"]) == layout_ok, SHIM_STATE
    assert direct_read_ok(t) is layout_ok and direct_read_ok(torch.nn.Parameter(torch.zeros(3))) is layout_ok
    t = torch.arange(6.0)[1:]
    assert launcher().shim_probe(t) == describe(t)


def test_autograd_meta_read_is_checked():
    """The launcher skips `requires_grad` only for tensors whose TensorImpl has no autograd meta;
    every tensor that requires grad (leaves, views, op outputs, Parameters) must have it."""
    import ctypes
    off = autograd_meta_offset(torch)
    assert off in (0, AUTOGRAD_META)
    assert ("autograd meta" in SHIM_STATE["why"]) == bool(off), SHIM_STATE
    if not off:
        pytest.skip("this torch's TensorImpl layout differs: the attribute path is used")
    x = torch.randn(4, 6, requires_grad=True)
    needs = [x, x[1:], x.t(), x * 2, x.view(24), torch.nn.Parameter(torch.ones(2)), torch.zeros(3).requires_grad_()]
    for t in needs:
        assert t.requires_grad and ctypes.c_void_p.from_address(t._cdata + off).value, t
    with torch.no_grad():
        y = x * 2                       # made with grad off: no meta, and it needs none
    assert not y.requires_grad


def test_subclasses_take_the_attribute_path():
    class Sub(torch.Tensor):
        pass
    assert launcher().shim_probe(torch.zeros(3).as_subclass(Sub)) is None
    assert launcher().shim_probe(torch.zeros(3, device="meta")) is None


@pytest.fixture
def attribute_path():
    launcher().set_shim(None)
    yield
    enable_shim(launcher(), torch)
    assert SHIM_STATE["active"]


def test_validation_is_the_same_on_the_attribute_path(attribute_path, monkeypatch):
    import tkreg
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    bf = torch.bfloat16
    cases = [
        ((torch.randn(2, 1024), torch.randn(1024)), TypeError, "`x` has dtype torch.float32"),
        ((torch.randn(1024, 2, dtype=bf).t(), torch.randn(1024, dtype=bf)), ValueError, "`x` must be contiguous"),
        ((torch.randn(2 * 1024 + 1, dtype=bf)[1:].view(2, 1024), torch.randn(1024, dtype=bf)), ValueError, "16-byte"),
        ((torch.randn(2, 1024, dtype=bf), torch.randn(1024, dtype=bf)), ValueError, "on the CPU"),
    ]
    for args, err, msg in cases:
        with pytest.raises(err, match=msg):
            tkreg.ops.rms_norm(*args)


def test_more_dims_than_the_launcher_holds_is_a_rank_refusal():
    """The shim declines a tensor of more than MAXRANK dims; describe reports it as the rank
    refusal, so the user hears the op's rank, not an internal limit."""
    import tkreg
    from tkreg.codes import ERRORS, LIMITS
    launcher()
    x = torch.zeros((1,) * (LIMITS["MAXRANK"] + 1), dtype=torch.bfloat16)
    assert launcher().shim_probe(x) is None and describe(x) == ERRORS["rank"]
    with pytest.raises(ValueError, match=r"tkreg.rms_norm: argument `x` must have 2 dims"):
        tkreg.ops.rms_norm(x, torch.zeros(1, dtype=torch.bfloat16))
