"""What a JIT user pays per kernel: `python -m build_tools jit-time [--only OP] [--arch A]`.

Times tilelang's import and, for the first variant of each op, lowering plus nvcc into a fresh
folder (tilelang's JIT does the same work, plus a host wrapper, on every cold start without a
warm cache).  Prints JSON; `python -m tkreg.bench RESULTS.json JIT.json` puts it beside the
cold-start row of BENCHMARKS.md.
"""
from __future__ import annotations

import json
import platform
import tempfile
import time
from pathlib import Path

from . import sources
from .build import factory_kwargs


def measure(src="kernels_src", only=(), arch="sm_90a", repeat=2) -> dict:
    t = time.perf_counter()
    import tilelang  # noqa: F401
    imp = time.perf_counter() - t
    from . import compile as comp
    ops = {}
    for ref in sources.resolve(src):
        for spec in sources.specs_of(ref):
            if only and spec.name not in only and spec.short not in only:
                continue
            v = spec.variants_for(arch)[0]
            runs = []
            for _ in range(repeat):
                t = time.perf_counter()
                art = comp.lower(spec.factory(**factory_kwargs(spec.factory, v, arch)), arch, dict(v.pass_configs))
                comp.nvcc(art.kernel_source, arch, Path(tempfile.mkdtemp()), v.nvcc_flags)
                runs.append(round(time.perf_counter() - t, 2))
            ops[spec.name] = {"variant": v.key, "seconds": runs}
    return {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.node()} ({platform.machine()}, "
            f"{__import__('os').cpu_count()} cores)", "arch": arch, "import_tilelang_s": round(imp, 2), "ops": ops}


def main(args) -> int:
    print(json.dumps(measure(args.src, tuple(args.only), args.arch), indent=1))
    return 0
