"""Kernel packs from other packages, found through the `tkreg.kernels` entry-point group.

A plugin package declares, in its pyproject.toml,

    [project.entry-points."tkreg.kernels"]
    example = "tkreg_example"

and the entry point resolves to a pack folder (holding `<arch>/manifest.json` + cubins): a path
(str / PathLike), a callable returning one, or a module (its folder's `packs/` if present, else
the folder itself).  The entry-point name (`example`) is the plugin's name: `tkreg doctor` shows
it, TKREG_PLUGINS=a,b loads only those, and `tkreg.call("example:ns.op", ...)` reaches the
plugin's own op even where another pack owns the plain name.  TKREG_DISABLE_PLUGINS=1 loads none.

Discovery runs once, on the registry's first use (never at `import tkreg`).  A plugin that fails
to import is returned with its error, which the registry turns into one warning; the others load.
"""
from __future__ import annotations

import logging
import os
import types
import warnings
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from . import env

GROUP = "tkreg.kernels"
log = logging.getLogger("tkreg")


@dataclass(frozen=True)
class Plugin:
    """One `tkreg.kernels` entry point: what it names and, once loaded, its pack or its error."""
    name: str                 # the entry-point name: the plugin's name and qualifier
    value: str                # "module" or "module:attr"
    dist: str | None = None   # "tkreg-example 0.1.0", the distribution that declares it
    path: Path | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        return f"plugin:{self.name}" + (f" ({self.dist})" if self.dist else "")


def _pack_path(obj) -> Path:
    if callable(obj) and not isinstance(obj, types.ModuleType):
        obj = obj()
    if isinstance(obj, types.ModuleType):
        base = Path(obj.__file__).resolve().parent
        return base / "packs" if (base / "packs").is_dir() else base
    if isinstance(obj, (str, os.PathLike)):
        return Path(obj)
    raise TypeError(f"it gave {type(obj).__name__}; expected a pack path, a callable returning one, "
                    "or a module")


def _dist(ep) -> str | None:
    d = getattr(ep, "dist", None)
    if d is None:
        return None
    try:
        return f"{d.metadata['Name']} {d.version}"
    except Exception:  # noqa: BLE001 - a broken METADATA file only loses the label
        return None


def installed() -> list[Plugin]:
    """Every entry point of the group, sorted by name, none loaded (for `tkreg doctor`)."""
    eps = sorted(metadata.entry_points(group=GROUP), key=lambda e: (e.name, e.value))
    return [Plugin(ep.name, ep.value, _dist(ep)) for ep in eps]


def discover() -> list[Plugin]:
    """The plugins to load, sorted by entry-point name, each with its pack path or its error."""
    if env.plugins_disabled():
        log.info("tkreg: plugins disabled by TKREG_DISABLE_PLUGINS")
        return []
    allow = env.plugin_allow_list()
    eps = sorted(metadata.entry_points(group=GROUP), key=lambda e: (e.name, e.value))
    if allow is not None:
        unknown = allow - {ep.name for ep in eps}
        if unknown:
            warnings.warn(f"tkreg: TKREG_PLUGINS names {', '.join(sorted(unknown))}, which no installed "
                          f"package provides (installed plugins: {', '.join(ep.name for ep in eps) or 'none'})",
                          RuntimeWarning, stacklevel=2)
    out: list[Plugin] = []
    for ep in eps:
        dist = _dist(ep)
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
