"""The run time: one object that owns the packs (a Registry), the native ops built from them,
and their registration with torch.

`RUNTIME.op(name)` builds one `_launcher.Op` per op on first use; the Op binds, validates,
selects and launches in C, and calls back here only when it needs Python: the variants for a
device it has not seen (`resolve`, once per device), a refused call (`on_error`: the message,
tkreg/diagnose.py), no variant or no pack (`fallback`: NoKernelError or the torch reference)
and inputs that require grad (`autograd`: the torch custom op, which autograd can record).
"""
from __future__ import annotations

import functools
import threading

from . import env
from .assemble import op_args, slots, variant_args
from .errors import NoKernelError, UnsupportedDeviceError
from .registry import ARCH_OF_CAPABILITY, OpEntry, Registry
from .spec import import_ref


class Runtime:
    def __init__(self, registry: Registry | None = None):
        self.registry = registry or Registry()
        self._lock = threading.RLock()
        self._ops: dict = {}
        self._tables: dict = {}       # (op name, arch) -> tuple[_launcher.Variant]
        self._candidate: dict = {}    # _launcher.Variant -> the Candidate it was built from
        self._torch_done = False

    # ---- native ops -----------------------------------------------------------------------
    def op(self, name: str):
        """The native `_launcher.Op` for `name` (built once; again after register_pack)."""
        o = self._ops.get(name)
        if o is None:
            with self._lock:
                o = self._ops.get(name)
                if o is None:
                    o = self._ops[name] = self._build(self.registry.entry(name))
        return o

    def _build(self, e: OpEntry):
        from .native import launcher
        hooks = tuple(functools.partial(f, e) for f in (self.resolve, self.fallback, self.autograd, self.on_error))
        return launcher().Op(e.spec.name, *op_args(e.spec), hooks)

    def arch_of(self, dev: int) -> str | None:
        import torch
        return ARCH_OF_CAPABILITY.get(tuple(torch.cuda.get_device_capability(dev)))

    def resolve(self, e: OpEntry, dev: int):
        """(variants serving `dev` in priority order, its SM count); None runs the reference
        (when allowed).  Asked once per (op, device)."""
        arch = self.arch_of(dev) if dev >= 0 else None
        if dev >= 0 and arch not in e.sources:
            self.registry.complete()   # a built-in arch not read yet may serve it; the error names all
        if arch is not None and arch in e.sources:
            import torch
            return self.table(e, arch), torch.cuda.get_device_properties(dev).multi_processor_count
        if env.fallback_reference():
            return None
        if dev < 0:
            raise ValueError(f"{e.spec.name}: arguments are on the CPU; tkreg kernels run on CUDA "
                             "devices (set TKREG_FALLBACK=reference to run the torch reference)")
        import torch
        cap = "%d.%d" % tuple(torch.cuda.get_device_capability(dev))
        raise UnsupportedDeviceError(
            f"{e.spec.name}: cuda:{dev} has compute capability {cap}"
            + (f" ({arch})" if arch else "") + f"; the installed packs hold {e.archs() or 'nothing'} "
            "for this op. Set TKREG_FALLBACK=reference to run the torch reference instead.")

    def table(self, e: OpEntry, arch: str) -> tuple:
        t = self._tables.get((e.name, arch))
        if t is None:
            from .native import launcher
            V, spec = launcher().Variant, e.spec
            rows = []
            for c in e.candidates(arch):
                where = f"{spec.name}[{c.key}]"
                v = V(c.key, *variant_args(spec, c.variant.kwargs(), c.record.plan, where),
                      functools.partial(c.cubin, spec.name, arch))
                self._candidate[v] = c
                rows.append(v)
            t = self._tables[(e.name, arch)] = tuple(rows)
        return t

    # ---- callbacks from the launcher ------------------------------------------------------
    def on_error(self, e: OpEntry, code, index, detail, bound, env_):
        from . import diagnose
        raise diagnose.refusal(e.spec, code, index, detail, bound, env_, slots(e.spec).names)

    def fallback(self, e: OpEntry, bound: tuple, rows, env_):
        """No pack serves the device (rows None: the user opted in), or no variant accepts."""
        if rows is not None and not env.fallback_reference():
            from . import diagnose
            raise NoKernelError(diagnose.no_kernel(e.spec, self._reasons(e, bound, rows), env_,
                                                   slots(e.spec).names))
        return run_reference(e.spec, bound)

    def autograd(self, e: OpEntry, bound: tuple):
        """An input requires grad: the autograd-aware custom op, or a clear refusal."""
        spec = e.spec
        args = spec.arguments(bound)
        if any(args[t.name] is not None for t in spec.tensors if t.role == "output"):
            raise RuntimeError(f"{spec.name}: out= tensors do not support autograd; drop out= or run under "
                               "torch.no_grad()")
        if not spec.backward:
            raise RuntimeError(f"{spec.name} has no backward kernel, and an input requires grad; run it under "
                               "torch.no_grad() or detach its inputs")
        from .torch_library import schema_args
        return self.torch_op(spec.name)(*[args[n] for n in schema_args(spec)])

    # ---- explain --------------------------------------------------------------------------
    def _reasons(self, e: OpEntry, bound: tuple, rows, sm_known: bool = True) -> list:
        """(key, why) per variant of a table, from the launcher's (variant, code, index) rows."""
        from . import diagnose
        out = []
        for v, code, idx in rows:
            c = self._candidate[v]
            out.append((c.key, diagnose.rejection(e.spec, code, idx, bound, c.record.plan.constraints,
                                                  c.record.plan.uses, sm_known)))
        return out

    def explain(self, name: str, args: tuple, kwargs: dict, arch: str | None = None,
                sm_count: int | None = None) -> list:
        """[(variant key, chosen, reason)] for a call, without launching.  `sm_count` is the SM
        count rules see for CPU tensors (with `arch`); CUDA tensors use their device's."""
        e = self.registry.entry(name)
        o = self.op(e.name)
        if arch is not None and arch not in e.sources:
            self.registry.complete()   # `arch` may be a built-in arch not read yet
        if arch is not None and arch not in e.sources:
            raise UnsupportedDeviceError(f"{e.spec.name}: no variants for {arch}; have {e.archs()}")
        dev, bound, _, rows = o.check(args, kwargs, *((self.table(e, arch), int(sm_count or 0)) if arch else ()))
        if rows is None:
            return [("<torch reference>", True, "TKREG_FALLBACK=reference and no pack serves this device")]
        out, chosen = [], False
        for key, why in self._reasons(e, bound, rows, sm_known=dev >= 0 or bool(sm_count)):
            ok = why == "accepted"
            out.append((key, ok and not chosen, why if not (ok and chosen) else
                        "accepted, but a higher-priority variant was chosen"))
            chosen |= ok
        return out

    # ---- torch ----------------------------------------------------------------------------
    def register_torch(self) -> list[str]:
        """Every op of every pack as `torch.ops.<ns>.<op>` (each once); returns their names."""
        from . import torch_library
        names = sorted(self.registry.complete().entries)
        for n in names:
            torch_library.register(self.registry.entries[n].spec, self.op)
        self._torch_done = True
        return names

    def torch_op(self, name: str):
        from . import torch_library
        spec = self.registry.entry(name).spec
        torch_library.register(spec, self.op)
        return torch_library.GRAPH[spec.name]

    def reset(self) -> None:
        """Forget the native ops and tables built so far: they are built again on next use."""
        with self._lock:
            self._ops.clear()
            self._tables.clear()
            self._candidate.clear()
            OPS.clear()

    def register_pack(self, path):
        """Add a pack folder; ops built before see its variants on their next use."""
        with self._lock:
            src = self.registry.register_pack(path)
            self.reset()
        if self._torch_done:
            self.register_torch()
        return src


def run_reference(spec, bound: tuple):
    """TKREG_FALLBACK=reference: the torch reference, writing into `out=` tensors if given."""
    if not spec.reference:
        raise UnsupportedDeviceError(f"{spec.name} has no torch reference to fall back to")
    ref = import_ref(spec.reference)
    args = spec.arguments(bound)
    res = ref(**{n: args[n] for n in [t.name for t in spec.tensors if t.is_input] + [s.name for s in spec.scalars]})
    res = res if isinstance(res, tuple) else (res,) if res is not None else ()
    outs = [args[t.name] for t in spec.tensors if t.role == "output"]
    final = []
    for given, r in zip(outs, res):
        if given is not None:
            given.copy_(r)
            r = given
        final.append(r)
    return final[0] if len(final) == 1 else (tuple(final) if final else None)


RUNTIME = Runtime()


class _OpTable(dict):
    """name -> native Op, built on first lookup (the typed functions' fast path)."""

    def __missing__(self, name):
        op = self[name] = RUNTIME.op(name)
        return op


OPS = _OpTable()
