"""Content-addressed compile cache: an unchanged variant is never compiled twice.

The key covers everything that can change the cubin or its plan: the family module's source and
the local modules it imports (build_tools/sources.py),
the variant's parameters, rule, pass configs and nvcc flags, arch, tilelang and nvcc versions, nvcc flags, and the source of the
build tools that lower and extract plans.  Entries are written atomically (tmp dir + rename).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

_TOOL_FILES = ("compile.py", "extract_plan.py", "tir_expr.py")


def default_dir() -> Path:
    """$TKREG_CACHE_DIR; else build/cache in a tkreg checkout; else (build_tools installed from
    the tkreg wheel, as plugin builds use it) $XDG_CACHE_HOME/tkreg/build or ~/.cache/tkreg/build."""
    env = os.environ.get("TKREG_CACHE_DIR")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parent.parent
    if (root / "kernels_src").is_dir() and (root / "pyproject.toml").is_file():
        return root / "build" / "cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tkreg" / "build"


def _tool_hash() -> str:
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    import tkreg.expr
    import tkreg.launch_plan
    import tkreg.spec
    for f in [here / n for n in _TOOL_FILES] + [Path(m.__file__) for m in (tkreg.expr, tkreg.spec, tkreg.launch_plan)]:
        h.update(f.read_bytes())
    return h.hexdigest()


def key(source_hash: str, op: str, variant: dict, arch: str, toolchain: dict) -> str:
    """`variant` is Variant.to_json(): params, rule, pass configs and nvcc flags."""
    blob = json.dumps({"source": source_hash, "op": op, "variant": variant, "arch": arch,
                       "toolchain": toolchain, "tools": _tool_hash()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class Cache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else default_dir()

    def _dir(self, k: str) -> Path:
        return self.root / k[:2] / k

    def get(self, k: str):
        d = self._dir(k)
        try:
            return (d / "kernel.cubin").read_bytes(), json.loads((d / "plan.json").read_text())
        except (OSError, ValueError):
            return None

    def put(self, k: str, cubin: bytes, plan: dict, source: str) -> None:
        d = self._dir(k)
        if d.exists():
            return
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=d.parent, prefix=".tmp-"))
        (tmp / "kernel.cubin").write_bytes(cubin)
        (tmp / "kernel.cu").write_text(source)
        (tmp / "plan.json").write_text(json.dumps(plan, sort_keys=True))
        try:
            tmp.rename(d)
        except OSError:  # another process won the race: same content by construction
            shutil.rmtree(tmp, ignore_errors=True)
