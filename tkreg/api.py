"""The generic entry points: call any registered op by name, explain a dispatch, add a pack."""
from __future__ import annotations

from dataclasses import dataclass

from .registry import OPS, REGISTRY
from .spec import OpSpec


def bind(spec: OpSpec, args: tuple, kwargs: dict) -> tuple:
    """User arguments -> the launcher's order (every tensor of the spec, then every scalar).

    Positional arguments fill the input (and in-place) tensors in spec order; outputs, scalars
    and inputs may also be given by name.  Scalars without a value take the spec's default.
    """
    inputs = [t for t in spec.tensors if t.role in ("input", "inplace")]
    if len(args) > len(inputs):
        raise TypeError(f"{spec.name} takes {len(inputs)} positional tensor(s) "
                        f"({', '.join(t.name for t in inputs)}), got {len(args)}")
    given = {t.name: a for t, a in zip(inputs, args)}
    for k, v in kwargs.items():
        if k in given:
            raise TypeError(f"{spec.name}: `{k}` given twice")
        given[k] = v
    known = {t.name for t in spec.tensors} | {s.name for s in spec.scalars}
    extra = set(given) - known
    if extra:
        raise TypeError(f"{spec.name}: unexpected argument(s) {sorted(extra)}; it takes {sorted(known)}")
    out = []
    for t in spec.tensors:
        if t.role == "scratch" and given.get(t.name) is not None:
            raise TypeError(f"{spec.name}: `{t.name}` is scratch space the launcher allocates")
        if t.role in ("input", "inplace") and t.name not in given and not t.optional:
            raise TypeError(f"{spec.name}: missing tensor `{t.name}`")
        out.append(given.get(t.name))
    for s in spec.scalars:
        if s.name in given:
            out.append(given[s.name])
        elif s.default is not None:
            out.append(s.default)
        else:
            raise TypeError(f"{spec.name}: missing scalar `{s.name}`")
    return tuple(out)


def call(name: str, *args, **kwargs):
    """Run any registered op: `tkreg.call("tkreg.rms_norm", x, w, eps=1e-5)`; returns its outputs.

    `name` is `ns.op`, or `plugin:ns.op` for the variants of one plugin only (its entry-point
    name; reaches a plugin's op where another pack owns the plain name).
    """
    e = REGISTRY.entry(name)
    return OPS[e.name](*bind(e.spec, args, kwargs))


@dataclass
class Explanation:
    op: str
    rows: list   # (variant key, chosen, reason)

    @property
    def chosen(self) -> str | None:
        return next((k for k, c, _ in self.rows if c), None)

    def __str__(self):
        lines = [f"{self.op}: " + (f"runs {self.chosen}" if self.chosen else "no variant accepts")]
        lines += [f"  {'*' if c else ' '} {k}: {why}" for k, c, why in self.rows]
        return "\n".join(lines)


def explain(name: str, *args, arch: str | None = None, **kwargs) -> Explanation:
    """Which variant a call would run and why each other was passed over (nothing launches).

    `arch="sm_100a"` asks about another GPU generation than the tensors' device.
    """
    e = REGISTRY.entry(name)
    return Explanation(e.name, REGISTRY.explain(e.name, bind(e.spec, args, kwargs), arch))


def register_pack(path):
    """Load a pack folder (holding <arch>/manifest.json) that no installed package provides."""
    return REGISTRY.register_pack(path)


def list_ops() -> list[dict]:
    """One dict per op: name, owner pack, archs, dtypes, variants per arch.

    Plain names first; then each `plugin:ns.op` that the plain name does not already give
    (a plugin that lost a name conflict, or one whose variants extend another pack's op).
    """
    REGISTRY._ensure()
    out = []
    shadowed = [(n, e) for n, e in sorted(REGISTRY.qualified.items())
                if getattr(REGISTRY.entries.get(e.spec.name), "owner", None) != e.owner]
    for name, e in sorted(REGISTRY.entries.items()) + shadowed:
        free = [t for t in e.spec.tensors if t.dtypes]
        out.append({
            "op": name, "owner": e.owner, "doc": e.spec.doc, "archs": e.archs(),
            "dtypes": {t.name: list(t.dtypes) for t in free},
            "variants": {a: sorted(v["key"] for v, _, _ in vs) for a, vs in sorted(e.variants.items())},
            "signature": e.spec.to_json(),
        })
    return out
