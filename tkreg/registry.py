"""The registry: kernel packs -> ops and, per arch, the compiled variants that serve each.

Packs load on first use (built-in, then TKREG_PACKS / register_pack, then plugins sorted by
entry-point name), and an op's records are parsed the first time it is used.  This module
knows nothing of torch or the launcher: tkreg/runtime.py turns entries into native ops.

Who gets an op's plain name (`ns.op`), pack by pack in load order:
- the first pack to define it owns it; a later pack defining it again gets a warning naming both
  and never replaces it (so no plugin replaces a built-in);
- a pack op with `extends=True` adds its variants to the owner's when the signatures match
  (priorities then decide between them), else a warning and nothing is added;
- plugin ops may not take a plain name in the built-ins' `tkreg` namespace (only extend one).
Every op of a plugin is also reachable as `<entry-point name>:<op>` with that plugin's variants
only, whatever happened to the plain name.  A pack other than the built-in one is checked whole
when it loads (specs, plans, cubins), and per-op conflicts never drop its other ops.  A broken
pack is refused whole: `register_pack` raises PackError with the reason and changes nothing; a
TKREG_PACKS or plugin pack (found, not asked for by a call) is skipped with one warning, and a
call to an op its manifests list names that pack and the reason in its NoKernelError.

When torch has already initialised CUDA, only the built-in manifests of the visible GPUs' archs
are read at first; the others (their JSON is half the load time) are read by `complete()`, which
everything needing every arch calls (listing, doctor, verify, registering every torch op, a lookup
miss, a device or `explain(arch=)` of an unread arch, a later pack naming a `tkreg.*` op not read
yet).  The end state is that of a full load.
"""
from __future__ import annotations

import json
import logging
import sys
import threading
import warnings
from pathlib import Path

from . import env, manifest
from .elf import ARCHS, check_cubin
from .errors import NoKernelError, PackError
from .spec import OpSpec, Variant

log = logging.getLogger("tkreg")

ARCH_OF_CAPABILITY = {cap: arch for arch, cap in ARCHS.items()}
BUILTIN_PACKS = Path(__file__).resolve().parent / "packs"
BUILTIN_NAMESPACE = "tkreg"


