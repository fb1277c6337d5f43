"""OpSpec: keys round-trip, JSON round-trips, malformed specs fail with a clear SpecError."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkreg.errors import SpecError
from tkreg.spec import OpSpec, Scalar, Tensor, Variant

names = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
values = st.one_of(st.integers(-10**12, 10**12), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
                   st.text(max_size=8), st.from_regex(r"-?[0-9]{1,4}(\.[0-9]*)?(e-?[0-9])?", fullmatch=True))


def _same(a: dict, b: dict) -> bool:
    return a == b and all(type(a[k]) is type(b[k]) for k in a)


@given(st.dictionaries(names, values, max_size=5))
def test_variant_key_round_trips_any_value(params):
    v = Variant(params)
    assert _same(Variant.parse_key(v.key), params), v.key
    assert Variant(Variant.parse_key(v.key)).key == v.key
    assert Variant.from_json(v.to_json()) == v


@pytest.mark.parametrize("a, b", [({"a": "12"}, {"a": 12}), ({"a": 1.0}, {"a": 1}), ({"a": "true"}, {"a": True}),
                                  ({"a": "1.5"}, {"a": 1.5}), ({"a": "x,b=1"}, {"a": "x", "b": 1})])
def test_values_of_different_types_get_different_keys(a, b):
    assert Variant(a).key != Variant(b).key
    assert _same(Variant.parse_key(Variant(a).key), a) and _same(Variant.parse_key(Variant(b).key), b)


def test_cubin_names_never_collide():
    from tkreg.manifest import cubin_name
    keys = [Variant(p).key for p in ({"a": "12"}, {"a": 12}, {"a": "1_2"}, {"a": "1-2"}, {"a": "1", "b": "2"})]
    assert len({cubin_name("ns.op", k) for k in keys}) == len(keys)


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
    (dict(tensors=(Tensor("x", ("M",), dtypes=("bfloat16",)), Tensor("y", ("M",), dtype_of="y"))), "cycle: y -> y"),
    (dict(tensors=(Tensor("x", ("M",), dtype_of="y"), Tensor("y", ("M",), dtype_of="x"))), "cycle: x -> y -> x"),
    (dict(variants=(Variant({"a": 1}, rule="M <= 64 and Q"),)), r"names \['Q'\], which the op does not have"),
    (dict(tensors=(Tensor("x", ("M",), dtypes=("bfloat16",)), Tensor("w", ("S", "M"), role="scratch", dtype="float32"))),
     "variant 'a=1' does not set to an int"),
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
    for bad in (None, [1], float("nan")):
        with pytest.raises(SpecError):
            Variant({"a": bad})


def test_dtype_of_chains_flatten_to_their_root():
    s = _spec(tensors=(Tensor("x", ("M", "N"), dtypes=("bfloat16",)), Tensor("y", ("M", "N"), dtype_of="x"),
                       Tensor("out", ("M", "N"), dtype_of="y", role="output")))
    assert s.dtype_roots() == {"x": "x", "y": "x", "out": "x"}


def test_expressions_may_use_scalars_presence_sm_count_and_variant_params():
    s = OpSpec("ns.op", (Tensor("x", ("M",), dtypes=("bfloat16",)), Tensor("b", ("M",), dtype_of="x", optional=True),
                         Tensor("ws", ("splits", "max_len", "SM_COUNT"), dtype="float32", role="scratch")),
               scalars=(Scalar("max_len", "int32", 0),),
               variants=(Variant({"splits": 4}, rule="has_b and max_len <= SM_COUNT"), Variant({"splits": 1})))
    assert s.param_symbols() == {"splits"} and s.presence_symbols() == {"has_b"}
    assert OpSpec.from_json(s.to_json()) == s
