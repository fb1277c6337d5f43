"""Kernel packs from other packages, found through the `tkreg.kernels` entry-point group.

An entry point resolves to a pack folder: a path (str / PathLike), a callable returning one,
or a module (its folder's `packs/` if present, else the folder itself).  A plugin that fails
to import is reported (and skipped) without stopping the others.  TKREG_PLUGINS=a,b loads only
those; TKREG_DISABLE_PLUGINS=1 loads none.
"""
from __future__ import annotations

import logging
import os
import types
from importlib import metadata
from pathlib import Path

from . import env

GROUP = "tkreg.kernels"
log = logging.getLogger("tkreg")


def _pack_path(obj) -> Path:
    if callable(obj) and not isinstance(obj, types.ModuleType):
        obj = obj()
    if isinstance(obj, types.ModuleType):
        base = Path(obj.__file__).resolve().parent
        return base / "packs" if (base / "packs").is_dir() else base
    if isinstance(obj, (str, os.PathLike)):
        return Path(obj)
    raise TypeError(f"entry point gave {type(obj).__name__}; expected a pack path, a callable or a module")


def discover() -> list[tuple[str, Path | None, str | None]]:
    """[(entry-point name, pack path, error or None)] in a stable order."""
    if env.plugins_disabled():
        log.info("tkreg: plugins disabled by TKREG_DISABLE_PLUGINS")
        return []
    allow = env.plugin_allow_list()
    out = []
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name):
        if allow is not None and ep.name not in allow:
            log.info("tkreg: plugin %s not in TKREG_PLUGINS; not loaded", ep.name)
            continue
        try:
            path = _pack_path(ep.load())
        except Exception as e:  # noqa: BLE001 - one broken plugin must not stop the rest
            out.append((ep.name, None, f"failed to load entry point {ep.value!r}: {type(e).__name__}: {e}"))
            continue
        log.info("tkreg: plugin %s -> %s", ep.name, path)
        out.append((ep.name, path, None))
    return out