def visible_archs() -> set | None:
    """The archs of the visible GPUs, or None (read every arch) unless torch has already
    initialised CUDA: asking would initialise it, which costs more than the JSON saved and must
    not happen behind the user's back (fork-safety, CUDA_VISIBLE_DEVICES set later)."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        return {ARCH_OF_CAPABILITY.get(tuple(torch.cuda.get_device_capability(i)))
                for i in range(torch.cuda.device_count())}
    except Exception:  # noqa: BLE001 - a half-imported or CUDA-less torch: read everything
        return None


class PackSource:
    """One pack the registry saw, for `tkreg doctor` and `tkreg list`."""

    def __init__(self, name: str, path: Path | None, plugin: str | None = None, dist: str | None = None):
        self.name, self.path, self.state = name, path, "loaded"
        self.archs: list = []
        self.ops: list = []        # plain op names this pack owns or extends
        self.held: list = []       # skipped: the op names its readable manifests list
        self.plugin = plugin       # entry-point name, for plugin packs
        self.dist = dist           # "tkreg-example 0.1.0", for plugin packs
        self.notes: list = []      # conflicts, one line each

    @property
    def label(self) -> str:
        return self.name + (f" ({self.dist})" if self.dist else "")


class Candidate:
    """One compiled variant serving an op on one arch: what the tables and explain show."""
    __slots__ = ("key", "variant", "record", "folder", "source")

    def __init__(self, key: str, variant: Variant, record: manifest.VariantRecord, folder: Path, source: str):
        self.key = key            # `plugin:key` for a plugin's variant of another pack's op
        self.variant = variant    # params, rule, priority
        self.record = record      # cubin and plan
        self.folder = folder
        self.source = source      # the PackSource name

    def cubin(self, op: str, arch: str) -> bytes:
        """The bytes the launcher loads: sha256 and ELF checked first (the driver trusts them)."""
        data = manifest.read_cubin(self.folder, self.record, op)
        try:
            check_cubin(data, arch)
        except ValueError as e:
            raise PackError(f"{op}[{self.key}]: {self.folder / self.record.cubin}: {e}") from None
        return data


class OpEntry:
    """One op under one registry name, with the manifests (per arch) its variants come from."""

    def __init__(self, owner: str, name: str, sources: dict | None = None):
        self.owner = owner
        self.name = name                    # registry key: `ns.op` or `plugin:ns.op`
        self.sources = sources or {}        # arch -> [(Manifest, op name, key prefix, source)]
        self._spec: OpSpec | None = None
        self._candidates: dict = {}         # arch -> [Candidate], priority order

    @property
    def spec(self) -> OpSpec:
        if self._spec is None:
            m, op, _, _ = next(iter(self.sources.values()))[0]
            self._spec = m.op(op).spec
        return self._spec

    def archs(self) -> list[str]:
        return sorted(self.sources)

    def candidates(self, arch: str) -> list[Candidate]:
        got = self._candidates.get(arch)
        if got is None:
            got = []
            for m, op, prefix, source in self.sources.get(arch, ()):
                rec = m.op(op)
                by_key = {v.key: v for v in rec.spec.variants}
                got += [Candidate(prefix + r.key, by_key[r.key], r, m.folder, source) for r in rec.variants
                        if not env.skipped_variant(self.name, r.key)]
            got.sort(key=lambda c: (-c.variant.priority, c.key))
            self._candidates[arch] = got
        return got

    def keys(self, arch: str) -> list[str]:
        return sorted(c.key for c in self.candidates(arch))


def _signature(raw: dict) -> dict:
    """What must agree between archs, and between an op and a pack extending it."""
    return {k: raw.get(k) for k in ("name", "tensors", "scalars", "index64")}


def check_pack(manifests: list) -> None:
    """Every spec, plan and cubin of a pack sound: sha256, ELF arch, and the structs the launcher
    would copy (the same range checks the first call runs).  Run when a pack other than the
    built-in one loads, so a broken pack is skipped up front instead of failing at its first
    launch; what only the driver can check (the cubin's kernels and their parameters) waits for
    the module load.  PackError names what is wrong."""
    from .assemble import op_args, variant_args
    from .native import launcher
    L = launcher()
    for m in manifests:
        for name, rec in m.ops().items():
            L.Op(name, *op_args(rec.spec), (None,) * 4)
            by_key = {v.key: v for v in rec.spec.variants}
            for r in rec.variants:
                try:
                    check_cubin(manifest.read_cubin(m.folder, r, name), m.arch)
                except ValueError as e:
                    raise PackError(f"{name}[{r.key}]: {m.folder / r.cubin}: {e}") from None
                L.Variant(r.key, *variant_args(rec.spec, by_key[r.key].kwargs(), r.plan, f"{name}[{r.key}]"), None)


class Registry:
    def __init__(self):
        self._lock = threading.RLock()
        self._loaded = False
        self.sources: list[PackSource] = []
        self.entries: dict[str, OpEntry] = {}      # plain names: `ns.op`
        self.qualified: dict[str, OpEntry] = {}    # `plugin:ns.op` -> that plugin's own variants
        self._extra: list[Path] = []
        self._refused: PackError | None = None     # register_pack's pack, refused by the first load
        self._deferred: tuple | None = None        # (built-in PackSource, arch dirs not read yet)

    # ---- loading ------------------------------------------------------------------------
    def ensure(self) -> "Registry":
        if not self._loaded:
            with self._lock:
                if not self._loaded:
                    self._load_all()
                    self._loaded = True
        return self

    def complete(self) -> "Registry":
        """ensure(), and the built-in archs deferred by it read: every op and arch (see module doc)."""
        self.ensure()
        if self._deferred:
            with self._lock:
                if self._deferred:
                    self._load_deferred()
        return self

    def _load_deferred(self):
        src, dirs = self._deferred
        self._deferred = None   # first: a failure below is reported once, not on every lookup
        try:
            staged = self._read_pack(dirs, src.name, check=False)
            for op_name, (_, raw) in staged.items():
                cur = self.entries.get(op_name)
                if cur is not None and cur.owner == src.name:   # raw JSON: `cur.spec` would parse every plan
                    m, op, _, _ = next(iter(cur.sources.values()))[0]
                    if _signature(raw) != _signature(m.raw_ops[op]["spec"]):
                        raise PackError(f"op {op_name}: its spec differs between archs")
        except Exception as e:  # noqa: BLE001 - keep the archs already read; doctor shows the note
            return self._note(src, f"{src.label}: {', '.join(d.name for d in dirs)} unreadable ({e})")
        for op_name, (new, _) in staged.items():
            cur = self.entries.get(op_name)
            if cur is None:   # only deferred archs have it (a later pack naming it read them first)
                self.entries[op_name] = new
                src.ops.append(op_name)
                continue
            # Built-in rows first, archs in a full load's order (sorted, then those only a plugin
            # extending the op adds); the spec already parsed is kept (its signature matched).
            old = cur.sources
            mine = {a for a, rows in old.items() if any(r[3] == src.name for r in rows)}
            cur.sources = {a: new.sources.get(a, []) + old.get(a, []) for a in sorted(mine | set(new.sources))}
            cur.sources.update((a, rows) for a, rows in old.items() if a not in cur.sources)
            cur._candidates.clear()
        src.archs = sorted(set(src.archs) | {d.name for d in dirs})
        log.info("tkreg: %s: read deferred archs %s", src.label, ", ".join(d.name for d in dirs))

    def _load_all(self):
        self._add_pack(BUILTIN_PACKS, "tkreg (built-in)", builtin=True)
        for p in env.extra_packs():
            self._add_pack(Path(p), f"TKREG_PACKS:{p}")
        for p in self._extra:
            try:
                self._add_pack(p, f"register_pack:{p}", refuse=True)
            except PackError as e:   # raised by register_pack once everything else has loaded
                self._refused = e
        from . import plugins
        for p in plugins.discover():
            if p.error:
                self._skip(PackSource(f"plugin:{p.name}", None, plugin=p.name, dist=p.dist), p.error)
            else:
                self._add_pack(p.path, f"plugin:{p.name}", plugin=p.name, dist=p.dist)

    def _skip(self, src: PackSource, why: str):
        src.state = f"skipped: {why}"
        src.held = _listed_ops(src.path) if src.path else []
        self.sources.append(src)
        warnings.warn(f"tkreg: {src.label}: skipped: {why}", RuntimeWarning, stacklevel=4)

    def _note(self, src: PackSource, msg: str):
        """A per-op conflict: one warning, and a line under the pack in `tkreg doctor`."""
        src.notes.append(msg)
        warnings.warn(f"tkreg: {msg}", RuntimeWarning, stacklevel=5)

    def _add_pack(self, path: Path, name: str, builtin=False, plugin: str | None = None,
                  dist: str | None = None, refuse=False):
        """Load one pack; a broken one is skipped with a warning, or with `refuse` (the
        register_pack caller is there to be told) raises PackError and records nothing."""
        src = PackSource(name, Path(path), plugin=plugin, dist=dist)
        dirs = manifest.arch_dirs(path)
        if not dirs and builtin:  # a source checkout or a wheel built with TKREG_BUILD_PACKS=OFF
            src.state = "absent (wheel built without packs)"
            self.sources.append(src)
            return
        local = visible_archs() if builtin else None
        later = [d for d in dirs if d.name not in local] if local and local & {d.name for d in dirs} else []
        cause = None
        try:
            if not dirs:
                raise PackError(f"no <arch>/{manifest.FILENAME} under {path}")
            staged = self._read_pack([d for d in dirs if d not in later], name, check=not builtin)
        except PackError as e:
            why = str(e)
        except Exception as e:  # noqa: BLE001 - whatever is wrong with a pack skips it, not tkreg
            why, cause = f"unreadable pack ({type(e).__name__}: {e})", e
        else:
            why = None
        if why is not None:
            if refuse:
                raise PackError(f"pack {path} refused: {why}", pack=str(path)) from cause
            return self._skip(src, why)
        if self._deferred and any(n.split(".", 1)[0] == BUILTIN_NAMESPACE and n not in self.entries for n in staged):
            self._load_deferred()   # it may extend (or clash with) a built-in op not read yet
        src.archs = sorted({a for e, _ in staged.values() for a in e.sources})
        for op_name, (new, raw) in staged.items():
            self._merge(src, op_name, new, raw)
        self.sources.append(src)
        if later:
            self._deferred = (src, later)
        log.info("tkreg: %s: %d op(s), archs %s", src.label, len(staged), ", ".join(src.archs))

    def _read_pack(self, dirs: list, name: str, check: bool) -> dict:
        loaded = [manifest.load(d / manifest.FILENAME) for d in dirs]
        if check:
            check_pack(loaded)
        staged: dict = {}
        for m in loaded:
            for op_name, op in m.raw_ops.items():
                raw = op.get("spec") if isinstance(op, dict) else None
                if not isinstance(raw, dict) or raw.get("name") != op_name:
                    raise PackError(f"{m.path}: op {op_name}: spec missing or named otherwise")
                e, first = staged.setdefault(op_name, (OpEntry(name, op_name), raw))
                if _signature(first) != _signature(raw):
                    raise PackError(f"op {op_name}: its spec differs between archs")
                e.sources.setdefault(m.arch, []).append((m, op_name, "", name))
        return staged

    def _merge(self, src: PackSource, op_name: str, new: OpEntry, raw: dict):
        """Give `new` its plain name, its owner's extra variants, or a warning (see module doc)."""
        plugin = src.plugin
        if plugin:
            self.qualified[f"{plugin}:{op_name}"] = OpEntry(
                src.name, f"{plugin}:{op_name}", {a: list(vs) for a, vs in new.sources.items()})
        own = f"; this one is reachable only as `{plugin}:{op_name}`" if plugin else ""
        cur = self.entries.get(op_name)
        if raw.get("extends"):
            if cur is None:
                return self._note(src, f"{src.label} extends {op_name}, which no pack defines; "
                                  f"nothing added{own}")
            if _signature(raw) != _signature(cur.spec.to_json()):
                return self._note(src, f"{src.label} extends {op_name}, but its signature differs "
                                  f"from {cur.owner}'s; nothing added{own}")
            for arch, rows in new.sources.items():
                # A plugin's variants show as `plugin:key` in the owner's table (explain, list).
                cur.sources.setdefault(arch, []).extend(
                    (m, op, f"{plugin}:" if plugin else "", s) for m, op, _, s in rows)
                cur._candidates.pop(arch, None)
            src.ops.append(op_name)
            return
        if cur is None:
            if plugin and op_name.split(".", 1)[0] == BUILTIN_NAMESPACE:
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
        """Add a pack folder (holding <arch>/manifest.json) copied onto this machine.  A pack
        that fails the load-time checks raises PackError naming the pack and the reason, and
        leaves the registry as it was (the other packs still load on a first call)."""
        path = Path(path)
        with self._lock:
            if not self._loaded:
                self._extra.append(path)   # loaded in its place: after TKREG_PACKS, before plugins
                self.ensure()
                refused, self._refused = self._refused, None
                if refused is not None:
                    raise refused
                return next(s for s in reversed(self.sources) if s.path == path)
            n = len(self.sources)
            self._add_pack(path, f"register_pack:{path}", refuse=True)
            return self.sources[n]

    # ---- lookup ---------------------------------------------------------------------------
    def entry(self, name: str) -> OpEntry:
        """`ns.op` (or a bare `op` of the built-ins), or `plugin:ns.op` for one plugin's own."""
        self.ensure()
        if ":" in name:
            e = self.qualified.get(name)
        else:
            e = self.entries.get(name) or self.entries.get(f"{BUILTIN_NAMESPACE}.{name}")
        if e is None and self._deferred:   # the op may be in a built-in arch not read yet
            return self.complete().entry(name)
        if e is None:
            raise NoKernelError(self._unknown(name))
        return e

    def _unknown(self, name: str) -> str:
        """Why `name` is not registered: the skipped packs that list it (or the skipped plugin
        it qualifies) and their reasons first; else every registered op and every skipped pack."""
        skipped = [s for s in self.sources if s.state.startswith("skipped")]
        if ":" in name:   # `plugin:ns.op`: that plugin, whatever its manifests list
            held = [s for s in skipped if s.plugin == name.partition(":")[0]]
        else:
            held = [s for s in skipped if {name, f"{BUILTIN_NAMESPACE}.{name}"} & set(s.held)]
        if held:
            return (f"op {name!r} is in a pack tkreg skipped:\n  "
                    + "\n  ".join(f"{s.label}: {s.state}" + (f" [{s.path}]" if s.path and str(s.path) not in s.label
                                                              else "") for s in held)
                    + "\n(`tkreg doctor` lists every pack; `tkreg verify` checks them)")
        known = ", ".join(sorted(self.entries) + sorted(self.qualified)) \
            or "none (no pack loaded: see `tkreg doctor`)"
        hint = ("\nSkipped packs (one may have held it):\n  "
                + "\n  ".join(f"{s.label}: {s.state}" for s in skipped)) if skipped else ""
        return f"unknown op {name!r}; registered ops: {known}{hint}"


def _listed_ops(path: Path) -> list[str]:
    """The op names a skipped pack's manifests list, from whichever of them parse as JSON, so
    that a call to one of its ops can say why it is missing."""
    names: set = set()
    for d in manifest.arch_dirs(path):
        try:
            ops = json.loads((d / manifest.FILENAME).read_text()).get("ops")
        except Exception:  # noqa: BLE001 - an unreadable manifest lists nothing
            continue
        if isinstance(ops, dict):
            names.update(n for n in ops if isinstance(n, str))
    return sorted(names)
