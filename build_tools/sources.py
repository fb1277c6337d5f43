"""Find the OpSpecs to build: a module or package name, a .py file, or a folder of them.

A source lists its ops in `SPECS` (a sequence of OpSpec) or a `specs()` function: a module, or a
family package whose `__init__` gathers its modules' specs (`kernels_src/norm/`).  A source is
referred to by a picklable `SourceRef`, so compile workers can import it again.  Its
`source_hash` (part of every compile-cache key) covers the source and the local modules it
imports, so editing an imported kernel module rebuilds the variants that use it.
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import pkgutil
import sys
import sysconfig
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
        """sha256 over this module's bytes and those of every local module it imports, directly
        or not (imports resolve as they do once the source is loaded: modules on sys.path,
        relative imports inside a package)."""
        root = self.path()
        h = hashlib.sha256(root.read_bytes())   # a module importing nothing local: its bytes' hash
        package = None
        if self.kind == "module":   # what a relative import in it is relative to
            package = self.name if root.name == "__init__.py" else self.name.rpartition(".")[0]
        for name, path in local_imports(root, package)[1:]:
            h.update(b"\0" + name.encode() + b"\0" + path.read_bytes())
        return h.hexdigest()


def _outside() -> tuple:
    """(folders whose modules never count as a source's own, folders inside those that do): the
    interpreter's and installed packages' (their versions are the toolchain's business), tkreg's
    and build_tools' own (the compile cache's tool hash covers those that shape a cubin); but
    tkreg/reference/ counts, for kernels take the formats' constants from it."""
    import tkreg
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    here = Path(tkreg.__file__).resolve().parent
    return (tuple(Path(p).resolve() for p in paths | {here, Path(__file__).parent}), (here / "reference",))


def _local_spec(name: str, outside: tuple):
    """The spec of module `name` when it is a local .py file, else None; never imports a
    package outside the source's own tree (finding `a.b` imports `a`, so `a` is looked at first)."""
    out, inside = outside

    def local(spec):
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return False
        f = Path(spec.origin).resolve()
        return any(f.is_relative_to(p) for p in inside) or not any(f.is_relative_to(p) for p in out)
    def holds_local(spec):   # a package not local itself with a local folder inside (tkreg)
        return bool(spec and spec.origin) and any(p.is_relative_to(Path(spec.origin).resolve().parent) for p in inside)
    try:
        spec = importlib.util.find_spec(name.partition(".")[0])
        if "." in name and (local(spec) or holds_local(spec)):
            spec = importlib.util.find_spec(name)
    except Exception:  # noqa: BLE001 - a name that is no module (`from m import function`), or a broken package
        return None
    return spec if local(spec) else None


def local_imports(path: Path, package: str | None) -> list[tuple[str, Path]]:
    """[(module name, file)] of the file at `path` (named "", first) and the local modules it
    imports, transitively, sorted by name (the file itself is not listed again)."""
    outside = _outside()
    root = Path(path).resolve()
    seen: dict = {"": Path(path)}
    elsewhere: set = set()    # names already found not to be local modules
    todo = [(Path(path), package)]
    while todo:
        f, pkg = todo.pop()
        for node in ast.walk(ast.parse(f.read_bytes())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level and not pkg:
                    continue
                base = node.module
                if node.level:
                    base = importlib.util.resolve_name("." * node.level + (node.module or ""), pkg)
                names = [base] + [f"{base}.{a.name}" for a in node.names]   # `from pkg import submodule`
            for n in names:
                spec = None if n in seen or n in elsewhere else _local_spec(n, outside)
                if spec is None or Path(spec.origin).resolve() == root:
                    elsewhere.add(n)
                    continue
                seen[n] = Path(spec.origin)
                todo.append((seen[n], n if spec.submodule_search_locations else n.rpartition(".")[0]))
    return sorted(seen.items())


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


def _has_specs(module) -> bool:
    return callable(getattr(module, "specs", None)) or hasattr(module, "SPECS")


def resolve(src: str) -> list[SourceRef]:
    """`kernels_src` (a package without specs of its own: each public submodule or subpackage),
    `kernels_src.norm` (a package or module with specs: itself), `x/y.py` or `x/dir/`."""
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
    if spec.submodule_search_locations:  # a package: itself if it lists specs, else its public submodules
        mod = importlib.import_module(name)
        if _has_specs(mod):
            return [SourceRef("module", name)]
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
