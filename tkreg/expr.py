"""Integer expressions over symbols as postfix programs, evaluated by the C launcher.

A program is a JSON list: ints are constants, `"$M"` reads symbol M, other strings are
operators.  Rules and shapes written as text ("M <= 64 and K % 128 == 0") are parsed here with
`ast` (never `eval`); build_tools translates tilelang's own TIR expressions into the same form.
`assemble` turns a program into the flat int64 opcodes `tkreg/_csrc/launcher.c` runs.
"""
from __future__ import annotations

import ast
import functools

from .codes import LIMITS, OP_CONST, OP_SYM
from .codes import OPCODES as OPS
from .errors import SpecError

_BIN = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def parse(text: str) -> list:
    """`"(M + 127) // 128"` -> `["$M", 127, "+", 128, "//"]`."""
    return list(_parse(str(text)))


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> tuple:
    """Cached: every manifest repeats the same few shape expressions (import time)."""
    try:
        tree = ast.parse(str(text).strip(), mode="eval").body
    except SyntaxError as e:
        raise SpecError(f"cannot parse expression {text!r}: {e.msg}") from None
    out: list = []
    _emit(tree, out, text)
    return tuple(out)


def _emit(node, out, text):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
        out.append(int(node.value))
    elif isinstance(node, ast.Name):
        out.append("$" + node.id)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        _emit(node.left, out, text)
        _emit(node.right, out, text)
        out.append(_BIN[type(node.op)])
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        _emit(node.operand, out, text)
        out.append("neg" if isinstance(node.op, ast.USub) else "not")
    elif isinstance(node, ast.BoolOp):
        op = "and" if isinstance(node.op, ast.And) else "or"
        _emit(node.values[0], out, text)
        for v in node.values[1:]:
            _emit(v, out, text)
            out.append(op)
    elif isinstance(node, ast.Compare):
        # a < b <= c  ->  (a < b) and (b <= c)
        left = node.left
        for i, (op, right) in enumerate(zip(node.ops, node.comparators)):
            if type(op) not in _CMP:
                raise SpecError(f"operator {type(op).__name__} not allowed in {text!r}")
            _emit(left, out, text)
            _emit(right, out, text)
            out.append(_CMP[type(op)])
            if i:
                out.append("and")
            left = right
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max") \
            and len(node.args) == 2 and not node.keywords:
        _emit(node.args[0], out, text)
        _emit(node.args[1], out, text)
        out.append(node.func.id)
    else:
        raise SpecError(f"unsupported syntax {ast.dump(node)[:60]} in expression {text!r}; "
                        "use ints, symbols, + - * // %, min/max, comparisons, and/or/not")


def symbols(prog: list) -> set:
    return {t[1:] for t in prog if isinstance(t, str) and t.startswith("$")}


def is_symbol(prog: list) -> str | None:
    """The symbol's name when the program is one bare symbol, else None."""
    return prog[0][1:] if len(prog) == 1 and isinstance(prog[0], str) and prog[0].startswith("$") else None


def scaled_symbol(prog) -> tuple[str, int] | None:
    """(symbol, k) when the program is `k * S`, `S * k` or a bare `S` (k = 1), k a positive int: a
    dim that binds S as dim // k (the shape check then proves the division exact)."""
    prog = list(prog)
    if len(prog) == 1 and is_symbol(prog):
        return prog[0][1:], 1
    if len(prog) == 3 and prog[2] == "*":
        k, s = (prog[0], prog[1]) if isinstance(prog[0], int) else (prog[1], prog[0])
        if isinstance(k, int) and not isinstance(k, bool) and k > 0 and isinstance(s, str) and s.startswith("$"):
            return s[1:], k
    return None


def const(prog: list) -> int | None:
    return prog[0] if len(prog) == 1 and isinstance(prog[0], int) else None


def to_text(prog: list) -> str:
    """Readable infix, used in error messages and `tkreg.explain`."""
    stack: list[str] = []
    for t in prog:
        if isinstance(t, int):
            stack.append(str(t))
        elif t.startswith("$"):
            stack.append(t[1:])
        else:
            n = OPS[t][1]
            args = [stack.pop() for _ in range(n)][::-1]
            if t in ("min", "max", "select", "tdiv", "tmod"):
                stack.append(f"{t}({', '.join(args)})")
            elif t in ("not", "neg"):
                stack.append(("not " if t == "not" else "-") + args[0])
            else:
                stack.append(f"({args[0]} {t} {args[1]})")
    if len(stack) != 1:
        raise SpecError(f"malformed program {prog!r}")
    top = stack[0]
    return top[1:-1] if top.startswith("(") and top.endswith(")") and _balanced(top[1:-1]) else top


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += (c == "(") - (c == ")")
        if depth < 0:
            return False
    return depth == 0


def assemble(prog: list, slots: dict) -> list[int]:
    """Flat opcodes for launcher.c: [CONST, v] / [SYM, slot] / [opcode]."""
    code: list[int] = []
    depth = 0
    for t in prog:
        if isinstance(t, bool) or not isinstance(t, (int, str)) or (isinstance(t, int) and not -2**63 <= t < 2**63):
            raise SpecError(f"bad token {t!r} in program {prog!r}")
        if depth >= LIMITS["STACK"] and (isinstance(t, int) or t.startswith("$")):
            raise SpecError(f"program {prog!r} needs a stack deeper than {LIMITS['STACK']}")
        if isinstance(t, int):
            code += [OP_CONST, t]
            depth += 1
        elif t.startswith("$"):
            if t[1:] not in slots:
                raise SpecError(f"program {to_text(prog)!r} reads unknown symbol {t[1:]!r}")
            code += [OP_SYM, slots[t[1:]]]
            depth += 1
        elif t in OPS:
            op, n = OPS[t]
            if depth < n:
                raise SpecError(f"malformed program {prog!r}")
            code.append(op)
            depth -= n - 1
        else:
            raise SpecError(f"unknown operator {t!r} in program {prog!r}")
    if depth != 1:
        raise SpecError(f"malformed program {prog!r}")
    return code


_PY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
       "//": lambda a, b: a // b, "%": lambda a, b: a % b, "min": min, "max": max,
       "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
       "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
       "and": lambda a, b: a and b, "or": lambda a, b: a or b,
       "tdiv": lambda a, b: abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1),
       "tmod": lambda a, b: a - abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1) * b}


def evaluate(prog: list, env: dict):
    """Evaluate in Python: for torch's symbolic sizes (fake tensors under torch.compile) and for
    build-time checks; the launcher evaluates programs in C."""
    stack: list = []
    for t in prog:
        if isinstance(t, int):
            stack.append(t)
        elif t.startswith("$"):
            stack.append(env[t[1:]])
        elif t == "neg":
            stack.append(-stack.pop())
        elif t == "not":
            stack.append(not stack.pop())
        elif t == "select":
            b, a, c = stack.pop(), stack.pop(), stack.pop()
            stack.append(a if c else b)
        elif t in _PY:
            b, a = stack.pop(), stack.pop()
            stack.append(_PY[t](a, b))
        else:
            raise SpecError(f"operator {t!r} cannot be evaluated in Python")
    return stack[0]
