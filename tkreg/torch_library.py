"""Ops as torch custom ops: `torch.ops.<namespace>.<op>`, for torch.compile.

The schema, the fake (meta) implementation, the mutation annotations and the autograd formula
(the spec's `backward`) all come from the op's spec, so plugins get the same treatment as
built-ins.  The real implementation is the native launcher (`op_of(name)`, from the run time).
Outputs are returned, never passed in (functional form); in-place tensors are `Tensor(a!)`.
Schema arguments are the calling convention's inputs then scalars, so the implementation passes
them through unchanged.

The run time (tkreg/runtime.py) registers an op the first time something needs it as a torch op
(compiling a typed function: tkreg/ops/_route.py; autograd; `tkreg.register_torch_ops()`), not at
import, so eager use never pays for it.  This module knows nothing of the run time.
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
    # An optional tensor defaults to None when nothing required follows it (as in the C binder).
    later = [t for t in spec.tensors if t.is_input] + list(spec.scalars)
    tail = {x.name for i, x in enumerate(later)
            if all(getattr(y, "optional", False) or getattr(y, "default", None) is not None for y in later[i:])}
    for t in spec.tensors:
        opt, dflt = ("?", "=None" if t.name in tail else "") if t.optional else ("", "")
        if t.role == "input":
            args.append(f"Tensor{opt} {t.name}{dflt}")
        elif t.role == "inplace":
            args.append(f"Tensor({next(alias)}!){opt} {t.name}{dflt}")
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


def size_env(spec: OpSpec, kw: dict) -> dict:
    """The size symbols the given input tensors bind (`kw`: name -> tensor or None), as the
    launcher binds them: bare symbols first, then `k * S` dims as S = dim // k."""
    env: dict = {}
    for scaled in (False, True):
        for t in spec.tensors:
            x = kw.get(t.name)
            if t.is_input and x is not None:
                for d, p in zip(x.shape, t.dims()):
                    s = expr.scaled_symbol(p)
                    if s and (s[1] > 1) == scaled and s[0] not in env:
                        env[s[0]] = d // s[1]
    return env


def fake_outputs(spec: OpSpec, kw: dict):
    """Outputs' shapes from the spec's expressions over the inputs' (possibly symbolic) sizes."""
    import torch
    first = next(kw[t.name] for t in spec.tensors if t.is_input and kw.get(t.name) is not None)
    env = size_env(spec, kw)
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
            kw = ({s.name: s.default for s in spec.scalars} | {t.name: None for t in spec.tensors if t.optional}
                  | dict(zip(names, args)) | kwargs)
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
