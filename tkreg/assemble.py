"""Specs and plan records -> the int64 words `_launcher.Op` / `_launcher.Variant` parse.

Done once per op (and per variant table) at first use, so the per-call path in C never touches
JSON or dicts.  Codes come from tkreg/codes.py, which also generates the C side's header; the
word layouts are parsed by Op_new and Variant_new in `_csrc/launcher.c`, which range-checks
every value again.  Any record that does not fit its spec is a PackError naming it.

Expression slots (what `$name` in a program reads), in this order: size symbols, stride
symbols, integer scalars, `has_<t>` presence flags, SM_COUNT, then the variant parameters
output and scratch shapes use (set once a variant is chosen; the memo ignores them).
"""
from __future__ import annotations

from array import array

from . import codes, expr
from .errors import PackError, SpecError
from .plan import Plan
from .spec import OpSpec


class Slots:
    """Slot -> name, and how many are bound from the call (the rest: variant parameters)."""
    __slots__ = ("names", "npre")

    def __init__(self, names: tuple, npre: int):
        self.names, self.npre = names, npre

    def as_dict(self) -> dict:
        return {n: i for i, n in enumerate(self.names)}


def slots(spec: OpSpec) -> Slots:
    pre = (sorted(spec.symbols()) + sorted(spec.stride_symbols() - spec.symbols())
           + [s.name for s in spec.scalars if s.integral] + sorted(spec.presence_symbols()) + ["SM_COUNT"])
    return Slots(tuple(pre) + tuple(sorted(spec.param_symbols())), len(pre))


def _prog(words: list, prog, slot: dict) -> None:
    code = expr.assemble(list(prog), slot)
    words.append(len(code))
    words.extend(code)


def _alloc_sources(spec: OpSpec, t, roots: dict) -> tuple[int, int]:
    """(like, newsrc) for an output: a contiguous input it can be `empty_like`d from (same shape
    and dtype), and one it can be `new_empty`ed from (same dtype); -1 when none."""
    like = newsrc = -1
    if t.role in ("output", "scratch") and t.dtype_of:
        for i, u in enumerate(spec.tensors):
            if u.is_input and not u.optional and u.strides is None and roots[u.name] == roots[t.name]:
                newsrc = i if newsrc < 0 else newsrc
                if like < 0 and tuple(map(str, u.shape)) == tuple(map(str, t.shape)):
                    like = i
    return like, newsrc


def op_words(spec: OpSpec) -> tuple[bytes, tuple, tuple]:
    """(words, argument names in the calling convention, scalar defaults)."""
    sl = slots(spec)
    slot = sl.as_dict()
    index = {t.name: i for i, t in enumerate(spec.tensors)}
    nt = len(spec.tensors)
    user = spec.user_args()
    bound_index = {t.name: i for i, t in enumerate(spec.tensors)} | {s.name: nt + i for i, s in enumerate(spec.scalars)}
    w = [nt, len(spec.scalars), len(sl.names), sl.npre, int(spec.index64), slot["SM_COUNT"], len(user)]
    w += [bound_index[a.name] for a in user]
    roots = spec.dtype_roots()
    for t in spec.tensors:
        root = spec.tensor(roots[t.name])
        if root.dtypes:
            mode, arg = (codes.DTYPE_MODES["set"], sum(1 << codes.DTYPES[d][0] for d in root.dtypes)) \
                if root is t else (codes.DTYPE_MODES["same"], index[root.name])
        else:
            mode, arg = codes.DTYPE_MODES["fixed"], codes.DTYPES[root.dtype][0]
        w += [codes.ROLES[t.role], int(t.optional), len(t.shape), mode, arg, *_alloc_sources(spec, t, roots),
              int(t.strides is not None), int(t.zero)]
        for d in t.dims() + (t.stride_progs() or []):
            _prog(w, d, slot)
    w += [codes.TYPES[s.type][0] for s in spec.scalars]
    binds = []   # (slot, kind, index, dim, divisor): bare symbols first, then multiples (`2 * N`)
    for scaled in (False, True):
        for i, t in enumerate(spec.tensors):
            for kind, progs in (("dim", t.dims() if t.is_input else []), ("stride", t.stride_progs() or [])):
                for r, p in enumerate(progs):
                    s = expr.scaled_symbol(p) if kind == "dim" else (expr.is_symbol(p), 1)
                    if s and s[0] and (s[1] > 1) == scaled:
                        binds.append((slot[s[0]], codes.SLOTS[kind], i, r, s[1]))
    for i, s in enumerate(spec.scalars):
        if s.integral:
            binds.append((slot[s.name], codes.SLOTS["scalar"], i, 0, 1))
    for i, t in enumerate(spec.tensors):
        if t.optional:
            binds.append((slot[f"has_{t.name}"], codes.SLOTS["present"], i, 0, 1))
    w.append(len(binds))
    for b in binds:
        w += b
    names = tuple(a.name for a in user)
    return array("q", w).tobytes(), names, tuple(s.default for s in spec.scalars)


