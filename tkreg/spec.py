"""One frozen spec describes an op from TileLang source to launch.

`kernels_src/` (and plugins) build `OpSpec`s with a `factory`; `build_tools` compiles each
`Variant` and writes the spec into the pack manifest (`OpSpec.to_json`); the run time reads it
back (`OpSpec.from_json`, no factory) to bind, validate and allocate.  Nothing here imports
torch or tilelang, so build-time code can use it and `import tkreg.spec` stays cheap.

Names an expression (a shape, a stride, a rule) may use:
- size symbols bound by a bare-symbol dim of an input (`("M", "K")` binds M and K);
- stride symbols bound by a bare-symbol stride of an input (`strides=("sq", 1)`, in elements);
- integer and bool scalars (`max_seqlen`), by name;
- `has_<t>` for each optional tensor `t` (1 when given);
- `SM_COUNT`, the device's multiprocessor count;
- in output and scratch shapes only: integer variant parameters every variant defines
  (`("splits", "M", "N")` for a split-K workspace).
"""
from __future__ import annotations

import importlib
import re
from typing import Any, Callable, Mapping

from . import expr as _expr
from . import variant_key
from .codes import DEVICE_SYMBOLS, DTYPES as _DTYPE_CODES
from .codes import ROLES as _ROLE_CODES
from .codes import TYPES as _TYPE_CODES
from .errors import SpecError
from .record import RECORD, Fields, field

DTYPES = tuple(_DTYPE_CODES)
SCALAR_TYPES = tuple(_TYPE_CODES)
ROLES = tuple(_ROLE_CODES)
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"  # patterns compile on first use (re caches them)
_QUALIFIED = r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*"
_REF = r"[A-Za-z_][\w.]*:[A-Za-z_]\w*"


def import_ref(ref: str):
    """`"module:attr"` (a spec's reference or backward) -> the object."""
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


def _is_symbol(d) -> bool:
    return isinstance(d, str) and bool(re.fullmatch(_NAME, d))


@RECORD
class Tensor(Fields):
    """A tensor argument. `shape` holds symbol names, ints or small expressions ("H // 2").

    `dtypes` lists what the op accepts; `dtype_of` ties the dtype to another tensor's instead;
    `dtype` fixes it (e.g. fp32 scales).  Roles: input, output (allocated when not given),
    inplace (an input the kernel writes), scratch (allocated per call, never returned; `zero`
    fills it with zeros on the stream first).  `optional` inputs may be None: the kernel gets
    a null pointer, and rules can test `has_<name>`.  `strides` (elements, one per dim) lets a
    kernel read a strided view without a copy: a bare symbol binds it (`("sq", 1)`), anything
    else is checked; None means row-major contiguous.
    """
    name: str
    shape: tuple
    dtypes: tuple = ()
    dtype_of: str | None = None
    dtype: str | None = None
    role: str = "input"
    optional: bool = False
    strides: tuple | None = None
    zero: bool = False

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        if self.strides is not None:
            object.__setattr__(self, "strides", tuple(self.strides))
        where = f"tensor `{self.name}`"
        if not isinstance(self.name, str) or not re.fullmatch(_NAME, self.name):
            raise SpecError(f"tensor name {self.name!r} is not an identifier")
        if sum(x is not None and x != () for x in (self.dtypes or None, self.dtype_of, self.dtype)) != 1:
            raise SpecError(f"{where}: give exactly one of dtypes=, dtype_of=, dtype=")
        for d in self.dtypes + ((self.dtype,) if self.dtype else ()):
            if d not in DTYPES:
                raise SpecError(f"{where}: unknown dtype {d!r}; known: {', '.join(DTYPES)}")
        if self.role not in ROLES:
            raise SpecError(f"{where}: role {self.role!r} not in {ROLES}")
        if self.strides is not None and len(self.strides) != len(self.shape):
            raise SpecError(f"{where}: {len(self.strides)} strides for {len(self.shape)} dims")
        if self.strides is not None and self.role != "input":
            raise SpecError(f"{where}: only inputs may declare strides (outputs are allocated contiguous)")
        if self.zero and self.role != "scratch":
            raise SpecError(f"{where}: zero=True is for scratch tensors")
        if self.optional and self.role not in ("input", "inplace"):
            raise SpecError(f"{where}: only inputs can be optional")

    @property
    def is_input(self) -> bool:
        return self.role in ("input", "inplace")

    def dims(self) -> list[list]:
        """Each dim as a postfix program (see tkreg.expr)."""
        return [_expr.parse(str(d)) for d in self.shape]

    def stride_progs(self) -> list[list] | None:
        return None if self.strides is None else [_expr.parse(str(d)) for d in self.strides]

    def to_json(self) -> dict:
        d = {"name": self.name, "shape": [str(s) for s in self.shape], "role": self.role}
        for k in ("dtypes", "dtype_of", "dtype"):
            v = getattr(self, k)
            if v:
                d[k] = list(v) if k == "dtypes" else v
        if self.optional:
            d["optional"] = True
        if self.strides is not None:
            d["strides"] = [str(s) for s in self.strides]
        if self.zero:
            d["zero"] = True
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> "Tensor":
        strides = d.get("strides")
        return cls(d["name"], tuple(d["shape"]), tuple(d.get("dtypes", ())), d.get("dtype_of"),
                   d.get("dtype"), d.get("role", "input"), d.get("optional", False),
                   None if strides is None else tuple(strides), d.get("zero", False))


