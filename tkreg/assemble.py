"""Specs and plan records -> the structs `_launcher.Op` / `_launcher.Variant` copy.

Done once per op (and per variant table) at first use, so the per-call path in C never touches
JSON or dicts.  The struct layouts, codes and limits are tkreg/codes.py's, which also generates
the C side's header.  This is where a plan is checked: every field against its range
(`codes.struct`), every index against what it indexes, every program for its stack; the
launcher trusts what it is given.  A record that does not fit its spec is a PackError naming it.

Expression slots (what `$name` in a program reads), in this order: size symbols, stride
symbols, integer scalars, `has_<t>` presence flags, SM_COUNT, then the variant parameters
output and scratch shapes use (set once a variant is chosen; the memo ignores them).
"""
from __future__ import annotations

from array import array

from . import codes, expr
from .codes import struct
from .errors import PackError, SpecError
from .launch_plan import Plan
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


class Code:
    """The int64 code an owner's programs share; a Prog is (offset, length) into it."""
    def __init__(self, slot: dict):
        self.slot, self.words = slot, []

    def prog(self, prog):
        c = expr.assemble(list(prog), self.slot)
        p = struct("Prog", off=len(self.words), n=len(c))
        self.words += c
        return p

    def progs(self, progs) -> list:
        return [self.prog(p) for p in progs]

    def tobytes(self) -> bytes:
        return array("q", self.words).tobytes()


def _index(i, n: int, what: str) -> int:
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
        raise IndexError(f"{what} = {i!r}, expected an index in [0, {n})")
    return i


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


def op_args(spec: OpSpec) -> tuple:
    """`_launcher.Op`'s arguments after the name: (OpPlan bytes, code bytes, argument names in
    the calling convention, scalar defaults)."""
    sl = slots(spec)
    code = Code(sl.as_dict())
    slot = code.slot
    index = {t.name: i for i, t in enumerate(spec.tensors)}
    nt = len(spec.tensors)
    user = spec.user_args()
    bound_index = index | {s.name: nt + i for i, s in enumerate(spec.scalars)}
    roots = spec.dtype_roots()
    sigs = []
    for t in spec.tensors:
        root = spec.tensor(roots[t.name])
        if root.dtypes:
            mode, arg = (codes.DTYPE_MODES["set"], sum(1 << codes.DTYPES[d][0] for d in root.dtypes)) \
                if root is t else (codes.DTYPE_MODES["same"], index[root.name])
        else:
            mode, arg = codes.DTYPE_MODES["fixed"], codes.DTYPES[root.dtype][0]
        like, newsrc = _alloc_sources(spec, t, roots)
        sigs.append(struct("TSig", role=codes.ROLES[t.role], optional=int(t.optional), rank=len(t.shape), dmode=mode,
                           darg=arg, like=like, newsrc=newsrc, strided=int(t.strides is not None), zero=int(t.zero),
                           dims=code.progs(t.dims()), strides=code.progs(t.stride_progs() or [])))
    binds = []   # bare symbols first, then multiples (`2 * N`)
    for scaled in (False, True):
        for i, t in enumerate(spec.tensors):
            for kind, progs in (("dim", t.dims() if t.is_input else []), ("stride", t.stride_progs() or [])):
                for r, p in enumerate(progs):
                    s = expr.scaled_symbol(p) if kind == "dim" else (expr.is_symbol(p), 1)
                    if s and s[0] and (s[1] > 1) == scaled:
                        binds.append(struct("Bind", slot=slot[s[0]], kind=codes.SLOTS[kind], a=i, b=r, div=s[1]))
    for i, s in enumerate(spec.scalars):
        if s.integral:
            binds.append(struct("Bind", slot=slot[s.name], kind=codes.SLOTS["scalar"], a=i))
    for i, t in enumerate(spec.tensors):
        if t.optional:
            binds.append(struct("Bind", slot=slot[f"has_{t.name}"], kind=codes.SLOTS["present"], a=i))
    outs = [i for i, t in enumerate(spec.tensors) if t.role == "output"]
    plan = struct("OpPlan", nt=nt, ns=len(spec.scalars), nslot=len(sl.names), npre=sl.npre, index64=int(spec.index64),
                  sm_slot=slot["SM_COUNT"], nuser=len(user), nout=len(outs), out=outs,
                  nbind=len(binds), user=[bound_index[a.name] for a in user],
                  stype=[codes.TYPES[s.type][0] for s in spec.scalars], t=sigs, bind=binds)
    return bytes(plan), code.tobytes(), tuple(a.name for a in user), tuple(s.default for s in spec.scalars)


