"""One frozen spec describes an op from TileLang source to launch.

`kernels_src/` (and plugins) build `OpSpec`s with a `factory`; `build_tools` compiles each
`Variant` and writes the spec into the pack manifest (`OpSpec.to_json`); the run time reads it
back (`OpSpec.from_json`, no factory) to validate arguments and allocate outputs.  Nothing here
imports torch or tilelang, so `import tkreg` stays fast and build-time code can use it too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from . import expr as _expr
from .errors import SpecError

# The dtypes a pack can name; codes are shared with the C launcher (order matters, append only).
DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int32", "int64",
          "int8", "uint8", "bool", "float64", "float8_e8m0fnu")
SCALAR_TYPES = ("float32", "float64", "int32", "int64", "bool")
ROLES = ("input", "output", "inplace", "scratch")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUALIFIED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Tensor:
    """A tensor argument. `shape` holds symbol names, ints or small expressions ("H // 2").

    `dtypes` lists what the op accepts; `dtype_of` ties the dtype to another tensor's instead;
    `dtype` fixes it (e.g. fp32 scales).  Roles: input, output (allocated when not given),
    inplace (an input the kernel writes), scratch (allocated per call, never returned).
    `optional` inputs may be None; the kernel then receives a null pointer.
    """
    name: str
    shape: tuple
    dtypes: tuple = ()
    dtype_of: str | None = None
    dtype: str | None = None
    role: str = "input"
    optional: bool = False

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        if not _NAME.fullmatch(self.name):
            raise SpecError(f"tensor name {self.name!r} is not an identifier")
        if sum(x is not None and x != () for x in (self.dtypes or None, self.dtype_of, self.dtype)) != 1:
            raise SpecError(f"tensor `{self.name}`: give exactly one of dtypes=, dtype_of=, dtype=")
        for d in self.dtypes + ((self.dtype,) if self.dtype else ()):
            if d not in DTYPES:
                raise SpecError(f"tensor `{self.name}`: unknown dtype {d!r}; known: {', '.join(DTYPES)}")
        if self.role not in ROLES:
            raise SpecError(f"tensor `{self.name}`: role {self.role!r} not in {ROLES}")

    def dims(self) -> list[list]:
        """Each dim as a postfix program (see tkreg.expr)."""
        return [_expr.parse(str(d)) for d in self.shape]

    def to_json(self) -> dict:
        d = {"name": self.name, "shape": [str(s) for s in self.shape], "role": self.role}
        for k in ("dtypes", "dtype_of", "dtype"):
            v = getattr(self, k)
            if v:
                d[k] = list(v) if k == "dtypes" else v
        if self.optional:
            d["optional"] = True
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> "Tensor":
        return cls(d["name"], tuple(d["shape"]), tuple(d.get("dtypes", ())), d.get("dtype_of"),
                   d.get("dtype"), d.get("role", "input"), d.get("optional", False))


@dataclass(frozen=True)
class Scalar:
    name: str
    type: str = "float32"
    default: Any = None

    def __post_init__(self):
        if self.type not in SCALAR_TYPES:
            raise SpecError(f"scalar `{self.name}`: type {self.type!r} not in {SCALAR_TYPES}")

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type, "default": self.default}

    @classmethod
    def from_json(cls, d: Mapping) -> "Scalar":
        return cls(d["name"], d["type"], d.get("default"))


_KEY_ITEM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=([A-Za-z0-9_.\-]+)")


def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        raise SpecError(f"variant parameter value {v!r}: use ints or strings")
    s = str(v)
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", s):
        raise SpecError(f"variant parameter value {v!r} has characters a key cannot hold")
    return s


def _unfmt(s: str):
    return int(s) if re.fullmatch(r"-?[0-9]+", s) else s


@dataclass(frozen=True)
class Variant:
    """One compiled instance: the factory's compile-time parameters, when it applies, its rank.

    `rule` is a boolean expression over the op's symbols ("M <= 64 and K % 128 == 0"); static
    dims the factory bakes in become rules automatically.  Higher `priority` is tried first.
    """
    params: tuple
    rule: str | None = None
    priority: int = 0
    archs: tuple | None = None  # None: every arch the op is built for

    def __init__(self, params: Mapping | tuple, rule: str | None = None, priority: int = 0,
                 archs=None):
        items = tuple(sorted(dict(params).items()))
        object.__setattr__(self, "params", items)
        object.__setattr__(self, "rule", rule)
        object.__setattr__(self, "priority", int(priority))
        object.__setattr__(self, "archs", tuple(archs) if archs else None)
        if rule:
            _expr.parse(rule)  # fail early on a bad rule

    @property
    def key(self) -> str:
        """`N=4096,dtype=bfloat16`: sorted, and `Variant.parse_key(key)` gives params back."""
        return ",".join(f"{k}={_fmt(v)}" for k, v in self.params)

    @staticmethod
    def parse_key(key: str) -> dict:
        out = {}
        for item in key.split(",") if key else ():
            m = _KEY_ITEM.fullmatch(item)
            if not m:
                raise SpecError(f"bad variant key item {item!r} in {key!r}")
            out[m.group(1)] = _unfmt(m.group(2))
        return out

    def kwargs(self) -> dict:
        return dict(self.params)


@dataclass(frozen=True)
class OpSpec:
    """Everything about one op. `name` is qualified: `tkreg.<op>` or `<plugin namespace>.<op>`."""
    name: str
    tensors: tuple
    scalars: tuple = ()
    variants: tuple = ()
    factory: Callable | None = field(default=None, compare=False)
    reference: str | None = None        # "module:function" — the torch oracle and fallback
    archs: tuple = ("sm_90a", "sm_100a")
    extends: bool = False               # a plugin adding variants to an op it does not own
    doc: str = ""

    def __post_init__(self):
        object.__setattr__(self, "tensors", tuple(self.tensors))
        object.__setattr__(self, "scalars", tuple(self.scalars))
        object.__setattr__(self, "variants", tuple(self.variants))
        object.__setattr__(self, "archs", tuple(self.archs))
        if not _QUALIFIED.fullmatch(self.name):
            raise SpecError(f"op name {self.name!r} must be `namespace.op`")
        names = [t.name for t in self.tensors] + [s.name for s in self.scalars]
        if len(set(names)) != len(names):
            raise SpecError(f"{self.name}: argument names repeat: {names}")
        tnames = {t.name for t in self.tensors}
        for t in self.tensors:
            if t.dtype_of and t.dtype_of not in tnames:
                raise SpecError(f"{self.name}: `{t.name}` dtype_of={t.dtype_of!r} names no tensor")
        keys = [v.key for v in self.variants]
        if len(set(keys)) != len(keys):
            raise SpecError(f"{self.name}: two variants share a key")
        bound = self.symbols()
        for t in self.tensors:
            for d in t.dims():
                missing = _expr.symbols(d) - bound
                if missing:
                    raise SpecError(f"{self.name}: `{t.name}` shape uses {sorted(missing)}, which no "
                                    "input dimension binds")

    @property
    def namespace(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def short(self) -> str:
        return self.name.split(".", 1)[1]

    def symbols(self) -> set:
        """Symbols bound by a bare-symbol dim of an input (outputs may only use them)."""
        out = set()
        for t in self.tensors:
            if t.role in ("input", "inplace"):
                for d in t.shape:
                    if isinstance(d, str) and _NAME.fullmatch(d):
                        out.add(d)
        return out

    def variants_for(self, arch: str):
        return [v for v in self.variants if v.archs is None or arch in v.archs]

    def to_json(self) -> dict:
        return {"name": self.name, "tensors": [t.to_json() for t in self.tensors],
                "scalars": [s.to_json() for s in self.scalars], "reference": self.reference,
                "extends": self.extends, "doc": self.doc}

    @classmethod
    def from_json(cls, d: Mapping) -> "OpSpec":
        return cls(name=d["name"], tensors=tuple(Tensor.from_json(t) for t in d["tensors"]),
                   scalars=tuple(Scalar.from_json(s) for s in d.get("scalars", ())),
                   reference=d.get("reference"), extends=d.get("extends", False),
                   doc=d.get("doc", ""))
