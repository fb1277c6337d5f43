"""Kernel packs from other packages, found through the `tkreg.kernels` entry-point group.

A plugin package declares, in its pyproject.toml,

    [project.entry-points."tkreg.kernels"]
    example = "tkreg_example"

and the entry point resolves to a pack folder (holding `<arch>/manifest.json` + cubins): a path
(str / PathLike), a callable returning one, or a module (its folder's `packs/` if present, else
the folder itself).  The entry-point name (`example`) is the plugin's name: `tkreg doctor` shows
it, TKREG_PLUGINS=a,b loads only those, and `tkreg.call("example:ns.op", ...)` reaches the
plugin's own op even where another pack owns the plain name.  TKREG_DISABLE_PLUGINS=1 loads none.

Discovery runs once, when the registry first loads.  A plugin that fails
to import is returned with its error, which the registry turns into one warning; the others load.
"""
from __future__ import annotations

import logging
import os
import types
import warnings
from importlib import metadata
from pathlib import Path

from . import env

GROUP = "tkreg.kernels"
log = logging.getLogger("tkreg")


class Plugin:
    """One `tkreg.kernels` entry point: what it names and, once loaded, its pack or its error."""
    __slots__ = ("name", "value", "dist", "path", "error")

    def __init__(self, name: str, value: str, dist: str | None = None, path: Path | None = None,
                 error: str | None = None):
        self.name = name          # the entry-point name: the plugin's name and qualifier
        self.value = value        # "module" or "module:attr"
        self.dist = dist          # "tkreg-example 0.1.0", the distribution that declares it
        self.path, self.error = path, error

    @property
    def label(self) -> str:
        return f"plugin:{self.name}" + (f" ({self.dist})" if self.dist else "")


def _pack_path(obj) -> Path:
    if callable(obj) and not isinstance(obj, types.ModuleType):
        obj = obj()
    if isinstance(obj, types.ModuleType):
        base = Path(obj.__file__).resolve().parent
        if (base / "packs").is_dir() or any(base.glob("*/manifest.json")):
            return base / "packs" if (base / "packs").is_dir() else base
        raise FileNotFoundError(f"module {obj.__name__} has no pack: tkreg looked for {base / 'packs'}/<arch>/"
                                f"manifest.json (and {base}/<arch>/manifest.json); install the pack there "
                                f"(CMake: tkreg_add_pack(... DESTINATION {obj.__name__.replace('.', '/')}/packs))")
    if isinstance(obj, (str, os.PathLike)):
        return Path(obj)
    raise TypeError(f"it gave {type(obj).__name__}; expected a pack path, a callable returning one, "
                    "or a module")


def _dist_label(info_dir: str) -> str | None:
    """"Name Version" from a dist-info's METADATA (egg-info: PKG-INFO) headers."""
    fields = {}
    for fname in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(info_dir, fname), encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        break
                    k, _, v = line.partition(":")
                    if k in ("Name", "Version"):
                        fields[k] = v.strip()
            break
        except OSError:
            continue
    return f"{fields['Name']} {fields.get('Version', '')}".strip() if "Name" in fields else None


def _scan(group: str = GROUP) -> list[tuple[metadata.EntryPoint, str]]:
    """(entry point, "dist version") for one group, read straight from the `*.dist-info` /
    `*.egg-info` folders on sys.path, first distribution of a name winning, as importlib does.

    `importlib.metadata.entry_points()` parses every installed distribution (with 200 installed,
    a quarter of tkreg's cold start); this opens each `entry_points.txt` and parses only those
    that name the group.
    """
    import sys
    seen, out = set(), []
    for base in sys.path:
        try:
            names = sorted(os.listdir(base or "."))
        except OSError:
            continue
        for n in names:
            if not n.endswith((".dist-info", ".egg-info")):
                continue
            dist, _, version = n.rsplit(".", 1)[0].partition("-")
            key = dist.lower().replace("-", "_").replace(".", "_")
            if key in seen:
                continue
            seen.add(key)
            try:
                with open(os.path.join(base or ".", n, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            if f"[{group}]" not in text:
                continue
            label = _dist_label(os.path.join(base or ".", n)) or f"{dist} {version}".strip()
            section = None
            for line in text.splitlines():
                line = line.strip()
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1].strip()
                elif section == group and "=" in line and not line.startswith(("#", ";")):
                    name, _, value = line.partition("=")
                    out.append((metadata.EntryPoint(name.strip(), value.strip(), group), label))
    return sorted(out, key=lambda e: (e[0].name, e[0].value))


def installed() -> list[Plugin]:
    """Every entry point of the group, sorted by name, none loaded (for `tkreg doctor`)."""
    return [Plugin(ep.name, ep.value, dist) for ep, dist in _scan()]


def discover() -> list[Plugin]:
    """The plugins to load, sorted by entry-point name, each with its pack path or its error."""
    if env.plugins_disabled():
        log.info("tkreg: plugins disabled by TKREG_DISABLE_PLUGINS")
        return []
    allow = env.plugin_allow_list()
    found = _scan()
    eps = [ep for ep, _ in found]
    if allow is not None:
        unknown = allow - {ep.name for ep in eps}
        if unknown:
            warnings.warn(f"tkreg: TKREG_PLUGINS names {', '.join(sorted(unknown))}, which no installed "
                          f"package provides (installed plugins: {', '.join(ep.name for ep in eps) or 'none'})",
                          RuntimeWarning, stacklevel=2)
    out: list[Plugin] = []
    for ep, dist in found:
        if allow is not None and ep.name not in allow:
            log.info("tkreg: plugin %s (%s) not in TKREG_PLUGINS; not loaded", ep.name, dist)
            continue
        first = next((p for p in out if p.name == ep.name), None)
        if first is not None:
            out.append(Plugin(ep.name, ep.value, dist, error=(
                f"entry-point name `{ep.name}` is already taken by {first.dist or first.value}; "
                "one of the two packages must rename its entry point")))
            continue
        try:
            path = _pack_path(ep.load())
        except Exception as e:  # noqa: BLE001 - one broken plugin must not stop the rest
            out.append(Plugin(ep.name, ep.value, dist, error=(
                f"entry point `{ep.name} = {ep.value}` failed to load: {type(e).__name__}: {e}")))
            continue
        log.info("tkreg: plugin %s (%s) -> %s", ep.name, dist, path)
        out.append(Plugin(ep.name, ep.value, dist, path=path))
    return out
