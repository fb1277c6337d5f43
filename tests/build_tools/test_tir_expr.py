"""TIR launch expressions -> postfix programs, checked against TVM's own arithmetic."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilelang  # noqa: F401
from tvm import tirx

from build_tools.tir_expr import to_program

M, N, K = (tirx.Var(n, "int32") for n in "MNK")
SYMS = (M, N, K)


def build(draw_tree):
    return draw_tree


leaves = st.one_of(st.sampled_from(SYMS), st.integers(1, 300).map(lambda v: tirx.IntImm("int32", v)))
binops = [tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max]


def combine(children):
    return st.builds(lambda op, a, b: op(a, b), st.sampled_from(binops), children, children)


trees = st.recursive(leaves, combine, max_leaves=7)


def exact(e, env):
    """Python's exact integers; None when an intermediate leaves int32 (TVM would wrap)."""
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    if isinstance(e, tirx.Var):
        return env[e.name]
    a, b = exact(e.a, env), exact(e.b, env)
    if a is None or b is None:
        return None
    if isinstance(e, (tirx.FloorDiv, tirx.FloorMod)) and b == 0:
        raise ZeroDivisionError
    r = {tirx.Add: a + b, tirx.Sub: a - b, tirx.Mul: a * b, tirx.Min: min(a, b), tirx.Max: max(a, b),
         tirx.FloorDiv: a // b if b else 0, tirx.FloorMod: a % b if b else 0}[type(e)]
    return r if -2**31 <= r < 2**31 else None


def tvm_value(e, values):
    sub = tirx.stmt_functor.substitute(e, {v: tirx.IntImm("int32", x) for v, x in zip(SYMS, values)})
    from tvm import arith
    r = arith.Analyzer().simplify(sub)
    assert isinstance(r, tirx.IntImm), r
    return int(r.value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trees, st.tuples(*[st.integers(0, 100000)] * 3))
def test_translation_matches_tvm(c_eval, e, values):
    try:
        py = exact(e, dict(zip("MNK", values)))
    except ZeroDivisionError:
        return
    if py is None:  # TVM folds in int32 and wraps; launch sizes never get there
        return
    assert tvm_value(e, values) == py, str(e)
    assert c_eval(to_program(e), values, py), str(e)


def test_launch_grid_of_a_real_kernel(c_eval):
    e = tirx.FloorDiv(N + 255, 256)
    for n in (1, 255, 256, 257, 8192):
        assert c_eval(to_program(e), (0, n, 0), -(-n // 256))
    assert to_program(tirx.Cast("int64", K) * tirx.IntImm("int64", 2)) == ["$K", 2, "*"]
