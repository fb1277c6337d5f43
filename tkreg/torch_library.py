"""Ops as torch custom ops: `torch.ops.<namespace>.<op>`, for torch.compile.

The schema, the fake (meta) implementation, the mutation annotations and the autograd formula
(the spec's `backward`) all come from the op's spec, so plugins get the same treatment as
built-ins.  The real implementation is the native launcher (`op_of(name)`, from the run time).
Outputs are returned, never passed in (functional form); in-place tensors are `Tensor(a!)`.
Schema arguments are the calling convention's inputs then scalars, so the implementation passes
them through unchanged.

The typed eager functions (`tkreg.ops.*`) stay on the launcher's fast path and branch on
`torch.compiler.is_dynamo_compiling()` (24 ns eager; Dynamo folds it to True while tracing) to
`graph()`, which calls these custom ops: compiled code has no graph break.  An op is registered
the first time something needs it as a torch op (`op(name)`: compiling, autograd, opcheck), not
at import, so eager use never pays for it; `tkreg.register_torch_ops()` registers them all.
"""
from __future__ import annotations

import threading

from . import expr
from .spec import OpSpec, import_ref

_lock = threading.Lock()
_libs: dict = {}
GRAPH: dict = {}   # qualified op -> its torch.ops overload packet, once registered
_TYPE = {"float32": "float", "float64": "float", "int32": "int", "int64": "int", "bool": "bool"}


def schema_args(spec: OpSpec) -> list[str]:
    return [t.name for t in spec.tensors if t.is_input] + [s.name for s in spec.scalars]


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


def fake_outputs(spec: OpSpec, kw: dict):
    """Outputs' shapes from the spec's expressions over the inputs' (possibly symbolic) sizes."""
    import torch
    env, first = {}, None
    for t in spec.tensors:
        x = kw.get(t.name)
        if t.is_input and x is not None:
            first = first if first is not None else x
            for d, p in zip(x.shape, t.dims()):
                name = expr.is_symbol(p)
                if name and name not in env:
                    env[name] = d
    env.update({s.name: kw[s.name] for s in spec.scalars if s.integral})
    roots = spec.dtype_roots()
    outs = []
    for t in spec.tensors:
        if t.role != "output":
            continue
        root = spec.tensor(roots[t.name])
        dtype = getattr(torch, root.dtype) if root.dtype else kw[root.name].dtype
        shape = [expr.evaluate(p, env) for p in t.dims()]
        outs.append(torch.empty(shape, dtype=dtype, device=first.device))
    return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)


def register(spec: OpSpec, op_of) -> bool:
    """Define `torch.ops.<ns>.<op>` for one spec (once); False when torch lacks torch.library.
    `op_of(name)` gives the native op that runs it."""
    with _lock:
        if spec.name in GRAPH:
            return True
        import torch
        if not hasattr(torch, "library") or not hasattr(torch.library, "register_autograd"):
            return False
        lib = _libs.get(spec.namespace)
        if lib is None:
            lib = _libs[spec.namespace] = torch.library.Library(spec.namespace, "FRAGMENT")
        lib.define(schema(spec))
        name, names = spec.name, schema_args(spec)

        def impl(*args, **kwargs):   # the schema's order is the op's calling convention
            return op_of(name)(*args, **kwargs)

        def fake(*args, **kwargs):   # the dispatcher may leave out scalars at their default
            kw = {s.name: s.default for s in spec.scalars} | dict(zip(names, args)) | kwargs
            return fake_outputs(spec, kw)

        for key in ("CUDA", "CPU"):
            lib.impl(spec.short, impl, key)
        # A Meta kernel is the fake implementation (FakeTensorMode runs it): the same result as
        # torch.library.register_fake without its inspect.getmodule() walk over every loaded
        # module, which cost ~20 ms of tkreg's import on an H200 box.
        lib.impl(spec.short, fake, "Meta")
        if spec.backward:  # imported on first use: registering must import nothing (tkreg.ops registers)
            ref = spec.backward
            torch.library.register_autograd(
                f"{spec.namespace}::{spec.short}", lambda ctx, *grads: import_ref(ref).backward(ctx, *grads),
                setup_context=lambda ctx, inputs, output: import_ref(ref).setup_context(ctx, inputs, output), lib=lib)
        GRAPH[name] = getattr(getattr(torch.ops, spec.namespace), spec.short)
        return True


def _registered(name: str) -> str:
    """Registers `name` as a torch op if it is not yet, and returns it.  Marked as Dynamo's
    assume_constant_result (below): Dynamo runs it for real while tracing and takes the result
    as a constant, so a model compiles with no tkreg call before it and no graph break."""
    from .runtime import RUNTIME
    RUNTIME.torch_op(name)
    return name


# What torch.compiler.assume_constant_result does (torch 2.1 to 2.13), without the 1.3 s import
# of torch._dynamo it costs; tests/tkreg/test_torch_library.py compiles a fresh process to check.
_registered._dynamo_marked_constant = True


def op(name: str):
    """`torch.ops.<ns>.<op>` for a qualified op name, registered first if needed (traceable)."""
    import torch
    ns, short = _registered(name).split(".", 1)
    return getattr(getattr(torch.ops, ns), short)


def graph(name: str, out, *args):
    """The typed functions' path under torch.compile: the custom op, copied into `out=`."""
    res = op(name)(*args)
    if out is None:
        return res
    if isinstance(out, tuple):
        for o, r in zip(out, res):
            o.copy_(r)
        return out
    out.copy_(res)
    return out
