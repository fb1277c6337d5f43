"""What every typed function shares: the torch.compile test and the graph path.

`compiling()` is `torch.compiler.is_dynamo_compiling`: 24 ns in eager, and Dynamo folds it to
True while tracing, so the typed functions trace as `torch.ops.<ns>.<op>` calls (see
tkreg/torch_library.py) with no graph break, and the eager path stays the launcher's.
"""
try:
    from torch.compiler import is_dynamo_compiling as compiling
except ImportError:  # torch < 2.3: no compile routing, eager only
    def compiling() -> bool:
        return False

from ..torch_library import graph  # noqa: F401,E402
