"""The launch plan of one compiled variant, as frozen records.

`build_tools/extract_plan.py` reads it out of tilelang's IR, the manifest stores it (`to_json`), the run
time reads it back (`from_json`) and `tkreg/assemble.py` turns it into the launcher's structs.
Programs (grid, smem, TMA dims/strides, constraints) are postfix tuples, see tkreg/expr.py.
"""
from __future__ import annotations

from typing import Mapping

from .codes import PARAMS, TYPES
from .errors import PackError
from .record import RECORD, Fields


def _prog(p) -> tuple:
    if not isinstance(p, (list, tuple)):
        raise PackError(f"a program must be a list, got {p!r}")
    return tuple(p)


@RECORD
class Param(Fields):
    """One kernel parameter: a tensor's pointer (`name` the tensor), a TMA descriptor (`index`
    into Plan.tma), a symbol (`name`, `type` int32/int64) or a scalar (`name`, `type`)."""
    kind: str
    name: str | None = None
    index: int | None = None
    type: str | None = None

    def __post_init__(self):
        if self.kind not in PARAMS:
            raise PackError(f"parameter kind {self.kind!r} not in {tuple(PARAMS)}")
        if self.kind == "tma" and not isinstance(self.index, int):
            raise PackError("a tma parameter needs an integer `index`")
        if self.kind != "tma" and not isinstance(self.name, str):
            raise PackError(f"a {self.kind} parameter needs a `name`")
        if self.kind in ("sym", "scalar") and self.type not in TYPES:
            raise PackError(f"parameter {self.name}: type {self.type!r} not in {tuple(TYPES)}")

    def to_json(self) -> dict:
        if self.kind == "tma":
            return {"kind": "tma", "index": self.index}
        if self.kind == "ptr":
            return {"kind": "ptr", "tensor": self.name}
        return {"kind": self.kind, "name": self.name, "type": self.type}

    @classmethod
    def from_json(cls, d: Mapping) -> "Param":
        return cls(d["kind"], d.get("tensor", d.get("name")), d.get("index"), d.get("type"))


@RECORD
class TmaDesc(Fields):
    """`cuTensorMapEncodeTiled`'s arguments for one tensor; dims innermost first, strides in
    bytes for dims 1.. (the element size is implied)."""
    tensor: str
    dtype: int
    rank: int
    dims: tuple
    strides: tuple
    box: tuple
    elem_strides: tuple
    interleave: int
    swizzle: int
    l2: int
    oob: int

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(_prog(p) for p in self.dims))
        object.__setattr__(self, "strides", tuple(_prog(p) for p in self.strides))
        object.__setattr__(self, "box", tuple(self.box))
        object.__setattr__(self, "elem_strides", tuple(self.elem_strides))
        if not (1 <= self.rank <= 5 and len(self.dims) == self.rank and len(self.strides) == self.rank - 1
                and len(self.box) == self.rank and len(self.elem_strides) == self.rank):
            raise PackError(f"TMA descriptor of `{self.tensor}`: rank {self.rank} does not match its lists")

    def to_json(self) -> dict:
        return {"tensor": self.tensor, "dtype": self.dtype, "rank": self.rank,
                "dims": [list(p) for p in self.dims], "strides": [list(p) for p in self.strides],
                "box": list(self.box), "elem_strides": list(self.elem_strides),
                "interleave": self.interleave, "swizzle": self.swizzle, "l2": self.l2, "oob": self.oob}

    @classmethod
    def from_json(cls, d: Mapping) -> "TmaDesc":
        return cls(d["tensor"], d["dtype"], d["rank"], d["dims"], d["strides"], d["box"],
                   d["elem_strides"], d["interleave"], d["swizzle"], d["l2"], d["oob"])


@RECORD
class Launch(Fields):
    """One kernel of the plan, in launch order."""
    name: str
    grid: tuple
    block: tuple
    smem: tuple
    cluster: tuple = (1, 1, 1)
    cooperative: bool = False
    pdl: bool = False
    params: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "grid", tuple(_prog(p) for p in self.grid))
        object.__setattr__(self, "smem", _prog(self.smem))
        object.__setattr__(self, "block", tuple(int(b) for b in self.block))
        object.__setattr__(self, "cluster", tuple(int(c) for c in self.cluster))
        object.__setattr__(self, "params", tuple(self.params))
        if len(self.grid) != 3 or len(self.block) != 3 or len(self.cluster) != 3:
            raise PackError(f"kernel {self.name}: grid, block and cluster need 3 entries each")

    def to_json(self) -> dict:
        return {"name": self.name, "grid": [list(p) for p in self.grid], "block": list(self.block),
                "smem": list(self.smem), "cluster": list(self.cluster), "cooperative": self.cooperative,
                "pdl": self.pdl, "params": [p.to_json() for p in self.params]}

    @classmethod
    def from_json(cls, d: Mapping) -> "Launch":
        return cls(d["name"], d["grid"], d["block"], d["smem"], d.get("cluster", (1, 1, 1)),
                   bool(d.get("cooperative", False)), bool(d.get("pdl", False)),
                   tuple(Param.from_json(p) for p in d["params"]))


@RECORD
class Constraint(Fields):
    """A condition the variant needs (a static size it baked in, or its rule)."""
    text: str
    prog: tuple

    def __post_init__(self):
        object.__setattr__(self, "prog", _prog(self.prog))

    def to_json(self) -> dict:
        return {"text": self.text, "prog": list(self.prog)}

    @classmethod
    def from_json(cls, d: Mapping) -> "Constraint":
        return cls(d["text"], d["prog"])


@RECORD
class Plan(Fields):
    """`dtypes` names each tensor the kernels take (a variant may leave some of the op's out)."""
    dtypes: tuple
    constraints: tuple
    kernels: tuple
    tma: tuple = ()

    def __init__(self, dtypes: Mapping | tuple, constraints=(), kernels=(), tma=()):
        object.__setattr__(self, "dtypes", tuple(sorted(dict(dtypes).items())))
        object.__setattr__(self, "constraints", tuple(constraints))
        object.__setattr__(self, "kernels", tuple(kernels))
        object.__setattr__(self, "tma", tuple(tma))
        if not self.kernels:
            raise PackError("a plan launches at least one kernel")

    @property
    def uses(self) -> dict:
        return dict(self.dtypes)

    def to_json(self) -> dict:
        return {"dtypes": dict(self.dtypes), "constraints": [c.to_json() for c in self.constraints],
                "kernels": [k.to_json() for k in self.kernels], "tma": [t.to_json() for t in self.tma]}

    @classmethod
    def from_json(cls, d: Mapping) -> "Plan":
        return cls(d["dtypes"], tuple(Constraint.from_json(c) for c in d["constraints"]),
                   tuple(Launch.from_json(k) for k in d["kernels"]),
                   tuple(TmaDesc.from_json(t) for t in d.get("tma", ())))