@RECORD
class Scalar(Fields):
    """A scalar argument; `default=None` makes it required."""
    name: str
    type: str = "float32"
    default: Any = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not re.fullmatch(_NAME, self.name):
            raise SpecError(f"scalar name {self.name!r} is not an identifier")
        if self.type not in SCALAR_TYPES:
            raise SpecError(f"scalar `{self.name}`: type {self.type!r} not in {SCALAR_TYPES}")

    @property
    def integral(self) -> bool:
        """Usable in expressions (grids, rules, shapes)."""
        return self.type in ("int32", "int64", "bool")

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type, "default": self.default}

    @classmethod
    def from_json(cls, d: Mapping) -> "Scalar":
        return cls(d["name"], d["type"], d.get("default"))


@RECORD
class Variant(Fields):
    """One compiled instance: the factory's compile-time parameters, when it applies, its rank.

    `rule` is a boolean expression ("M <= 64 and K % 128 == 0", "has_bias"); static dims the
    factory bakes in become rules automatically.  Higher `priority` is tried first.  `archs`
    limits it to some archs; `pass_configs` (tilelang PassContext options) and `nvcc_flags`
    (appended to tkreg's own) tune its compile.  The factory is called with the params, plus
    `arch=` when it has an `arch` parameter.
    """
    params: tuple
    rule: str | None = None
    priority: int = 0
    archs: tuple | None = None
    pass_configs: tuple = ()
    nvcc_flags: tuple = ()

    def __init__(self, params: Mapping | tuple, rule: str | None = None, priority: int = 0,
                 archs=None, pass_configs: Mapping | tuple = (), nvcc_flags=()):
        items = tuple(sorted(dict(params).items()))
        for k, v in items:
            if not isinstance(k, str) or not re.fullmatch(_NAME, k):
                raise SpecError(f"variant parameter name {k!r} is not an identifier")
            variant_key.value(v)
        object.__setattr__(self, "params", items)
        object.__setattr__(self, "rule", rule)
        object.__setattr__(self, "priority", int(priority))
        object.__setattr__(self, "archs", tuple(archs) if archs else None)
        object.__setattr__(self, "pass_configs", tuple(sorted(dict(pass_configs).items())))
        object.__setattr__(self, "nvcc_flags", tuple(nvcc_flags))
        if rule:
            _expr.parse(rule)  # fail early on a bad rule

    @property
    def key(self) -> str:
        """`N=4096,dtype=bfloat16`: sorted; `Variant.parse_key(key)` gives the params back."""
        return variant_key.format_key(self.params)

    @staticmethod
    def parse_key(key: str) -> dict:
        return variant_key.parse_key(key)

    def kwargs(self) -> dict:
        return dict(self.params)

    def to_json(self) -> dict:
        d = {"params": dict(self.params), "rule": self.rule, "priority": self.priority}
        if self.archs:
            d["archs"] = list(self.archs)
        if self.pass_configs:
            d["pass_configs"] = dict(self.pass_configs)
        if self.nvcc_flags:
            d["nvcc_flags"] = list(self.nvcc_flags)
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> "Variant":
        return cls(d["params"], d.get("rule"), d.get("priority", 0), d.get("archs"),
                   d.get("pass_configs", {}), d.get("nvcc_flags", ()))


