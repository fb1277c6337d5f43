"""The registry: kernel packs -> ops -> per-device variant tables for the native launcher.

Packs load lazily on first use (built-in, then TKREG_PACKS / register_pack, then plugins sorted
by entry-point name), so `import tkreg` reads no file.  Each op becomes one `_launcher.Op` the
first time it is called; its per-arch `Variant` tables are made the first time a device of that
arch calls it.  The C side validates, selects (priority order, first accepted) and launches;
Python only answers "which variants serve this device?" once per (op, device).

Who gets an op's plain name (`ns.op`), pack by pack in load order:
- the first pack to define it owns it; a later pack defining it again gets a warning naming both
  and never replaces it (so no plugin replaces a built-in);
- a pack op with `extends=True` adds its variants to the owner's when the signatures match
  (priorities then decide between them), else a warning and nothing is added;
- plugin ops may not take a plain name in the built-ins' `tkreg` namespace (only extend one).
Every op of a plugin is also reachable as `<entry-point name>:<op>` with that plugin's variants
only, whatever happened to the plain name.  A plugin pack whose manifest, plans or cubins are
broken is skipped whole, with one warning; per-op conflicts never drop its other ops.
"""
from __future__ import annotations

import functools
import importlib
import logging
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import assemble, env, manifest
from .elf import ARCHS, check_cubin
from .errors import NoKernelError, PackError, UnsupportedDeviceError
from .spec import OpSpec

log = logging.getLogger("tkreg")

ARCH_OF_CAPABILITY = {cap: arch for arch, cap in ARCHS.items()}
BUILTIN_PACKS = Path(__file__).resolve().parent / "packs"
BUILTIN_NAMESPACE = "tkreg"


@dataclass
class PackSource:
    """One pack the registry saw, for `tkreg doctor` and `tkreg list`."""
    name: str
    path: Path | None
    state: str = "loaded"
    archs: list = field(default_factory=list)
    ops: list = field(default_factory=list)      # plain op names this pack owns or extends
    plugin: str | None = None                    # entry-point name, for plugin packs
    dist: str | None = None                      # "tkreg-example 0.1.0", for plugin packs
    notes: list = field(default_factory=list)    # conflicts, one line each

    @property
    def label(self) -> str:
        return self.name + (f" ({self.dist})" if self.dist else "")


@dataclass
class OpEntry:
    spec: OpSpec
    owner: str
    variants: dict = field(default_factory=dict)   # arch -> [(variant json, arch dir, source name)]
    tables: dict = field(default_factory=dict)     # arch -> tuple[_launcher.Variant]
    name: str = ""                                 # registry key: `ns.op` or `plugin:ns.op`

    def __post_init__(self):
        self.name = self.name or self.spec.name

    def archs(self) -> list[str]:
        return sorted(self.variants)


def _signature(spec: OpSpec) -> dict:
    d = spec.to_json()
    d.pop("extends", None)
    d.pop("doc", None)
    d.pop("reference", None)
    return d


def _check_plugin_pack(loaded: list, specs: dict) -> None:
    """Every cubin present, matching its sha256 and arch, every plan readable; PackError if not.

    Run when a plugin pack loads (built-in packs are checked when the wheel is built), so a
    broken plugin is skipped up front instead of failing at its first launch."""
    for d, m in loaded:
        for op_name, op in m["ops"].items():
            spec = specs[op_name]
            assemble.op_words(spec)
            for v in op["variants"]:
                data = manifest.read_cubin(d, v, op_name)
                try:
                    check_cubin(data, m["arch"])
                except ValueError as e:
                    raise PackError(f"{op_name}[{v['key']}]: {d / v['cubin']}: {e}") from None
                assemble.variant_words(spec, v)