def variant_args(spec: OpSpec, params: dict, plan: Plan, where: str) -> tuple:
    """`_launcher.Variant`'s arguments after the key: (VariantPlan bytes, Kernel bytes, code
    bytes, kernel names); PackError when the plan does not fit the op."""
    try:
        return _variant_args(spec, params, plan)
    except (KeyError, ValueError, TypeError, IndexError, OverflowError, SpecError) as e:
        raise PackError(f"{where}: the plan does not fit the op ({type(e).__name__}: {e})") from None


def _variant_args(spec: OpSpec, params: dict, plan: Plan):
    sl = slots(spec)
    code = Code(sl.as_dict())
    slot = code.slot
    tindex = {t.name: i for i, t in enumerate(spec.tensors)}
    sindex = {s.name: i for i, s in enumerate(spec.scalars)}
    uses = plan.uses
    spec.check_uses(uses)
    tma = []
    for t in plan.tma:
        if t.tensor not in uses:
            raise KeyError(f"a TMA descriptor reads `{t.tensor}`, which no kernel takes")
        tma.append(struct("Tma", tensor=tindex[t.tensor], dtype=t.dtype, rank=t.rank, dims=code.progs(t.dims),
                          strides=code.progs(t.strides), box=t.box, estr=t.elem_strides, il=t.interleave,
                          sw=t.swizzle, l2=t.l2, oob=t.oob))
    kernels = []
    for k in plan.kernels:
        ps = []
        for p in k.params:
            if p.kind == "ptr":
                if p.name not in uses:
                    raise KeyError(f"kernel {k.name} takes `{p.name}`, which the plan's tensors leave out")
                idx, typ = tindex[p.name], 0
            elif p.kind == "tma":
                idx, typ = _index(p.index, len(tma), f"kernel {k.name}: TMA descriptor index"), 0
            elif p.kind == "sym":
                idx, typ = slot[p.name], codes.TYPES[p.type][0]
                if p.type not in ("int32", "int64"):
                    raise TypeError(f"kernel {k.name} takes the symbol `{p.name}` as {p.type}, expected int32 or int64")
            else:
                idx, typ = sindex[p.name], codes.TYPES[p.type][0]
                if p.type != spec.scalars[idx].type:  # the launcher writes the spec type's bytes
                    raise TypeError(f"kernel {k.name} takes `{p.name}` as {p.type}, the spec says {spec.scalars[idx].type}")
            ps.append(struct("Param", kind=codes.PARAMS[p.kind], index=idx, type=typ))
        at = [struct("LaunchAttr", id=codes.LAUNCH_ATTRS[a], value=v) for a, v, on in (
            ("cluster", k.cluster, k.cluster[0] * k.cluster[1] * k.cluster[2] > 1), ("cooperative", [1], k.cooperative),
            ("pdl", [1], k.pdl)) if on]
        kernels.append(struct("Kernel", grid=code.progs(k.grid), smem=code.prog(k.smem), block=k.block, na=len(at),
                              at=at, np=len(ps), p=ps))
    sets = [(slot[n], params[n]) for n in sl.names[sl.npre:]]
    vp = struct("VariantPlan", nt=len(spec.tensors), ns=len(spec.scalars), nslot=len(sl.names), nset=len(sets),
                ncons=len(plan.constraints), ntma=len(tma), nkern=len(kernels),
                dtypes=[codes.DTYPES[uses[t.name]][0] if t.name in uses else -1 for t in spec.tensors],
                set_slot=[s for s, _ in sets], uses=sum(1 << tindex[n] for n in uses), set_val=[v for _, v in sets],
                cons=code.progs(c.prog for c in plan.constraints), tma=tma)
    return bytes(vp), b"".join(map(bytes, kernels)), code.tobytes(), tuple(k.name for k in plan.kernels)
