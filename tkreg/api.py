"""The generic entry points: call any registered op by name, explain a dispatch, add a pack."""
from __future__ import annotations

from dataclasses import dataclass

from .env import skip_variants
from .ops._route import call_graph, compiling
from .runtime import RUNTIME


def call(name: str, *args, **kwargs):
    """Run any registered op: `tkreg.call("tkreg.rms_norm", x, w, eps=1e-5)`; returns its outputs.

    Arguments follow the op's calling convention: input tensors, then scalars, then outputs,
    by position or by name (`tkreg list` shows each signature); outputs are allocated unless
    given.  `name` is `ns.op`, or `plugin:ns.op` for the variants of one plugin only (its
    entry-point name; reaches a plugin's op where another pack owns the plain name).  Under
    torch.compile it traces as the op's torch op (`torch.ops.<ns>.<op>`) with no graph break, so
    a plugin's one-line typed wrapper over `tkreg.call` compiles like a built-in.
    """
    if compiling():
        return call_graph(name, args, kwargs)
    return RUNTIME.op(RUNTIME.registry.entry(name).name)(*args, **kwargs)


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
        if skip_variants():
            lines.append(f"  (TKREG_SKIP_VARIANTS={skip_variants()!r} removed the variants it names)")
        return "\n".join(lines)


def explain(name: str, *args, arch: str | None = None, sm_count: int | None = None, **kwargs) -> Explanation:
    """Which variant a call would run and why each other was passed over (nothing launches).

    `arch="sm_100a"` asks about a GPU generation other than the tensors' device (and answers
    for CPU tensors, which otherwise are refused like a call); with CPU tensors, `sm_count=`
    is the multiprocessor count that rules reading `SM_COUNT` assume (132 for an H100/H200).
    """
    e = RUNTIME.registry.entry(name)
    return Explanation(e.name, RUNTIME.explain(e.name, args, kwargs, arch, sm_count))


def register_pack(path):
    """Load a pack folder (holding <arch>/manifest.json) that no installed package provides.

    Returns its `PackSource`; a pack that fails the checks a pack gets when it loads (manifest,
    schema, specs, plans, each cubin's sha256 and ELF arch) raises PackError naming the pack and
    the reason, and nothing of it is added."""
    return RUNTIME.register_pack(path)


def list_ops() -> list[dict]:
    """One dict per op: name, owner pack, archs, dtypes, variants per arch.

    Plain names first; then each `plugin:ns.op` that the plain name does not already give
    (a plugin that lost a name conflict, or one whose variants extend another pack's op).
    """
    reg = RUNTIME.registry.complete()
    shadowed = [(n, e) for n, e in sorted(reg.qualified.items())
                if getattr(reg.entries.get(e.spec.name), "owner", None) != e.owner]
    out = []
    for name, e in sorted(reg.entries.items()) + shadowed:
        sig = {k: v for k, v in e.spec.to_json().items() if k != "variants"}
        out.append({
            "op": name, "owner": e.owner, "doc": e.spec.doc, "archs": e.archs(),
            "dtypes": {t.name: list(t.dtypes) for t in e.spec.tensors if t.dtypes},
            "variants": {a: e.keys(a) for a in e.archs()},
            "signature": sig,
        })
    return out