class Registry:
    def __init__(self):
        self._lock = threading.RLock()
        self._loaded = False
        self.sources: list[PackSource] = []
        self.entries: dict[str, OpEntry] = {}      # plain names: `ns.op`
        self.qualified: dict[str, OpEntry] = {}    # `plugin:ns.op` -> that plugin's own variants
        self._ops: dict = {}
        self._extra: list[Path] = []

    # ---- loading ------------------------------------------------------------------------
    def _ensure(self):
        if not self._loaded:
            with self._lock:
                if not self._loaded:
                    self._load_all()
                    self._loaded = True

    def _load_all(self):
        self._add_pack(BUILTIN_PACKS, "tkreg (built-in)", builtin=True)
        for p in env.extra_packs():
            self._add_pack(Path(p), f"TKREG_PACKS:{p}")
        for p in self._extra:
            self._add_pack(p, f"register_pack:{p}")
        from . import plugins
        for p in plugins.discover():
            if p.error:
                self._skip(PackSource(f"plugin:{p.name}", None, plugin=p.name, dist=p.dist), p.error)
            else:
                self._add_pack(p.path, f"plugin:{p.name}", plugin=p.name, dist=p.dist)

    def _skip(self, src: PackSource, why: str):
        src.state = f"skipped: {why}"
        self.sources.append(src)
        warnings.warn(f"tkreg: {src.label}: skipped: {why}", RuntimeWarning, stacklevel=4)

    def _note(self, src: PackSource, msg: str):
        """A per-op conflict: one warning, and a line under the pack in `tkreg doctor`."""
        src.notes.append(msg)
        warnings.warn(f"tkreg: {msg}", RuntimeWarning, stacklevel=5)

    def _add_pack(self, path: Path, name: str, builtin=False, plugin: str | None = None,
                  dist: str | None = None):
        src = PackSource(name, Path(path), plugin=plugin, dist=dist)
        dirs = manifest.arch_dirs(path)
        if not dirs:
            if builtin:  # a source checkout or a wheel built with TKREG_BUILD_PACKS=OFF
                src.state = "absent (wheel built without packs)"
                self.sources.append(src)
                return
            return self._skip(src, f"no <arch>/{manifest.FILENAME} under {path}")
        try:
            staged = self._read_pack(dirs, name, check=plugin is not None)
        except PackError as e:
            return self._skip(src, str(e))
        except Exception as e:  # noqa: BLE001 - whatever is wrong with a pack skips it, not tkreg
            return self._skip(src, f"unreadable pack ({type(e).__name__}: {e})")
        src.archs = sorted({a for e in staged.values() for a in e.variants})
        for op_name, new in staged.items():
            self._merge(src, op_name, new)
        self.sources.append(src)
        log.info("tkreg: %s: %d op(s), archs %s", src.label, len(staged), ", ".join(src.archs))

    def _read_pack(self, dirs: list, name: str, check: bool) -> dict[str, OpEntry]:
        loaded = [(d, manifest.load(d / manifest.FILENAME)) for d in dirs]
        staged: dict[str, OpEntry] = {}
        for d, m in loaded:
            for op_name, op in m["ops"].items():
                try:
                    spec = OpSpec.from_json(op["spec"])
                except Exception as e:  # noqa: BLE001 - a malformed spec skips the pack, not tkreg
                    raise PackError(f"op {op_name}: bad spec ({e})") from None
                if spec.name != op_name:
                    raise PackError(f"op {op_name}: its spec is named {spec.name}")
                e = staged.setdefault(op_name, OpEntry(spec, name))
                if _signature(e.spec) != _signature(spec):
                    raise PackError(f"op {op_name}: its spec differs between archs")
                e.variants.setdefault(m["arch"], []).extend((v, d, name) for v in op["variants"])
        if check:
            _check_plugin_pack(loaded, {n: e.spec for n, e in staged.items()})
        return staged

    def _merge(self, src: PackSource, op_name: str, new: OpEntry):
        """Give `new` its plain name, its owner's extra variants, or a warning (see module doc)."""
        plugin = src.plugin
        if plugin:
            self.qualified[f"{plugin}:{op_name}"] = OpEntry(
                new.spec, src.name, {a: list(vs) for a, vs in new.variants.items()},
                name=f"{plugin}:{op_name}")
        own = f"; this one is reachable only as `{plugin}:{op_name}`" if plugin else ""
        cur = self.entries.get(op_name)
        if new.spec.extends:
            if cur is None:
                return self._note(src, f"{src.label} extends {op_name}, which no pack defines; "
                                  f"nothing added{own}")
            if _signature(new.spec) != _signature(cur.spec):
                return self._note(src, f"{src.label} extends {op_name}, but its signature differs "
                                  f"from {cur.owner}'s; nothing added{own}")
            for arch, vs in new.variants.items():
                # A plugin's variants show as `plugin:key` in the owner's table (explain, list).
                rows = [({**v, "key": f"{plugin}:{v['key']}"} if plugin else v, d, s) for v, d, s in vs]
                cur.variants.setdefault(arch, []).extend(rows)
                cur.tables.pop(arch, None)
            src.ops.append(op_name)
            return
        if cur is None:
            if plugin and new.spec.namespace == BUILTIN_NAMESPACE:
                return self._note(src, f"{src.label} defines {op_name} in the built-ins' `tkreg` "
                                  f"namespace without extends=True; not added as {op_name}{own}")
            self.entries[op_name] = new
            src.ops.append(op_name)
            return
        first = cur.owner.partition(":")[2] if cur.owner.startswith("plugin:") else None
        if plugin and first:
            return self._note(src, f"plugins `{first}` and `{plugin}` both define {op_name}: "
                              f"{op_name} runs `{first}`'s (first by entry-point name); reach each "
                              f"as `{first}:{op_name}` and `{plugin}:{op_name}`")
        self._note(src, f"{src.label} also defines {op_name} (owned by {cur.owner}) without "
                   f"extends=True, so {cur.owner}'s stays{own}")

    def register_pack(self, path) -> PackSource:
        """Add a pack folder (holding <arch>/manifest.json) copied onto this machine."""
        path = Path(path)
        with self._lock:
            if self._loaded:
                n = len(self.sources)
                self._add_pack(path, f"register_pack:{path}")
                self._ops.clear()  # ops built before see the new variants on next use
                OPS.clear()
                return self.sources[n] if len(self.sources) > n else self.sources[-1]
            self._extra.append(path)
        self._ensure()
        return next(s for s in self.sources if s.path == path)

    # ---- ops ------------------------------------------------------------------------------
    def entry(self, name: str) -> OpEntry:
        """`ns.op` (or a bare `op` of the built-ins), or `plugin:ns.op` for one plugin's own."""
        self._ensure()
        if ":" in name:
            e = self.qualified.get(name)
        else:
            e = self.entries.get(name) or self.entries.get(f"{BUILTIN_NAMESPACE}.{name}")
        if e is None:
            known = ", ".join(sorted(self.entries) + sorted(self.qualified)) \
                or "none (no pack loaded: see `tkreg doctor`)"
            raise NoKernelError(f"unknown op {name!r}; registered ops: {known}")
        return e

    def op(self, name: str):
        """The native `_launcher.Op` for `name` (built once)."""
        o = self._ops.get(name)
        if o is None:
            with self._lock:
                o = self._ops.get(name)
                if o is None:
                    o = self._ops[name] = self._build_op(self.entry(name))
        return o

    def _build_op(self, e: OpEntry):
        from ._runtime import launcher
        words, strings = assemble.op_words(e.spec)
        from .torch_library import autograd_path
        return launcher().Op(e.spec.name, words, strings, functools.partial(self._resolve, e),
                             functools.partial(_fallback, e.spec), functools.partial(autograd_path, e.spec))

    def arch_of(self, dev: int) -> str | None:
        import torch
        return ARCH_OF_CAPABILITY.get(tuple(torch.cuda.get_device_capability(dev)))

    def _resolve(self, e: OpEntry, dev: int):
        """Variants serving `dev` in priority order; None runs the reference (when allowed)."""
        fallback = env.fallback_reference()
        if dev < 0:
            if fallback:
                return None
            raise ValueError(f"{e.spec.name}: arguments are on the CPU; tkreg kernels run on CUDA "
                             "devices (set TKREG_FALLBACK=reference to run the torch reference)")
        arch = self.arch_of(dev)
        if arch is None or arch not in e.variants:
            if fallback:
                return None
            import torch
            cap = "%d.%d" % tuple(torch.cuda.get_device_capability(dev))
            raise UnsupportedDeviceError(
                f"{e.spec.name}: cuda:{dev} has compute capability {cap}"
                + (f" ({arch})" if arch else "") + f"; the installed packs hold {e.archs() or 'nothing'} "
                "for this op. Set TKREG_FALLBACK=reference to run the torch reference instead.")
        return self.table(e, arch)

    def table(self, e: OpEntry, arch: str) -> tuple:
        t = e.tables.get(arch)
        if t is None:
            from ._runtime import launcher
            V = launcher().Variant
            rows = sorted(e.variants[arch], key=lambda r: (-r[0].get("priority", 0), r[0]["key"]))
            t = tuple(V(v["key"], *assemble.variant_words(e.spec, v),
                        functools.partial(manifest.read_cubin, d, v, e.spec.name)) for v, d, _ in rows)
            e.tables[arch] = t
        return t

    def explain(self, name: str, args: tuple, arch: str | None = None) -> list:
        """[(variant key, chosen, reason)] for a launcher-ordered call, without launching."""
        e = self.entry(name)
        op = self.op(e.name)
        if arch is None:
            dev = op.device_of(*args)
            table = self._resolve(e, dev)
            if table is None:
                return [("<torch reference>", True, "TKREG_FALLBACK=reference and no pack serves this device")]
        else:
            if arch not in e.variants:
                raise UnsupportedDeviceError(f"{e.spec.name}: no variants for {arch}; have {e.archs()}")
            table = self.table(e, arch)
        return op.explain(args, table)


