"""tilelang/TVM integer expressions -> tkreg postfix programs (see tkreg/expr.py).

Launch dimensions, TMA shapes and buffer shapes come out of the IR as TIR expressions of the
symbolic dims; the run time evaluates them with no Python and no TVM.
"""
from __future__ import annotations

import tilelang  # noqa: F401  (puts its bundled tvm on sys.path)
from tvm import tirx

from tkreg.errors import SpecError

_BINARY = {
    tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "//", tirx.FloorMod: "%",
    tirx.Div: "tdiv", tirx.Mod: "tmod", tirx.Min: "min", tirx.Max: "max",
    tirx.EQ: "==", tirx.NE: "!=", tirx.LT: "<", tirx.LE: "<=", tirx.GT: ">", tirx.GE: ">=",
    tirx.And: "and", tirx.Or: "or",
}


def to_program(e) -> list:
    """Postfix tokens for an integer/boolean TIR expression (or a plain int)."""
    out: list = []
    _emit(e, out)
    return out


def _emit(e, out):
    if isinstance(e, (int, bool)):
        out.append(int(e))
    elif isinstance(e, tirx.IntImm):
        out.append(int(e.value))
    elif isinstance(e, tirx.Var):
        out.append("$" + e.name)
    elif isinstance(e, tirx.Cast):
        if not (e.dtype.startswith("int") or e.dtype.startswith("uint") or e.dtype == "bool"):
            raise SpecError(f"non-integer cast to {e.dtype} in launch expression {e}")
        _emit(e.value, out)
    elif type(e) in _BINARY:
        _emit(e.a, out)
        _emit(e.b, out)
        out.append(_BINARY[type(e)])
    elif isinstance(e, tirx.Not):
        _emit(e.a, out)
        out.append("not")
    elif isinstance(e, tirx.Select):
        _emit(e.condition, out)
        _emit(e.true_value, out)
        _emit(e.false_value, out)
        out.append("select")
    else:
        raise SpecError(f"cannot translate {type(e).__name__} `{e}` for the launcher; "
                        "launch dims may use + - * // % min max and comparisons of symbols")