@RECORD
class OpSpec(Fields):
    """Everything about one op. `name` is qualified: `tkreg.<op>` or `<plugin namespace>.<op>`.

    `reference` and `backward` are `"module:attr"` names, imported only when used: the torch
    oracle (tests and TKREG_FALLBACK=reference), and a class with `setup_context(ctx, inputs,
    output)` and `backward(ctx, *grads)` static methods that makes the torch op differentiable.
    `index64=True` lets element counts and sizes exceed int32 (the kernels index with int64).
    """
    name: str
    tensors: tuple
    scalars: tuple = ()
    variants: tuple = ()
    factory: Callable | None = field(default=None, compare=False)
    reference: str | None = None
    archs: tuple = ("sm_90a", "sm_100a")
    extends: bool = False               # a plugin adding variants to an op it does not own
    doc: str = ""
    backward: str | None = None
    index64: bool = False

    def __post_init__(self):
        for k in ("tensors", "scalars", "variants", "archs"):
            object.__setattr__(self, k, tuple(getattr(self, k)))
        if not isinstance(self.name, str) or not re.fullmatch(_QUALIFIED, self.name):
            raise SpecError(f"op name {self.name!r} must be `namespace.op`")
        for k in ("reference", "backward"):
            v = getattr(self, k)
            if v is not None and not re.fullmatch(_REF, v):
                raise SpecError(f"{self.name}: {k}={v!r} must be `module:attr`")
        names = [t.name for t in self.tensors] + [s.name for s in self.scalars]
        if len(set(names)) != len(names):
            raise SpecError(f"{self.name}: argument names repeat: {names}")
        reserved = set(names) & ({f"has_{t.name}" for t in self.tensors} | set(DEVICE_SYMBOLS))
        if reserved:
            raise SpecError(f"{self.name}: argument names {sorted(reserved)} are reserved")
        self.dtype_roots()  # dtype_of names a tensor, with no cycle
        keys = [v.key for v in self.variants]
        if len(set(keys)) != len(keys):
            raise SpecError(f"{self.name}: two variants share a key")
        bound = self.symbols() | self.stride_symbols() | self.scalar_symbols() | set(DEVICE_SYMBOLS)
        for t in self.tensors:
            if t.is_input:
                for p in t.dims() + (t.stride_progs() or []):
                    missing = _expr.symbols(p) - bound
                    if missing:
                        raise SpecError(f"{self.name}: `{t.name}` shape or strides use {sorted(missing)}, "
                                        "which no input dimension or integer scalar binds")
        rule_names = bound | self.presence_symbols()
        for v in self.variants:
            if v.rule:
                missing = _expr.symbols(_expr.parse(v.rule)) - rule_names
                if missing:
                    raise SpecError(f"{self.name}[{v.key}]: rule {v.rule!r} names {sorted(missing)}, which "
                                    f"the op does not have (it has {', '.join(sorted(rule_names))})")
        for p in sorted(self.param_symbols()):
            for v in self.variants or (None,):
                val = dict(v.params).get(p) if v else None
                if not isinstance(val, int) or isinstance(val, bool):
                    users = [t.name for t in self.tensors if any(p in _expr.symbols(d) for d in t.dims())]
                    raise SpecError(f"{self.name}: `{users[0]}` shape uses `{p}`, which no input dimension "
                                    "or integer scalar binds and " + (f"variant {v.key!r} does not set to an int"
                                                                      if v else "no variant sets"))

    @property
    def namespace(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def short(self) -> str:
        return self.name.split(".", 1)[1]

    def tensor(self, name: str) -> Tensor:
        return next(t for t in self.tensors if t.name == name)

    def symbols(self) -> set:
        """Size symbols: bound by an input dim that is a symbol or a multiple of one (`2 * N`)."""
        return {s[0] for t in self.tensors if t.is_input for p in t.dims() if (s := _expr.scaled_symbol(p))}

    def stride_symbols(self) -> set:
        return {d for t in self.tensors if t.is_input and t.strides for d in t.strides if _is_symbol(d)}

    def scalar_symbols(self) -> set:
        return {s.name for s in self.scalars if s.integral}

    def presence_symbols(self) -> set:
        return {f"has_{t.name}" for t in self.tensors if t.optional}

    def param_symbols(self) -> set:
        """Variant parameters that output or scratch shapes use."""
        bound = self.symbols() | self.scalar_symbols() | set(DEVICE_SYMBOLS)
        return {s for t in self.tensors if not t.is_input for d in t.dims() for s in _expr.symbols(d)} - bound

    def dtype_roots(self) -> dict:
        """tensor -> the tensor with `dtypes=` (or fixed `dtype=`) its `dtype_of` chain ends at."""
        by = {t.name: t for t in self.tensors}
        roots = {}
        for t in self.tensors:
            seen, cur = [t.name], t
            while cur.dtype_of:
                if cur.dtype_of not in by:
                    raise SpecError(f"{self.name}: `{cur.name}` dtype_of={cur.dtype_of!r} names no tensor")
                cur = by[cur.dtype_of]
                if cur.name in seen:
                    raise SpecError(f"{self.name}: dtype_of forms a cycle: {' -> '.join(seen + [cur.name])}")
                seen.append(cur.name)
            roots[t.name] = cur.name
        return roots

    def check_uses(self, names) -> None:
        """A variant's kernels take a subset of the op's tensors, every output among them."""
        unknown = set(names) - {t.name for t in self.tensors}
        if unknown:
            raise SpecError(f"the kernels take tensors {sorted(unknown)} the op does not have")
        missing = {t.name for t in self.tensors if t.role == "output"} - set(names)
        if missing:
            raise SpecError(f"no kernel takes output(s) {sorted(missing)}")

    def user_args(self) -> list:
        """The calling convention: input tensors, then scalars, then outputs (all by position or
        name; scratch is never passed).  torch schemas list the first two the same way."""
        return ([t for t in self.tensors if t.is_input] + list(self.scalars)
                + [t for t in self.tensors if t.role == "output"])

    def arguments(self, bound: tuple) -> dict:
        """A bound call (every tensor in spec order, then every scalar) as name -> value."""
        return dict(zip([t.name for t in self.tensors] + [s.name for s in self.scalars], bound))

    def variants_for(self, arch: str):
        return [v for v in self.variants if v.archs is None or arch in v.archs]

    def to_json(self) -> dict:
        d = {"name": self.name, "tensors": [t.to_json() for t in self.tensors],
             "scalars": [s.to_json() for s in self.scalars],
             "variants": [v.to_json() for v in self.variants], "archs": list(self.archs),
             "reference": self.reference, "extends": self.extends, "doc": self.doc}
        if self.backward:
            d["backward"] = self.backward
        if self.index64:
            d["index64"] = True
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> "OpSpec":
        return cls(name=d["name"], tensors=tuple(Tensor.from_json(t) for t in d["tensors"]),
                   scalars=tuple(Scalar.from_json(s) for s in d.get("scalars", ())),
                   variants=tuple(Variant.from_json(v) for v in d.get("variants", ())),
                   archs=tuple(d.get("archs", ("sm_90a", "sm_100a"))), reference=d.get("reference"),
                   extends=d.get("extends", False), doc=d.get("doc", ""), backward=d.get("backward"),
                   index64=d.get("index64", False))
