"""OpSpec: keys round-trip, JSON round-trips, malformed specs fail with a clear SpecError."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkreg.errors import SpecError
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

names = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
values = st.one_of(st.integers(-10**6, 10**6), st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True))


@given(st.dictionaries(names, values, max_size=5))
def test_variant_key_round_trips(params):
    v = Variant(params)
    assert Variant.parse_key(v.key) == params
    assert Variant(Variant.parse_key(v.key)).key == v.key


def _spec(**kw):
    base = dict(name="ns.op", tensors=(Tensor("x", ("M", "N"), dtypes=("bfloat16",)),
                                       Tensor("out", ("M", "N"), dtype_of="x", role="output")),
                scalars=(Scalar("eps", "float32", 1e-6),), variants=(Variant({"a": 1}),))
    base.update(kw)
    return OpSpec(**base)


def test_json_round_trip():
    s = _spec()
    back = OpSpec.from_json(s.to_json())
    assert back.to_json() == s.to_json()
    assert back.symbols() == {"M", "N"}


@pytest.mark.parametrize("kw, msg", [
    (dict(name="noqualifier"), "namespace.op"),
    (dict(tensors=(Tensor("x", ("M",), dtypes=("bfloat16",)), Tensor("x", ("M",), dtype_of="x"))), "repeat"),
    (dict(tensors=(Tensor("x", ("M",), dtypes=("bfloat16",)), Tensor("y", ("Q",), dtype_of="x", role="output"))), "binds"),
    (dict(tensors=(Tensor("x", ("M",), dtypes=("bfloat16",)), Tensor("y", ("M",), dtype_of="z"))), "names no tensor"),
    (dict(variants=(Variant({"a": 1}), Variant({"a": 1}))), "share a key"),
])
def test_bad_specs(kw, msg):
    with pytest.raises(SpecError, match=msg):
        _spec(**kw)


def test_bad_tensor_and_variant():
    with pytest.raises(SpecError, match="unknown dtype"):
        Tensor("x", ("M",), dtypes=("bf16",))
    with pytest.raises(SpecError, match="exactly one"):
        Tensor("x", ("M",), dtypes=("bfloat16",), dtype="float32")
    with pytest.raises(SpecError, match="cannot parse"):
        Variant({"a": 1}, rule="M <=")
    with pytest.raises(SpecError):
        Variant({"a": "x y"}).key
