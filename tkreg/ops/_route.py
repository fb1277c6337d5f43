"""What every typed function shares: the torch.compile test and the graph path.

`compiling()` is `torch.compiler.is_dynamo_compiling`: 24 ns in eager, and Dynamo folds it to
True while tracing, so the typed functions trace as `torch.ops.<ns>.<op>` calls (`graph`) with
no graph break, and the eager path stays the launcher's.  `op(name)` registers the torch op the
first time it is needed, during tracing too (see `_registered`).
"""
try:
    from torch.compiler import is_dynamo_compiling as compiling
except ImportError:  # torch < 2.3: no compile routing, eager only
    def compiling() -> bool:
        return False


def checking() -> bool:
    """TKREG_CHECK_INDICES=1 asks the typed functions to copy index inputs (offsets, counts, page
    tables) to the host and check them before launch; never while tracing or capturing a graph,
    where a device-to-host copy is impossible."""
    from .. import env
    if not env.check_indices() or compiling():
        return False
    import torch
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def serves(name: str, t) -> bool:
    """Whether op `name` runs for tensors on t's device: a kernel pack for its arch, or on the CPU
    the op's torch reference when TKREG_FALLBACK=reference (what the autograd classes ask before
    choosing a kernel over their torch formulas)."""
    from .. import env
    from ..runtime import RUNTIME
    if not t.is_cuda:
        return env.fallback_reference()
    return RUNTIME.arch_of(t.device.index or 0) in RUNTIME.registry.entry(name).archs()


def _registered(name: str) -> str:
    """Registers `name` as a torch op if it is not yet, and returns it.  Marked as Dynamo's
    assume_constant_result (below): Dynamo runs it for real while tracing and takes the result
    as a constant, so a model compiles with no tkreg call before it and no graph break."""
    from ..runtime import RUNTIME
    RUNTIME.torch_op(name)
    return name


# What torch.compiler.assume_constant_result does (torch 2.1 to 2.13), without the 1.3 s import
# of torch._dynamo it costs; tests/tkreg/test_torch_library.py compiles in a fresh process to check.
_registered._dynamo_marked_constant = True


def op(name: str):
    """`torch.ops.<ns>.<op>` for a qualified op name, registered first if needed (traceable)."""
    import torch
    ns, short = _registered(name).split(".", 1)
    return getattr(getattr(torch.ops, ns), short)


def _convention(name: str) -> tuple:
    """(torch op name, input names, ((scalar, default), ...), output names) of a registered op,
    its torch op registered: a constant for Dynamo, like `_registered`."""
    from ..runtime import RUNTIME
    spec = RUNTIME.registry.entry(name).spec
    RUNTIME.torch_op(spec.name)
    return (spec.name, tuple(t.name for t in spec.tensors if t.is_input),
            tuple((s.name, s.default) for s in spec.scalars), tuple(t.name for t in spec.tensors if t.role == "output"))


_convention._dynamo_marked_constant = True


def call_graph(name: str, args: tuple, kwargs: dict):
    """`tkreg.call` under torch.compile: the calling convention (inputs, scalars, outputs; by
    position or name) mapped onto the torch op's schema here, since the launcher's binder cannot
    read fake tensors; given outputs receive a copy, as in `graph`."""
    qual, inputs, scalars, outputs = _convention(name)
    names = inputs + tuple(s for s, _ in scalars) + outputs
    if len(args) > len(names):
        raise TypeError(f"{qual}: takes at most {len(names)} positional arguments, got {len(args)}")
    given = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names or k in given:
            raise TypeError(f"{qual}: `{k}` is {'given twice' if k in given else 'no argument of it'}")
        given[k] = v
    schema = [given.get(n) for n in inputs] + [given.get(s, d) for s, d in scalars]
    out = tuple(given.get(n) for n in outputs)
    return graph(qual, None if not any(o is not None for o in out) else out if len(out) > 1 else out[0], *schema)


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
