"""Every registered op as a torch custom op: `torch.ops.<namespace>.<op>`, for torch.compile.

The schema, the fake (meta) implementation and the mutation annotations all come from the op's
spec, so plugins get the same treatment as built-ins.  The real implementation is the native
launcher.  Outputs are returned, never passed in (functional form); in-place tensors are
annotated `Tensor(a!)`.  Ops that training needs get autograd (backward kernels) through
`BACKWARD`.  For the rest, the eager path refuses a call whose inputs require grad (the
launcher's autograd hook, `autograd_path`) and torch's own fallback refuses their backward.

The typed eager functions (`tkreg.ops.*`) stay on the launcher's fast path and branch on
`torch.compiler.is_dynamo_compiling()` (24 ns eager; Dynamo folds it to True while tracing) to
`graph()`, which calls these custom ops: compiled code has no graph break.  Built-in ops are
registered when tkreg is imported, so a model can be compiled before any tkreg call.
"""
from __future__ import annotations

import threading

from . import expr
from .spec import OpSpec

_lock = threading.Lock()
_done: set = set()
_libs: dict = {}
GRAPH: dict = {}   # qualified op -> torch.ops overload packet, for `graph` (Dynamo reads it)
# qualified op -> (setup_context, backward) implemented with other tkreg ops; filled by the
# families' ops modules (tkreg/ops/*.py) through `differentiable`.
BACKWARD: dict = {}
_TYPE = {"float32": "float", "float64": "float", "int32": "int", "int64": "int", "bool": "bool"}


def differentiable(name: str):
    """Decorator for a family module: `@differentiable("tkreg.rms_norm")` on a class with
    `setup_context(ctx, inputs, output)` and `backward(ctx, *grads)` static methods."""
    def deco(cls):
        BACKWARD[name] = (cls.setup_context, cls.backward)
        return cls
    return deco


def schema(spec: OpSpec) -> str:
    """`rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor` from the spec."""
    args, alias = [], iter("abcdefghijklmnopqrstuvwxyz")
    for t in spec.tensors:
        if t.role == "input":
            args.append(f"Tensor{'?' if t.optional else ''} {t.name}")
        elif t.role == "inplace":
            args.append(f"Tensor({next(alias)}!){'?' if t.optional else ''} {t.name}")
    for s in spec.scalars:
        default = "" if s.default is None else f"={_lit(s.default, s.type)}"
        args.append(f"{_TYPE[s.type]} {s.name}{default}")
    outs = [t for t in spec.tensors if t.role == "output"]
    ret = "()" if not outs else "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return f"{spec.short}({', '.join(args)}) -> {ret}"


def _lit(v, typ):
    if typ == "bool":
        return "True" if v else "False"
    return repr(float(v)) if typ.startswith("float") else str(int(v))


def _launcher_args(spec: OpSpec, kw: dict) -> tuple:
    """Schema arguments (by name) -> the launcher's order, outputs left for it to allocate."""
    return tuple(kw.get(t.name) if t.role in ("input", "inplace") else None for t in spec.tensors) + \
        tuple(kw[s.name] for s in spec.scalars)


def _bind(spec: OpSpec, args, kwargs) -> dict:
    names = [t.name for t in spec.tensors if t.role in ("input", "inplace")] + [s.name for s in spec.scalars]
    kw = dict(zip(names, args))
    kw.update(kwargs)
    for s in spec.scalars:
        kw.setdefault(s.name, s.default)
    return kw


def _fake_outputs(spec: OpSpec, kw: dict):
    """Outputs' shapes from the spec's expressions over the inputs' (possibly symbolic) sizes."""
    import torch
    env, first = {}, None
    for t in spec.tensors:
        x = kw.get(t.name)
        if t.role in ("input", "inplace") and x is not None:
            first = first if first is not None else x
            for d, p in zip(x.shape, t.dims()):
                name = expr.is_symbol(p)
                if name and name not in env:
                    env[name] = d
    outs = []
    for t in spec.tensors:
        if t.role != "output":
            continue
        dtype = getattr(torch, t.dtype) if t.dtype else kw[t.dtype_of].dtype
        shape = [expr.evaluate(p, env) for p in t.dims()]
        outs.append(torch.empty(shape, dtype=dtype, device=first.device))
    return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)


def register(spec: OpSpec) -> bool:
    """Define `torch.ops.<ns>.<op>` for one spec (once); False when torch lacks torch.library."""
    with _lock:
        if spec.name in _done:
            return True
        import torch
        if not hasattr(torch, "library") or not hasattr(torch.library, "register_fake"):
            return False
        from .registry import OPS
        lib = _libs.get(spec.namespace)
        if lib is None:
            lib = _libs[spec.namespace] = torch.library.Library(spec.namespace, "FRAGMENT")
        lib.define(schema(spec))
        name = spec.name

        def impl(*args, **kwargs):
            return OPS[name](*_launcher_args(spec, _bind(spec, args, kwargs)))

        def fake(*args, **kwargs):
            return _fake_outputs(spec, _bind(spec, args, kwargs))

        for key in ("CUDA", "CPU"):
            lib.impl(spec.short, impl, key)
        # A Meta kernel is the fake implementation (FakeTensorMode runs it): the same result as
        # torch.library.register_fake without its inspect.getmodule() walk over every loaded
        # module, which cost ~20 ms of tkreg's import on an H200 box.
        lib.impl(spec.short, fake, "Meta")
        if name in BACKWARD:
            setup, backward = BACKWARD[name]
            torch.library.register_autograd(f"{spec.namespace}::{spec.short}", backward,
                                            setup_context=setup, lib=lib)
        _done.add(name)
        GRAPH[name] = getattr(getattr(torch.ops, spec.namespace), spec.short)
        return True


def register_all() -> list[str]:
    """Register every op the registry knows (built-ins and plugins); returns their names."""
    from .registry import REGISTRY
    REGISTRY._ensure()
    return [n for n, e in sorted(REGISTRY.entries.items()) if ":" not in n and register(e.spec)]


def custom_op(name: str):
    """`torch.ops.<ns>.<op>` for a qualified op name, registering it first if needed."""
    import torch
    from .registry import REGISTRY
    spec = REGISTRY.entry(name).spec
    register(spec)
    return getattr(getattr(torch.ops, spec.namespace), spec.short)


def autograd_path(spec: OpSpec, args: tuple):
    """The launcher's hook when an input requires grad: run the autograd-aware custom op, or
    refuse clearly.  `args` are in launcher order (outputs included, None when not given)."""
    nt = len(spec.tensors)
    if any(a is not None for t, a in zip(spec.tensors, args[:nt]) if t.role == "output"):
        raise RuntimeError(f"{spec.name}: out= tensors do not support autograd; drop out= or run under "
                           "torch.no_grad()")
    if spec.name not in BACKWARD:
        raise RuntimeError(f"{spec.name} has no backward kernel, and an input requires grad; run it under "
                           "torch.no_grad() or detach its inputs")
    kw = {t.name: a for t, a in zip(spec.tensors, args[:nt]) if t.role in ("input", "inplace")}
    kw.update({s.name: a for s, a in zip(spec.scalars, args[nt:])})
    return custom_op(spec.name)(**kw)


def graph(name: str, out, *args):
    """The typed functions' path under torch.compile: the custom op, copied into `out=`."""
    res = GRAPH[name](*args)
    if out is None:
        return res
    if isinstance(out, tuple):
        for o, r in zip(out, res):
            o.copy_(r)
        return out
    out.copy_(res)
    return out
