"""Expression programs: text -> postfix -> the C evaluator, checked against Python's own math."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tkreg import expr
from tkreg.errors import SpecError

SYMS = ("M", "N", "K")


def py_floordiv(a, b):
    return a // b


leaf = st.one_of(st.integers(-300, 300).map(str), st.sampled_from(SYMS))


def _combine(children):
    ops = st.sampled_from(["+", "-", "*", "//", "%", "<", "<=", "==", "!=", ">", ">="])
    return st.tuples(children, ops, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})") | \
        st.tuples(st.sampled_from(["min", "max"]), children, children).map(lambda t: f"{t[0]}({t[1]}, {t[2]})")


exprs = st.recursive(leaf, _combine, max_leaves=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(exprs, st.tuples(*[st.integers(-5000, 5000)] * 3))
def test_c_evaluator_matches_python(c_eval, text, values):
    env = dict(zip(SYMS, values))
    try:
        want = int(eval(text, {"min": min, "max": max}, env))  # the oracle: Python's int semantics
    except ZeroDivisionError:
        assert c_eval(expr.parse(text), values, None), text
        return
    assert c_eval(expr.parse(text), values, want), text


@pytest.mark.parametrize("text", ["M <= 64 and K % 128 == 0", "not M", "-M + 3", "1 < M <= 8", "M or N"])
def test_boolean_rules(c_eval, text):
    for vals in [(1, 0, 128), (64, 5, 256), (65, 0, 0), (0, 0, 0), (8, 1, 1)]:
        want = eval(text, {}, dict(zip(SYMS, vals)))
        assert c_eval(expr.parse(text), vals, int(want)) or (want not in (0, 1) and c_eval(expr.parse(text), vals, int(bool(want))))


def test_to_text_round_trips():
    for text in ["(M + 127) // 128", "min(M, 64)", "M <= 64 and K % 128 == 0"]:
        assert expr.parse(expr.to_text(expr.parse(text))) == expr.parse(text)


@pytest.mark.parametrize("bad", ["M ** 2", "f(M)", "M if N else K", "x.y", "'s'", "M +"])
def test_rejects_what_the_launcher_cannot_run(bad):
    with pytest.raises(SpecError):
        expr.parse(bad)


def test_assemble_rejects_unknown_symbol_and_malformed():
    with pytest.raises(SpecError, match="unknown symbol"):
        expr.assemble(["$Q"], {"M": 0})
    with pytest.raises(SpecError, match="malformed"):
        expr.assemble(["$M", "+"], {"M": 0})
