"""Find the OpSpecs to build: a module name, a .py file, or a folder of them.

Each module lists its ops in `SPECS` (a sequence of OpSpec) or a `specs()` function.  A module
is referred to by a picklable `SourceRef`, so compile workers can import it again.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tkreg.errors import SpecError
from tkreg.spec import OpSpec


@dataclass(frozen=True)
class SourceRef:
    kind: str   # "module" or "file"
    name: str   # dotted module name or absolute path

    def load(self):
        if self.kind == "module":
            return importlib.import_module(self.name)
        mod_name = "_tkreg_src_" + hashlib.sha1(self.name.encode()).hexdigest()[:12]
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        spec = importlib.util.spec_from_file_location(mod_name, self.name)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
        return module

    def path(self) -> Path:
        if self.kind == "file":
            return Path(self.name)
        return Path(importlib.util.find_spec(self.name).origin)

    def source_hash(self) -> str:
        return hashlib.sha256(self.path().read_bytes()).hexdigest()


def _package_name(folder: Path) -> str:
    """Dotted name of a package folder, importable from the first ancestor that is no package
    (put on sys.path: spawned compile workers inherit it)."""
    folder = folder.resolve()
    parts, root = [folder.name], folder.parent
    while (root / "__init__.py").exists():
        parts.insert(0, root.name)
        root = root.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return ".".join(parts)


def resolve(src: str) -> list[SourceRef]:
    """`kernels_src` (package: every submodule), `kernels_src.norm`, `x/y.py` or `x/dir/`."""
    p = Path(src)
    if p.suffix == ".py" and p.is_file():
        return [SourceRef("file", str(p.resolve()))]
    if p.is_dir() and not (p / "__init__.py").exists():
        return [SourceRef("file", str(f.resolve())) for f in sorted(p.glob("*.py")) if not f.name.startswith("_")]
    name = _package_name(p) if p.is_dir() else src
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        raise SpecError(f"--src {src!r}: no such module, .py file or folder")
    if spec.submodule_search_locations:  # a package: its public submodules
        mod = importlib.import_module(name)
        return [SourceRef("module", f"{name}.{m.name}") for m in
                sorted(pkgutil.iter_modules(mod.__path__), key=lambda m: m.name)
                if not m.name.startswith("_")]
    return [SourceRef("module", name)]


def specs_of(ref: SourceRef) -> list[OpSpec]:
    module = ref.load()
    specs = module.specs() if callable(getattr(module, "specs", None)) else getattr(module, "SPECS", ())
    specs = list(specs)
    for s in specs:
        if not isinstance(s, OpSpec):
            raise SpecError(f"{ref.name}: SPECS holds {type(s).__name__}, expected tkreg.spec.OpSpec")
    return specs
