"""Manifest entries -> the int64 words and string tables that `_launcher.Op`/`Variant` read.

Done once per op at first use, so the per-call path in C never touches JSON or dicts.  The
word layout is mirrored by the parsers in `_csrc/launcher.c` (Op_new, Variant_new).
"""
from __future__ import annotations

from array import array

from . import expr
from .errors import PackError
from .spec import DTYPES, OpSpec

_ROLE = {"input": 0, "output": 1, "inplace": 2, "scratch": 3}
_TYPE = {"int32": 0, "int64": 1, "float32": 2, "float64": 3, "bool": 4}
_PARAM = {"ptr": 0, "tma": 1, "sym": 2, "scalar": 3}


class _Strings:
    def __init__(self):
        self.items: list[str] = []

    def __call__(self, s: str) -> int:
        self.items.append(str(s))
        return len(self.items) - 1


def slots(spec: OpSpec) -> dict:
    """Symbol name -> slot, in a fixed (sorted) order."""
    return {s: i for i, s in enumerate(sorted(spec.symbols()))}


def _prog(words: list, prog: list, slot: dict) -> None:
    code = expr.assemble(prog, slot)
    words.append(len(code))
    words.extend(code)


def _alloc_sources(spec: OpSpec, t) -> tuple[int, int]:
    """(like, newsrc) for an output: an input it can be `empty_like`d from (same shape and
    dtype), and one it can be `new_empty`ed from (same dtype); -1 when none."""
    like = newsrc = -1
    if t.role in ("output", "scratch") and t.dtype_of:
        for i, u in enumerate(spec.tensors):
            if u.role in ("input", "inplace") and not u.optional and u.name == t.dtype_of:
                newsrc = i
                if tuple(map(str, u.shape)) == tuple(map(str, t.shape)):
                    like = i
    return like, newsrc


def op_words(spec: OpSpec) -> tuple[bytes, tuple]:
    slot = slots(spec)
    strings = _Strings()
    index = {t.name: i for i, t in enumerate(spec.tensors)}
    w = [len(spec.tensors), len(spec.scalars), len(slot)]
    for t in spec.tensors:
        if t.dtypes:
            mode, arg = 0, sum(1 << DTYPES.index(d) for d in t.dtypes)
        elif t.dtype_of:
            mode, arg = 1, index[t.dtype_of]
        else:
            mode, arg = 2, DTYPES.index(t.dtype)
        w += [_ROLE[t.role], int(t.optional), len(t.shape), mode, arg, strings(t.name), *_alloc_sources(spec, t)]
        for d in t.dims():
            _prog(w, d, slot)
    for s in spec.scalars:
        w += [_TYPE[s.type], strings(s.name)]
    return array("q", w).tobytes(), tuple(strings.items)


def variant_words(spec: OpSpec, variant: dict) -> tuple[bytes, tuple]:
    slot = slots(spec)
    strings = _Strings()
    tindex = {t.name: i for i, t in enumerate(spec.tensors)}
    sindex = {s.name: i for i, s in enumerate(spec.scalars)}
    plan = variant["plan"]
    try:
        w = [len(spec.tensors)] + [DTYPES.index(plan["dtypes"][t.name]) for t in spec.tensors]
        w.append(len(plan["constraints"]))
        for c in plan["constraints"]:
            w.append(strings(c["text"]))
            _prog(w, c["prog"], slot)
        w.append(len(plan["tma"]))
        for t in plan["tma"]:
            w += [tindex[t["tensor"]], t["dtype"], t["rank"]]
            for d in t["dims"]:
                _prog(w, d, slot)
            for s in t["strides"]:
                _prog(w, s, slot)
            w += list(t["box"]) + list(t["elem_strides"])
            w += [t["interleave"], t["swizzle"], t["l2"], t["oob"]]
        w.append(len(plan["kernels"]))
        for k in plan["kernels"]:
            w.append(strings(k["name"]))
            for g in k["grid"]:
                _prog(w, g, slot)
            w += list(k["block"])
            _prog(w, k["smem"], slot)
            w += list(k["cluster"]) + [int(k["cooperative"]), int(k["pdl"]), len(k["params"])]
            for p in k["params"]:
                kind = p["kind"]
                if kind == "ptr":
                    idx, typ = tindex[p["tensor"]], 0
                elif kind == "tma":
                    idx, typ = p["index"], 0
                elif kind == "sym":
                    idx, typ = slot[p["name"]], _TYPE[p["type"]]
                else:
                    idx, typ = sindex[p["name"]], _TYPE[p["type"]]
                w += [_PARAM[kind], idx, typ]
    except (KeyError, ValueError, TypeError) as e:
        raise PackError(f"{spec.name}[{variant.get('key')}]: malformed plan ({type(e).__name__}: {e})") from None
    return array("q", w).tobytes(), tuple(strings.items)