def variant_words(spec: OpSpec, params: dict, plan: Plan, where: str) -> tuple[bytes, tuple]:
    """(words, kernel names) for one compiled variant; PackError when the plan does not fit."""
    try:
        return _variant_words(spec, params, plan)
    except (KeyError, ValueError, TypeError, IndexError, SpecError) as e:
        raise PackError(f"{where}: the plan does not fit the op ({type(e).__name__}: {e})") from None


def _variant_words(spec: OpSpec, params: dict, plan: Plan):
    sl = slots(spec)
    slot = sl.as_dict()
    tindex = {t.name: i for i, t in enumerate(spec.tensors)}
    sindex = {s.name: i for i, s in enumerate(spec.scalars)}
    uses = plan.uses
    spec.check_uses(uses)
    w = [len(spec.tensors), len(spec.scalars), len(sl.names)]
    w += [codes.DTYPES[uses[t.name]][0] if t.name in uses else -1 for t in spec.tensors]
    w.append(sum(1 << tindex[n] for n in uses))
    sets = [(slot[n], params[n]) for n in sl.names[sl.npre:]]
    w.append(len(sets))
    for s in sets:
        w += s
    w.append(len(plan.constraints))
    for c in plan.constraints:
        _prog(w, c.prog, slot)
    w.append(len(plan.tma))
    for t in plan.tma:
        if t.tensor not in uses:
            raise KeyError(f"a TMA descriptor reads `{t.tensor}`, which no kernel takes")
        w += [tindex[t.tensor], t.dtype, t.rank]
        for p in t.dims + t.strides:
            _prog(w, p, slot)
        w += list(t.box) + list(t.elem_strides) + [t.interleave, t.swizzle, t.l2, t.oob]
    w.append(len(plan.kernels))
    for k in plan.kernels:
        for g in k.grid:
            _prog(w, g, slot)
        w += list(k.block)
        _prog(w, k.smem, slot)
        w += list(k.cluster) + [int(k.cooperative), int(k.pdl), len(k.params)]
        for p in k.params:
            if p.kind == "ptr":
                if p.name not in uses:
                    raise KeyError(f"kernel {k.name} takes `{p.name}`, which the plan's tensors leave out")
                idx, typ = tindex[p.name], 0
            elif p.kind == "tma":
                idx, typ = p.index, 0
            elif p.kind == "sym":
                idx, typ = slot[p.name], codes.TYPES[p.type][0]
            else:
                idx, typ = sindex[p.name], codes.TYPES[p.type][0]
                if p.type != spec.scalars[idx].type:  # the launcher writes the spec type's bytes
                    raise TypeError(f"kernel {k.name} takes `{p.name}` as {p.type}, the spec says {spec.scalars[idx].type}")
            w += [codes.PARAMS[p.kind], idx, typ]
    return array("q", w).tobytes(), tuple(k.name for k in plan.kernels)
