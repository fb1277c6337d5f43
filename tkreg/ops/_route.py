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