def _fallback(spec: OpSpec, args: tuple, miss: str | None):
    """Called by the launcher when no pack serves the device (miss=None: the user opted in), or
    when no variant accepts the arguments (miss: the explanation)."""
    if miss is not None and not env.fallback_reference():
        raise NoKernelError(miss)
    return _run_reference(spec, args)


def _run_reference(spec: OpSpec, args: tuple):
    """TKREG_FALLBACK=reference: the torch reference, writing into `out=` tensors if given."""
    mod, _, fn = (spec.reference or "").partition(":")
    if not fn:
        raise UnsupportedDeviceError(f"{spec.name} has no torch reference to fall back to")
    ref = getattr(importlib.import_module(mod), fn)
    nt = len(spec.tensors)
    kw, outs = {}, []
    for t, a in zip(spec.tensors, args[:nt]):
        if t.role in ("input", "inplace"):
            kw[t.name] = a
        elif t.role == "output":
            outs.append(a)
    for s, a in zip(spec.scalars, args[nt:]):
        kw[s.name] = a
    res = ref(**kw)
    res = res if isinstance(res, tuple) else (res,) if res is not None else ()
    final = []
    for given, r in zip(outs, res):
        if given is not None:
            given.copy_(r)
            r = given
        final.append(r)
    return final[0] if len(final) == 1 else (tuple(final) if final else None)


REGISTRY = Registry()


class _OpTable(dict):
    """name -> native Op, built on first lookup (the typed functions' fast path)."""

    def __missing__(self, name):
        op = self[name] = REGISTRY.op(name)
        return op


OPS = _OpTable()
